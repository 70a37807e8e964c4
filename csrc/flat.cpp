#include "flat.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "metric.h"
#include "topk.h"

namespace poincare {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// One query's view of the part of the database one worker scanned: the k smallest upper bounds
// seen (a max-heap, so tau is the k-th) and every point whose lower bound was <= tau when seen.
struct QueryState {
  std::vector<float> uppers;
  std::vector<std::pair<float, std::uint32_t>> candidates;  // (lower bound, slot)
  float tau = kInf;

  void consider(std::uint32_t slot, float rank, float err, std::size_t k) {
    const float lower = rank - err;
    if (!(lower <= tau)) return;
    candidates.emplace_back(lower, slot);
    const float upper = rank + err;
    if (uppers.size() < k) {
      uppers.push_back(upper);
      std::push_heap(uppers.begin(), uppers.end());
    } else if (upper < uppers.front()) {
      std::pop_heap(uppers.begin(), uppers.end());
      uppers.back() = upper;
      std::push_heap(uppers.begin(), uppers.end());
    }
    if (uppers.size() == k) tau = uppers.front();
    // tau only falls, so early candidates go stale: drop them now and then.
    if (candidates.size() > 8 * k + 256) {
      const float t = tau;
      candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                      [t](const auto& c) { return c.first > t; }),
                       candidates.end());
    }
  }
};

struct PreparedQuery {
  metric::TileQuery tile;
  double factor;
};

// Points per chunk: the packed tiles of one chunk stay in L2 (~256 KiB) while every query block
// streams over them.
std::size_t tiles_per_chunk(std::size_t dim) {
  const std::size_t bytes_per_tile = metric::kTileWidth * dim * sizeof(float);
  return std::max<std::size_t>(1, (256u << 10) / bytes_per_tile);
}

// Packs the slots [first_slot, end_slot) into tiles (coordinates lane-interleaved) with their
// norms and factors, as scan_tile reads them.
std::size_t pack_chunk(const VectorStorage& storage, std::size_t first_slot, std::size_t end_slot,
                       std::vector<float>& packed, std::vector<metric::TileInfo>& infos) {
  using metric::kTileWidth;
  const std::size_t dim = storage.dim();
  const std::size_t n_tiles = (end_slot - first_slot + kTileWidth - 1) / kTileWidth;
  packed.assign(n_tiles * kTileWidth * dim, 0.0f);
  infos.assign(n_tiles, metric::TileInfo{});
  for (std::size_t s = first_slot; s < end_slot; ++s) {
    const std::size_t t = (s - first_slot) / kTileWidth, j = (s - first_slot) % kTileWidth;
    const float* x = storage.vector(s);
    float* tile = packed.data() + t * kTileWidth * dim;
    for (std::size_t d = 0; d < dim; ++d) tile[d * kTileWidth + j] = x[d];
    const double sq = storage.sq_norm(s);
    infos[t].sq_norm[j] = static_cast<float>(sq);
    infos[t].norm[j] = static_cast<float>(std::sqrt(sq));
    infos[t].factor[j] = storage.rank_factor(s);
  }
  return n_tiles;
}

