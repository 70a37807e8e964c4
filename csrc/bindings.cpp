// pybind11 layer: converts arrays in and out, releases the GIL around core work, and maps core
// exceptions to Python ones. No index logic lives here; poincare_index/*.py validates types and
// shapes before calling in.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "access_counts.h"
#include "crc32.h"
#include "errors.h"
#include "format.h"
#include "index.h"
#include "metric.h"
#include "postings.h"
#include "time_ranked.h"
#include "topk.h"

namespace py = pybind11;
using namespace poincare;

namespace {

using FloatArray = py::array_t<float, py::array::c_style>;
using IdArray = py::array_t<std::int64_t, py::array::c_style>;
using Int64Array = py::array_t<std::int64_t, py::array::c_style>;
using DoubleArray = py::array_t<double, py::array::c_style>;
using UInt32Array = py::array_t<std::uint32_t, py::array::c_style>;
using ByteArray = py::array_t<std::uint8_t, py::array::c_style>;
using SlotArray = py::array_t<std::uint32_t, py::array::c_style>;

// Checks the shape promised by the Python layer (a ValueError, never a crash, if it is broken).
std::size_t rows_of(const FloatArray& x, std::size_t dim, const char* what) {
  if (x.ndim() != 2 || static_cast<std::size_t>(x.shape(1)) != dim)
    throw InvalidArgument(std::string(what) + " must have shape (n, " + std::to_string(dim) + ")");
  return static_cast<std::size_t>(x.shape(0));
}

template <typename T>
std::size_t length_of(const py::array_t<T, py::array::c_style>& a) {
  if (a.ndim() != 1) throw InvalidArgument("expected a one-dimensional array");
  return static_cast<std::size_t>(a.shape(0));
}

// The common length of two vectors handed to a pair kernel (test entry points).
std::size_t pair_length(const FloatArray& a, const FloatArray& b) {
  if (a.size() != b.size()) throw InvalidArgument("vectors differ in length");
  return static_cast<std::size_t>(a.size());
}

// A vector's contents as a new one-dimensional numpy array.
template <typename T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
  py::array_t<T> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

// (n, 3) float64 rows [kind, p0, p1] -> decay terms (kinds are checked by DecayProgram).
std::vector<DecayTerm> decay_terms(const DoubleArray& terms) {
  if (terms.ndim() != 2 || terms.shape(1) != 3) throw InvalidArgument("terms must be (n, 3)");
  std::vector<DecayTerm> out;
  for (py::ssize_t i = 0; i < terms.shape(0); ++i)
    out.push_back(
        {static_cast<DecayKind>(static_cast<int>(terms.at(i, 0))), terms.at(i, 1), terms.at(i, 2)});
  return out;
}

// The time columns as ColumnStore.buffers() hands them over: (t, valid_from, valid_until,
// access_count); a valid_from, valid_until or access_count of None is a column the index has not
// allocated (every row holds the default) and becomes a null pointer.
using TimeColumnArrays = std::tuple<Int64Array, std::optional<Int64Array>, std::optional<Int64Array>,
                                    std::optional<UInt32Array>>;

TimeColumns time_columns(TimeColumnArrays& arrays) {
  const Int64Array& t = std::get<0>(arrays);
  const std::optional<Int64Array>& valid_from = std::get<1>(arrays);
  const std::optional<Int64Array>& valid_until = std::get<2>(arrays);
  std::optional<UInt32Array>& access_count = std::get<3>(arrays);
  const std::size_t rows = length_of(t);
  if ((valid_from && length_of(*valid_from) != rows) ||
      (valid_until && length_of(*valid_until) != rows) ||
      (access_count && length_of(*access_count) != rows))
    throw InvalidArgument("time columns differ in length");
  return {t.data(), valid_from ? valid_from->data() : nullptr,
          valid_until ? valid_until->data() : nullptr,
          access_count ? access_count->mutable_data() : nullptr, rows};
}

// The slots in time order as ColumnStore.time_buckets() gives them: (order, starts, t_min, t_max,
// max_access), checked against each other.
using TimeBucketArrays =
    std::tuple<SlotArray, Int64Array, Int64Array, Int64Array, UInt32Array>;

TimeBuckets time_buckets(const TimeBucketArrays& arrays, std::size_t scan_budget) {
  const auto& [order, starts, t_min, t_max, max_access] = arrays;
  const std::size_t nb = length_of(t_min);
  if (length_of(starts) != nb + 1 || length_of(t_max) != nb || length_of(max_access) != nb ||
      static_cast<std::size_t>(starts.data()[nb]) != length_of(order))
    throw InvalidArgument("time bucket arrays disagree in length");
  return {order.data(), starts.data(),     t_min.data(), t_max.data(),
          max_access.data(), nb, scan_budget};
}

template <typename Core>
void bind_common(py::class_<Core>& cls) {
  cls.def_property_readonly("dim", &Core::dim)
      .def_property_readonly("mapped", &Core::mapped)
      .def_property_readonly("verified", &Core::verified)
      .def("verify", &Core::verify, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("curvature", &Core::curvature)
      .def_property_readonly("storage",
                             [](const Core& s) { return codes::kind_name(s.code_kind()); })
      .def_property_readonly("ntotal", &Core::ntotal)
      .def_property_readonly("slots", &Core::slots)
      .def_property_readonly("next_auto_id", &Core::next_auto_id)
      .def("live_slots",
           [](const Core& self) {
             const std::vector<std::uint8_t> live = self.live_slots();
             py::array_t<bool> out(static_cast<py::ssize_t>(live.size()));
             std::copy(live.begin(), live.end(), out.mutable_data());
             return out;
           })
      .def("memory",
           [](const Core& self) {
             py::dict d;
             for (const auto& part : self.memory()) d[py::str(part.first)] = part.second;
             return d;
           })
      .def("slot_ids",
           [](const Core& self) {
             const std::vector<std::int64_t> ids = self.slot_ids();
             py::array_t<std::int64_t> out(static_cast<py::ssize_t>(ids.size()));
             std::copy(ids.begin(), ids.end(), out.mutable_data());
             return out;
           })
      .def_property("num_threads", &Core::num_threads, &Core::set_num_threads)
      .def("validate_points",
           [](const Core& self, const FloatArray& x, const std::string& what) {
             const std::size_t n = rows_of(x, self.dim(), what.c_str());
             const float* p = x.data();
             py::gil_scoped_release nogil;
             self.validate_points(p, n, what.c_str());
           })
      .def("validate_new_ids",
           [](const Core& self, const IdArray& ids) {
             const std::size_t n = length_of(ids);
             const std::int64_t* p = ids.data();
             py::gil_scoped_release nogil;
             self.validate_new_ids(p, n);
           })
      .def("reserve", &Core::reserve, py::call_guard<py::gil_scoped_release>())
      .def("plan_slots",
           [](Core& self, std::size_t n, bool reuse) {
             std::vector<std::uint32_t> slots;
             {
               py::gil_scoped_release nogil;
               slots = self.plan_slots(n, reuse);
             }
             py::array_t<std::uint32_t> out(slots.size());
             std::copy(slots.begin(), slots.end(), out.mutable_data());
             return out;
           })
      .def(
          "add",
          [](Core& self, const FloatArray& x, const IdArray& ids, const SlotArray& slots) {
            const std::size_t n = rows_of(x, self.dim(), "x");
            if (length_of(ids) != n) throw InvalidArgument("x and ids differ in length");
            if (static_cast<std::size_t>(slots.size()) != n)
              throw InvalidArgument("x and slots differ in length");
            const float* px = x.data();
            const std::int64_t* pi = ids.data();
            const std::uint32_t* ps = slots.data();
            py::gil_scoped_release nogil;
            self.add(px, n, pi, ps);
          },
          py::arg("x"), py::arg("ids"), py::arg("slots"))
      .def(
          "search",
          [](Core& self, const FloatArray& q, std::size_t k, std::size_t ef, bool first_part) {
            const std::size_t nq = rows_of(q, self.dim(), "query");
            py::array_t<float> D({nq, k});
            py::array_t<std::int64_t> I({nq, k});
            float* pd = D.mutable_data();
            std::int64_t* pi = I.mutable_data();
            const float* pq = q.data();
            {
              py::gil_scoped_release nogil;
              self.search(pq, nq, k, ef, pd, pi,
                          first_part ? WalkLists::kFirstPart : WalkLists::kWhole);
            }
            return py::make_tuple(D, I);
          },
          py::arg("q"), py::arg("k"), py::arg("ef"), py::arg("first_part") = false)
      .def("search_scored",
           [](Core& self, const FloatArray& q, std::size_t k, std::size_t ef, const ScoreSpec& spec,
              std::optional<TimeColumnArrays> columns, std::optional<ByteArray> allowed,
              std::optional<SlotArray> allowed_slots, std::optional<Int64Array> expected_ids,
              bool touch, std::optional<TimeBucketArrays> buckets, std::size_t scan_budget) {
             const std::size_t nq = rows_of(q, self.dim(), "query");
             typename Core::ScoredQuery sq;
             sq.params.score = spec;
             if (columns) {
               sq.params.columns = time_columns(*columns);
               sq.params.eligible_slots = sq.params.columns.rows;
             }
             if (allowed) {
               sq.params.allowed = allowed->data();
               sq.params.eligible_slots = std::min(sq.params.eligible_slots, length_of(*allowed));
             }
             if (allowed_slots) {
               sq.allowed_slots = allowed_slots->data();
               sq.n_allowed_slots = length_of(*allowed_slots);
             }
             sq.touch = touch;
             if (expected_ids) {
               sq.params.expected_ids = expected_ids->data();
               sq.params.n_expected_ids = length_of(*expected_ids);
             }
             if (buckets) sq.params.buckets = time_buckets(*buckets, scan_budget);
             py::array_t<std::int64_t> ids({nq, k});
             py::array_t<double> scores({nq, k}), dist({nq, k}), depths({nq, k}), logw({nq, k});
             py::array_t<std::uint32_t> reach(nq);
             typename Core::ScoredOutput out{ids.mutable_data(), scores.mutable_data(),
                                             dist.mutable_data(), depths.mutable_data(),
                                             logw.mutable_data(), reach.mutable_data()};
             const float* pq = q.data();
             {
               py::gil_scoped_release nogil;
               self.search_scored(pq, nq, k, ef, sq, out);
             }
             return py::make_tuple(ids, scores, dist, depths, logw, reach);
           })
      .def("remove",
           [](Core& self, const IdArray& ids) {
             const std::size_t n = length_of(ids);
             const std::int64_t* p = ids.data();
             py::gil_scoped_release nogil;
             return self.remove(p, n);
           })
      .def("reconstruct",
           [](const Core& self, std::int64_t id) {
             py::array_t<float> out(static_cast<py::ssize_t>(self.dim()));
             self.reconstruct(id, out.mutable_data());
             return out;
           })
      .def("reconstruct_batch",
           [](const Core& self, const IdArray& ids) {
             const std::size_t n = length_of(ids);
             py::array_t<float> out(
                 {static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(self.dim())});
             const std::int64_t* p = ids.data();
             float* po = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               self.reconstruct_batch(p, n, po);
             }
             return out;
           })
      .def("exact_range_search",
           [](Core& self, const FloatArray& q, double radius) {
             const std::size_t nq = rows_of(q, self.dim(), "query");
             const float* pq = q.data();
             RangeHits hits;
             {
               py::gil_scoped_release nogil;
               hits = self.exact_range_search(pq, nq, radius);
             }
             return py::make_tuple(to_numpy(hits.lims), to_numpy(hits.D), to_numpy(hits.I));
           })
      .def("contains", &Core::contains)
      .def("slots_of",
           [](const Core& self, const IdArray& ids) {
             const std::size_t n = length_of(ids);
             py::array_t<std::int64_t> out(static_cast<py::ssize_t>(n));
             const std::int64_t* p = ids.data();
             std::int64_t* po = out.mutable_data();
             {
               py::gil_scoped_release nogil;
               self.slots_of(p, n, po);
             }
             return out;
           })
      .def("save", &Core::save, py::call_guard<py::gil_scoped_release>());
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "C++ core of poincare_index (use the poincare_index package, not this module)";

  static py::exception<FormatError> format_error(m, "IndexFormatError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const KeyNotFound& e) {
      PyErr_SetString(PyExc_KeyError, e.what());
    } catch (const FormatError& e) {
      PyErr_SetString(format_error.ptr(), e.what());
    } catch (const IoError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    }
  });

  // A fused search's scoring, built once per call from the decay terms ((n, 3) rows [kind, p0,
  // p1]), the query time and the two coefficients; DecayProgram checks the terms.
  py::class_<ScoreSpec>(m, "ScoreSpec")
      .def(py::init([](const DoubleArray& terms, std::int64_t at_us, double future_weight,
                       std::int64_t future_tolerance_us, double depth_bias, double time_coef) {
             return ScoreSpec{
                 DecayProgram(decay_terms(terms), at_us, future_weight, future_tolerance_us),
                 depth_bias, time_coef};
           }),
           py::arg("terms"), py::arg("at_us"), py::arg("future_weight"),
           py::arg("future_tolerance_us"), py::arg("depth_bias"), py::arg("time_coef"))
      .def_readonly("depth_bias", &ScoreSpec::depth_bias)
      .def_readonly("time_coef", &ScoreSpec::time_coef)
      .def_property_readonly("at_us", [](const ScoreSpec& s) { return s.decay.at_us(); });

  py::class_<FlatIndexCore> flat(m, "FlatIndexCore");
  flat.def(py::init<std::size_t, double, int>(), py::arg("dim"), py::arg("curvature"),
           py::arg("num_threads"))
      .def_static("load", &FlatIndexCore::load, py::arg("vectors_path"), py::arg("num_threads"),
                  py::arg("mapped") = false, py::call_guard<py::gil_scoped_release>());
  bind_common(flat);

  py::class_<HnswIndexCore> hnsw(m, "HnswIndexCore");
  hnsw.def(py::init([](std::size_t dim, double curvature, int M, int ef_construction,
                       std::uint64_t seed, int num_threads, const std::string& storage) {
             HnswParams p;
             p.M = M;
             p.ef_construction = ef_construction;
             p.seed = seed;
             return std::make_unique<HnswIndexCore>(dim, curvature, p, num_threads,
                                                    codes::kind_from_name(storage));
           }),
           py::arg("dim"), py::arg("curvature"), py::arg("M"), py::arg("ef_construction"),
           py::arg("seed"), py::arg("num_threads"), py::arg("storage") = "f32")
      .def_static("load", &HnswIndexCore::load, py::arg("vectors_path"), py::arg("graph_path"),
                  py::arg("num_threads"), py::arg("mapped") = false,
                  py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("M", [](const HnswIndexCore& s) { return s.params().M; })
      .def_property_readonly("ef_construction",
                             [](const HnswIndexCore& s) { return s.params().ef_construction; })
      .def_property_readonly("seed", [](const HnswIndexCore& s) { return s.params().seed; })
      .def("neighbors", &HnswIndexCore::neighbors, py::arg("id"), py::arg("level"),
           py::arg("first_part") = false)
      .def(
          "set_storage",
          [](HnswIndexCore& s, const std::string& kind) {
            s.set_code_kind(codes::kind_from_name(kind));
          },
          py::arg("storage"), py::call_guard<py::gil_scoped_release>())
      .def("graph_switches",
           [](const HnswIndexCore& s) {
             const GraphSwitches w = s.graph_switches();
             py::dict d;
             d["second_order"] = w.second_order;
             d["cover_rule"] = w.cover_rule;
             d["reachability"] = w.reachability;
             d["ways_down"] = w.ways_down;
             d["ways_in"] = w.ways_in;
             d["refill_yields"] = w.refill_yields;
             return d;
           })
      .def(
          "set_graph_switches",
          [](HnswIndexCore& s, bool second_order, bool cover_rule, bool reachability,
             bool ways_down, bool ways_in, bool refill_yields) {
            GraphSwitches w;
            w.second_order = second_order;
            w.cover_rule = cover_rule;
            w.reachability = reachability;
            w.ways_down = ways_down;
            w.ways_in = ways_in;
            w.refill_yields = refill_yields;
            s.set_graph_switches(w);
          },
          py::arg("second_order"), py::arg("cover_rule"), py::arg("reachability"),
          py::arg("ways_down"), py::arg("ways_in"), py::arg("refill_yields"),
          py::call_guard<py::gil_scoped_release>())
      .def("check_integrity", [](const HnswIndexCore& s) {
        const GraphStats st = s.check_integrity();
        py::dict d;
        d["nodes"] = st.nodes;
        d["max_level"] = st.max_level;
        d["links"] = st.links;
        d["unreachable"] = st.unreachable;
        d["without_way_down"] = st.without_way_down;
        d["relocated_lists"] = st.relocated_lists;
        return d;
      });
  bind_common(hnsw);

  // Kernels, exposed so tests can hold each fast kernel against its serial reference.
  m.def("kernel_name", [] { return std::string(metric::kernels().name); });
  m.def("best_kernel_name", &metric::best_kernel_name);
  m.def("select_kernels", &metric::select_kernels, py::arg("name"));
  m.def("l2sq_reference", [](const FloatArray& a, const FloatArray& b) {
    return metric::l2sq_reference(a.data(), b.data(), pair_length(a, b));
  });
  m.def("l2sq_fast", [](const FloatArray& a, const FloatArray& b) {
    return metric::kernels().l2sq(a.data(), b.data(), pair_length(a, b));
  });
  m.def("l2sq_exact_reference", [](const FloatArray& a, const FloatArray& b) {
    return metric::l2sq_exact(a.data(), b.data(), pair_length(a, b));
  });
  m.def("l2sq_f64_fast", [](const FloatArray& a, const FloatArray& b) {
    return metric::kernels().l2sq_f64(a.data(), b.data(), pair_length(a, b));
  });
  // The C++ evaluation of a policy on rows of the time columns (keyword and hybrid search, and
  // the tests against the numpy reference).
  m.def("decay_log_weights_of_rows",
        [](const ScoreSpec& spec, TimeColumnArrays columns, const Int64Array& rows) {
          const TimeColumns view = time_columns(columns);
          const std::size_t n = length_of(rows);
          py::array_t<double> out(static_cast<py::ssize_t>(n));
          double* po = out.mutable_data();
          const std::int64_t* pr = rows.data();
          {
            py::gil_scoped_release nogil;
            log_weights_of_rows(spec.decay, view, pr, n, po);
          }
          return out;
        });
  m.def("sum_postings",
        [](const Int64Array& indptr, const py::array_t<std::int32_t, py::array::c_style>& indices,
           const py::array_t<float, py::array::c_style>& data, std::size_t n_docs,
           const Int64Array& terms, const Int64Array& doc_rows, const ByteArray& dead) {
          if (length_of(indptr) == 0) throw InvalidArgument("indptr must hold n_terms + 1 offsets");
          if (length_of(indices) != length_of(data))
            throw InvalidArgument("indices and data differ in length");
          if (length_of(doc_rows) != n_docs)
            throw InvalidArgument("doc_rows must hold one row per document");
          const Postings postings{indptr.data(), length_of(indptr) - 1, indices.data(),
                                  data.data(),   length_of(indices),    n_docs};
          std::vector<std::int64_t> rows;
          std::vector<double> sums;
          const std::int64_t* pt = terms.data();
          const std::size_t n_terms = length_of(terms);
          const std::int64_t* pr = doc_rows.data();
          const std::uint8_t* pd = dead.data();
          const std::size_t n_dead = length_of(dead);
          {
            py::gil_scoped_release nogil;
            sum_postings(postings, pt, n_terms, pr, pd, n_dead, rows, sums);
          }
          py::array_t<std::int64_t> out_rows(static_cast<py::ssize_t>(rows.size()));
          py::array_t<double> out_sums(static_cast<py::ssize_t>(sums.size()));
          std::copy(rows.begin(), rows.end(), out_rows.mutable_data());
          std::copy(sums.begin(), sums.end(), out_sums.mutable_data());
          return py::make_tuple(out_rows, out_sums);
        });
  m.def("rank_with_time_term",
        [](const ScoreSpec& spec, TimeColumnArrays columns, const Int64Array& rows,
           const DoubleArray& relevance, std::size_t k) {
          const TimeColumns view = time_columns(columns);
          const std::size_t n = length_of(rows);
          if (length_of(relevance) != n)
            throw InvalidArgument("rows and relevance differ in length");
          py::array_t<double> keys(static_cast<py::ssize_t>(n));
          py::array_t<std::int64_t> top(static_cast<py::ssize_t>(std::min(k, n)));
          double* pk = keys.mutable_data();
          std::int64_t* pt = top.mutable_data();
          const std::int64_t* pr = rows.data();
          const double* prel = relevance.data();
          {
            py::gil_scoped_release nogil;
            rank_with_time_term(spec.decay, view, pr, prel, n, spec.time_coef, k, pk, pt);
          }
          return py::make_tuple(keys, top);
        });
  m.def("l2sq_batch4_fast", [](const FloatArray& q, const FloatArray& rows) {
    // rows: (4, dim) -> the four distances of the selected batch kernel.
    if (rows.ndim() != 2 || rows.shape(0) != 4 || rows.shape(1) != q.size())
      throw InvalidArgument("rows must have shape (4, len(q))");
    const std::size_t dim = static_cast<std::size_t>(q.size());
    const float* r[4] = {rows.data(0, 0), rows.data(1, 0), rows.data(2, 0), rows.data(3, 0)};
    std::array<float, 4> out{};
    metric::kernels().l2sq_batch4(q.data(), r, dim, out.data());
    return out;
  });
  m.def(
      "scan_tile",
      [](const FloatArray& queries, const FloatArray& xs, const std::vector<float>& taus,
         bool reference) {
        // queries (nq <= 6, dim), xs (32, dim): returns (rank, err, mask) as computed by the
        // reference or the selected fast kernel.
        const std::size_t dim = static_cast<std::size_t>(queries.shape(1));
        const std::size_t nq = static_cast<std::size_t>(queries.shape(0));
        if (queries.ndim() != 2 || xs.ndim() != 2 || nq > metric::kMaxTileQueries ||
            static_cast<std::size_t>(xs.shape(0)) != metric::kTileWidth ||
            static_cast<std::size_t>(xs.shape(1)) != dim || taus.size() != nq)
          throw InvalidArgument("scan_tile wants queries (<=6, d), xs (32, d), one tau per query");
        py::array_t<float> rank({nq, metric::kTileWidth}), err({nq, metric::kTileWidth});
        std::vector<std::uint32_t> mask(nq);
        metric::scan_rows(queries.data(), nq, xs.data(), dim, 1.0, taus.data(), reference,
                          rank.mutable_data(), err.mutable_data(), mask.data());
        return py::make_tuple(rank, err, mask);
      },
      py::arg("queries"), py::arg("xs"), py::arg("taus"), py::arg("reference"));
  // The access_count column, read and written atomically (searches touch it concurrently).
  m.def(
      "copy_counts",
      [](const UInt32Array& counts, std::optional<Int64Array> rows) {
        const std::size_t n = length_of(counts);
        const std::size_t m = rows ? length_of(*rows) : n;
        UInt32Array out(static_cast<py::ssize_t>(m));
        copy_counts(counts.data(), n, rows ? rows->data() : nullptr, m, out.mutable_data());
        return out;
      },
      py::arg("counts").noconvert(), py::arg("rows") = py::none());
  m.def(
      "add_counts",
      [](UInt32Array& counts, const Int64Array& rows) {
        add_counts(counts.mutable_data(), length_of(counts), rows.data(), length_of(rows));
      },
      py::arg("counts").noconvert(), py::arg("rows"));
  m.def(
      "store_counts",
      [](UInt32Array& counts, const Int64Array& rows, const UInt32Array& values) {
        if (length_of(values) != length_of(rows))
          throw InvalidArgument("one value per row is needed");
        store_counts(counts.mutable_data(), length_of(counts), rows.data(), length_of(rows),
                     values.data());
      },
      py::arg("counts").noconvert(), py::arg("rows"), py::arg("values"));
  // The sharded index's merge: the parts' (nq, width) top-k lists into one (nq, k).
  m.def(
      "merge_topk",
      [](const std::vector<FloatArray>& distances, const std::vector<Int64Array>& ids,
         std::size_t nq, std::size_t k) {
        if (distances.size() != ids.size())
          throw InvalidArgument("merge_topk: one id array per distance array is needed");
        std::vector<const float*> pd;
        std::vector<const std::int64_t*> pi;
        std::vector<std::size_t> widths;
        for (std::size_t p = 0; p < distances.size(); ++p) {
          const FloatArray& d = distances[p];
          const Int64Array& i = ids[p];
          if (d.ndim() != 2 || i.ndim() != 2 || static_cast<std::size_t>(d.shape(0)) != nq ||
              d.shape(0) != i.shape(0) || d.shape(1) != i.shape(1))
            throw InvalidArgument("merge_topk: part " + std::to_string(p) +
                                  " is not a pair of (nq, width) arrays");
          pd.push_back(d.data());
          pi.push_back(i.data());
          widths.push_back(static_cast<std::size_t>(d.shape(1)));
        }
        py::array_t<float> D({nq, k});
        py::array_t<std::int64_t> I({nq, k});
        float* out_d = D.mutable_data();
        std::int64_t* out_i = I.mutable_data();
        {
          py::gil_scoped_release nogil;
          merge_topk(pd, pi, widths, nq, k, out_d, out_i);
        }
        return py::make_tuple(D, I);
      },
      py::arg("distances"), py::arg("ids"), py::arg("nq"), py::arg("k"));
  m.def("crc32", [](py::bytes data) {
    const std::string s = data;
    return crc32_update(0, s.data(), s.size());
  });
  m.attr("FORMAT_VERSION") = format::kVersion;
  m.attr("BALL_MARGIN") = metric::kBallMargin;
}
