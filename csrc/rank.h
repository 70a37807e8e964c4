// Rank computers: the orders a graph walk ranks stored points in, for one query. The only place
// the graph code writes the metric (docs/graph_walk.md explains the two orders).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "codes.h"
#include "hnsw_links.h"
#include "metric.h"
#include "storage.h"

namespace poincare {

// Keys of a point in each of a walk's orders; order 0 is the order its results are kept in.
template <int N>
using RankKeys = std::array<float, N>;

// The Poincaré rank computer for query q. Order 0: |q - x|^2 a(x) s, monotone in the Poincaré
// distance d(q, x) for a fixed q (s is a constant: a(q) in construction, where keys must be
// delta(q, x), and 1 in searches). With N == 2, order 1 is |q - x|^2: the Poincaré order among
// points at one depth, which the first order hides behind shallower points (the second order).
template <int N>
class PoincareRank {
  static_assert(N == 1 || N == 2, "one or two orders");

 public:
  static constexpr int kOrders = N;
  using Keys = RankKeys<N>;

  PoincareRank(const VectorStorage& storage, const float* q, float scale)
      : storage_(storage), q_(q), scale_(scale), kernels_(metric::kernels()) {}

  const float* query() const { return q_; }

  // The keys of n slots (rows read four at a time: the walks are bound by memory latency).
  void score(const std::uint32_t* slots, std::size_t n, Keys* out) const {
    const std::size_t dim = storage_.dim();
    std::size_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const float* rows[4] = {storage_.vector(slots[j]), storage_.vector(slots[j + 1]),
                              storage_.vector(slots[j + 2]), storage_.vector(slots[j + 3])};
      float l2[4];
      kernels_.l2sq_batch4(q_, rows, dim, l2);
      for (int m = 0; m < 4; ++m) out[j + m] = keys_of(slots[j + m], l2[m]);
    }
    for (; j < n; ++j) out[j] = keys_of(slots[j], kernels_.l2sq(q_, storage_.vector(slots[j]), dim));
  }
  Keys score_one(std::uint32_t slot) const {
    Keys k;
    score(&slot, 1, &k);
    return k;
  }
  // Starts fetching what score() reads of `slot` (its float32 row).
  void prefetch(std::uint32_t slot) const {
    hnsw_detail::prefetch_row(storage_.vector(slot), storage_.dim() * sizeof(float));
  }

 private:
  Keys keys_of(std::uint32_t slot, float l2) const {
    Keys k;
    k[0] = l2 * scale_ * storage_.rank_factor(slot);
    if constexpr (N == 2) k[1] = l2;
    return k;
  }

  const VectorStorage& storage_;
  const float* q_;
  float scale_;
  const metric::Kernels& kernels_;
};

// The rank computer of a search over compressed storage (codes.h): the orders of PoincareRank
// with |q - x|^2 estimated from x's code row as |q - code(x)|^2 - |x - code(x)|^2 (the code's
// own squared error, stored in the row: what remains is 2 (q - x).(x - code(x)), which shrinks
// with |q - x|). a(x) is the float32 factor of the coordinates, never the codes'. Keys may be
// slightly negative; results are re-ranked from the float32 coordinates (topk.h).
template <int N>
class CodeRank {
  static_assert(N == 1 || N == 2, "one or two orders");

 public:
  static constexpr int kOrders = N;
  using Keys = RankKeys<N>;

  CodeRank(const VectorStorage& storage, const float* q)
      : storage_(storage), q_(q), l2sq_(codes::l2sq_kernel(storage.code_kind())) {}

  const float* query() const { return q_; }

  void score(const std::uint32_t* slots, std::size_t n, Keys* out) const {
    const std::size_t dim = storage_.dim();
    const codes::CodeKind kind = storage_.code_kind();
    for (std::size_t j = 0; j < n; ++j) {
      const std::uint8_t* row = storage_.code(slots[j]);
      const float l2 = l2sq_(q_, row, dim) - codes::bias(kind, row);
      Keys k;
      k[0] = l2 * storage_.rank_factor(slots[j]);
      if constexpr (N == 2) k[1] = l2;
      out[j] = k;
    }
  }
  Keys score_one(std::uint32_t slot) const {
    Keys k;
    score(&slot, 1, &k);
    return k;
  }
  void prefetch(std::uint32_t slot) const {
    hnsw_detail::prefetch_row(storage_.code(slot), storage_.code_bytes());
  }

 private:
  const VectorStorage& storage_;
  const float* q_;
  codes::CodeL2SqFn l2sq_;
};

// Calls walk(rank) with the rank computer of a search for q with N orders: CodeRank<N> when the
// storage keeps codes (and `coordinates` is false), else PoincareRank<N> (scale 1).
template <int N, typename Walk>
decltype(auto) with_search_rank(const VectorStorage& storage, const float* q, Walk&& walk,
                                bool coordinates = false) {
  if (!coordinates && storage.code_kind() != codes::CodeKind::kNone)
    return walk(CodeRank<N>(storage, q));
  return walk(PoincareRank<N>(storage, q, 1.0f));
}

// The keys of the pair (u, v) in both orders: delta(u, v) = |u - v|^2 a(u) a(v) and |u - v|^2.
// What neighbour selection compares (a kept neighbour r against a candidate e).
inline RankKeys<2> pair_keys(const VectorStorage& storage, std::uint32_t u, std::uint32_t v) {
  const float l2 = metric::kernels().l2sq(storage.vector(u), storage.vector(v), storage.dim());
  return {l2 * storage.rank_factor(u) * storage.rank_factor(v), l2};
}

// |u - v|^2 from delta(u, v) (the second order's key from the first's, within a few ulp).
inline float l2_from_delta(const VectorStorage& storage, std::uint32_t u, std::uint32_t v,
                           float delta) {
  return delta / (storage.rank_factor(u) * storage.rank_factor(v));
}

// Keys of candidate rows of one base point u in both orders, four rows at a time (the
// heuristic's inner loop).
inline void pair_keys4(const VectorStorage& storage, std::uint32_t u, const std::uint32_t* v,
                       RankKeys<2>* out) {
  const float* rows[4] = {storage.vector(v[0]), storage.vector(v[1]), storage.vector(v[2]),
                          storage.vector(v[3])};
  float l2[4];
  metric::kernels().l2sq_batch4(storage.vector(u), rows, storage.dim(), l2);
  const float au = storage.rank_factor(u);
  for (int j = 0; j < 4; ++j) out[j] = {l2[j] * au * storage.rank_factor(v[j]), l2[j]};
}

}  // namespace poincare