// Scans the slots [first_slot, end_slot) against every query, tile by tile, and calls
// hit(query, slot, rank, err) for each live slot whose lower bound rank - err reaches the
// query's threshold tau_of(query) (read before each tile: a k-NN threshold shrinks as it goes).
template <typename TauOf, typename Hit>
void scan_chunk(const VectorStorage& storage, const std::vector<PreparedQuery>& queries,
                std::size_t first_slot, std::size_t end_slot, std::vector<float>& packed,
                std::vector<metric::TileInfo>& infos, const TauOf& tau_of, const Hit& hit) {
  using metric::kTileWidth;
  const std::size_t dim = storage.dim();
  const std::size_t n_tiles = pack_chunk(storage, first_slot, end_slot, packed, infos);
  const auto scan_tile = metric::kernels().scan_tile;
  const std::uint8_t* deleted = storage.deleted_flags();
  constexpr std::size_t kBlock = 256;  // queries whose coordinates stay in cache together
  metric::TileQuery group[metric::kMaxTileQueries];
  float rank[metric::kMaxTileQueries * kTileWidth];
  float err[metric::kMaxTileQueries * kTileWidth];
  std::uint32_t mask[metric::kMaxTileQueries];
  for (std::size_t qb = 0; qb < queries.size(); qb += kBlock) {
    const std::size_t qb_end = std::min(queries.size(), qb + kBlock);
    for (std::size_t t = 0; t < n_tiles; ++t) {
      const std::size_t tile_first = first_slot + t * kTileWidth;
      const std::size_t lanes = std::min(kTileWidth, end_slot - tile_first);
      const std::uint32_t valid = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u);
      for (std::size_t q0 = qb; q0 < qb_end; q0 += metric::kMaxTileQueries) {
        const std::size_t ng = std::min(metric::kMaxTileQueries, qb_end - q0);
        for (std::size_t i = 0; i < ng; ++i) {
          group[i] = queries[q0 + i].tile;
          group[i].tau = tau_of(q0 + i);
        }
        scan_tile(group, ng, packed.data() + t * kTileWidth * dim, infos[t], dim, rank, err, mask);
        for (std::size_t i = 0; i < ng; ++i) {
          for (std::uint32_t m = mask[i] & valid; m != 0; m &= m - 1) {
            const unsigned j = static_cast<unsigned>(__builtin_ctz(m));
            const std::size_t slot = tile_first + j;
            if (deleted[slot]) continue;
            hit(q0 + i, static_cast<std::uint32_t>(slot), rank[i * kTileWidth + j],
                err[i * kTileWidth + j]);
          }
        }
      }
    }
  }
}

// Every chunk of the storage scanned on the pool (see scan_chunk), each worker with its own
// packing buffers; tau_of(worker, query) and hit(worker, query, slot, rank, err) see the worker,
// so each worker writes only its own state.
template <typename TauOf, typename Hit>
void scan_all(const VectorStorage& storage, const std::vector<PreparedQuery>& queries,
              ThreadPool& pool, const TauOf& tau_of, const Hit& hit) {
  const std::size_t n = storage.slots();
  const std::size_t chunk = tiles_per_chunk(storage.dim()) * metric::kTileWidth;
  const std::size_t n_chunks = (n + chunk - 1) / chunk;
  struct Buffers {
    std::vector<float> packed;
    std::vector<metric::TileInfo> infos;
  };
  std::vector<Buffers> buffers(static_cast<std::size_t>(pool.size()));
  pool.parallel_for(n_chunks, [&](std::size_t ci, int w) {
    const std::size_t first = ci * chunk, end = std::min(n, first + chunk);
    scan_chunk(
        storage, queries, first, end, buffers[w].packed, buffers[w].infos,
        [&](std::size_t qi) { return tau_of(w, qi); },
        [&](std::size_t qi, std::uint32_t slot, float rank, float err) {
          hit(w, qi, slot, rank, err);
        });
  });
}

}  // namespace

