#include "topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "errors.h"
#include "metric.h"

namespace poincare {

void write_exact_topk(const VectorStorage& storage, const float* q, double a_q,
                      std::vector<std::uint32_t>& slots, std::size_t k, float* D, std::int64_t* I) {
  const std::size_t dim = storage.dim();
  const double c = storage.curvature();
  thread_local std::vector<std::pair<double, std::int64_t>> exact;  // reused: no malloc per query
  exact.clear();
  // The finalists' rows were just read by the search, but their ids live in an array of its
  // own: start all those misses together rather than one per finalist.
  if (const std::int64_t* ids = storage.ids(); ids != nullptr)
    for (const std::uint32_t s : slots) __builtin_prefetch(ids + s);
  const auto l2sq_f64 = metric::kernels().l2sq_f64;
  for (const std::uint32_t s : slots) {
    double delta = l2sq_f64(q, storage.vector(s), dim) * a_q * storage.factor(s);
    // NaN only from an unverified mapped file: last, so partial_sort sees a strict weak order.
    if (std::isnan(delta)) delta = std::numeric_limits<double>::infinity();
    exact.emplace_back(delta, storage.id(s));
  }
  const std::size_t keep = std::min(k, exact.size());
  std::partial_sort(exact.begin(), exact.begin() + static_cast<std::ptrdiff_t>(keep), exact.end());
  for (std::size_t i = 0; i < keep; ++i) {
    D[i] = static_cast<float>(metric::distance_from_delta(exact[i].first, c));
    I[i] = exact[i].second;
  }
  for (std::size_t i = keep; i < k; ++i) {
    D[i] = std::numeric_limits<float>::infinity();
    I[i] = -1;
  }
}

void merge_topk(const std::vector<const float*>& part_D,
                const std::vector<const std::int64_t*>& part_I,
                const std::vector<std::size_t>& widths, std::size_t nq, std::size_t k, float* D,
                std::int64_t* I) {
  if (part_D.size() != widths.size() || part_I.size() != widths.size())
    throw InvalidArgument("merge_topk: parts and widths differ in number");
  // (distance, padding, id): ties by id as a local index breaks them (negative ids are ids),
  // the padding (id -1 at +inf) after any real entry at +inf.
  using Entry = std::tuple<float, bool, std::int64_t>;
  std::vector<Entry> row;
  for (std::size_t q = 0; q < nq; ++q) {
    row.clear();
    for (std::size_t p = 0; p < widths.size(); ++p) {
      const float* d = part_D[p] + q * widths[p];
      const std::int64_t* ids = part_I[p] + q * widths[p];
      for (std::size_t j = 0; j < widths[p]; ++j) {
        const float dist = std::isnan(d[j]) ? std::numeric_limits<float>::infinity() : d[j];
        row.emplace_back(dist, ids[j] == -1 && std::isinf(dist), ids[j]);
      }
    }
    const std::size_t keep = std::min(k, row.size());
    std::partial_sort(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(keep), row.end());
    for (std::size_t j = 0; j < k; ++j) {
      D[q * k + j] = j < keep ? std::get<0>(row[j]) : std::numeric_limits<float>::infinity();
      I[q * k + j] = j < keep ? std::get<2>(row[j]) : -1;
    }
  }
}

}  // namespace poincare