RangeHits flat_range_search(const VectorStorage& storage, const float* queries, std::size_t nq,
                            double radius, ThreadPool& pool) {
  const std::size_t dim = storage.dim();
  const double c = storage.curvature();
  // d < r  <=>  delta < sinh(sqrt(c) r / 2)^2 / c, and the tile's rank is delta / a(q).
  const double half = std::sinh(std::sqrt(c) * radius / 2.0);
  const double delta_limit = half * half / c;
  std::vector<PreparedQuery> prepared(nq);
  for (std::size_t i = 0; i < nq; ++i) {
    const float* q = queries + i * dim;
    const double sq = metric::sq_norm_exact(q, dim);
    prepared[i].factor = metric::conformal_factor(sq, c);
    // Rounded up a little so float32 rounding of the threshold itself never drops a point; the
    // float64 check below decides.
    const float tau = static_cast<float>(delta_limit / prepared[i].factor * (1.0 + 1e-6));
    prepared[i].tile = {q, static_cast<float>(sq), static_cast<float>(std::sqrt(sq)), tau};
  }
  // Candidates per worker and query, so each worker writes only its own lists.
  std::vector<std::vector<std::vector<std::uint32_t>>> found(
      static_cast<std::size_t>(pool.size()), std::vector<std::vector<std::uint32_t>>(nq));
  scan_all(
      storage, prepared, pool, [&](int, std::size_t qi) { return prepared[qi].tile.tau; },
      [&](int w, std::size_t qi, std::uint32_t slot, float, float) {
        found[w][qi].push_back(slot);
      });
  std::vector<std::vector<std::pair<float, std::int64_t>>> hits(nq);
  pool.parallel_for(nq, [&](std::size_t qi, int) {
    const float* q = queries + qi * dim;
    const auto l2sq_f64 = metric::kernels().l2sq_f64;
    for (const auto& per_worker : found)
      for (const std::uint32_t s : per_worker[qi]) {
        const double delta =
            l2sq_f64(q, storage.vector(s), dim) * prepared[qi].factor * storage.factor(s);
        // Decided on the reported float32 distance, as the graph's range search decides on its
        // k-NN distances: every reported D is < radius and both paths agree.
        const float d = static_cast<float>(metric::distance_from_delta(delta, c));
        if (static_cast<double>(d) < radius) hits[qi].emplace_back(d, storage.id(s));
      }
    std::sort(hits[qi].begin(), hits[qi].end());
  });
  RangeHits out;
  out.lims.assign(nq + 1, 0);
  for (std::size_t qi = 0; qi < nq; ++qi) out.lims[qi + 1] = out.lims[qi] + hits[qi].size();
  out.D.reserve(out.lims[nq]);
  out.I.reserve(out.lims[nq]);
  for (const auto& h : hits)
    for (const auto& [d, id] : h) {
      out.D.push_back(d);
      out.I.push_back(id);
    }
  return out;
}

void flat_search(const VectorStorage& storage, const float* queries, std::size_t nq, std::size_t k,
                 ThreadPool& pool, float* D, std::int64_t* I) {
  const std::size_t dim = storage.dim();
  const double c = storage.curvature();
  std::vector<PreparedQuery> prepared(nq);
  for (std::size_t i = 0; i < nq; ++i) {
    const float* q = queries + i * dim;
    const double sq = metric::sq_norm_exact(q, dim);
    prepared[i].tile = {q, static_cast<float>(sq), static_cast<float>(std::sqrt(sq)), kInf};
    prepared[i].factor = metric::conformal_factor(sq, c);
  }
  std::vector<std::vector<QueryState>> states(static_cast<std::size_t>(pool.size()),
                                              std::vector<QueryState>(nq));
  scan_all(
      storage, prepared, pool, [&](int w, std::size_t qi) { return states[w][qi].tau; },
      [&](int w, std::size_t qi, std::uint32_t slot, float rank, float err) {
        states[w][qi].consider(slot, rank, err, k);
      });

  // Merge the workers' views per query: tau is the k-th smallest upper bound over all of them.
  pool.parallel_for(nq, [&](std::size_t qi, int) {
    std::vector<float> uppers;
    for (const auto& ws : states)
      uppers.insert(uppers.end(), ws[qi].uppers.begin(), ws[qi].uppers.end());
    float tau = kInf;
    if (uppers.size() >= k) {
      std::nth_element(uppers.begin(), uppers.begin() + static_cast<std::ptrdiff_t>(k - 1),
                       uppers.end());
      tau = uppers[k - 1];
    }
    std::vector<std::uint32_t> slots;
    for (const auto& ws : states)
      for (const auto& cand : ws[qi].candidates)
        if (cand.first <= tau) slots.push_back(cand.second);
    write_exact_topk(storage, queries + qi * dim, prepared[qi].factor, slots, k, D + qi * k,
                     I + qi * k);
  });
}

}  // namespace poincare
