// Internal helpers shared by the HNSW translation units (hnsw.cpp, hnsw_connectivity.cpp): how
// link lists are read and written while several threads build the graph, and prefetching.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "metric.h"
#include "scratch.h"
#include "storage.h"

namespace poincare::hnsw_detail {

inline void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

// Link lists are read without their lock while other threads insert: every word of a list is
// written and read with relaxed atomic accesses, so a reader sees, word by word, either an old or
// a new value; each is a valid slot (lists start zeroed) and the count never exceeds the list's
// capacity, so a torn read only makes a construction search see a slightly stale neighbourhood,
// as in hnswlib and FAISS. Writers still serialize on the node's lock.
inline std::uint32_t load_relaxed(const std::uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
inline void store_relaxed(std::uint32_t* p, std::uint32_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
inline void copy_links_relaxed(const std::uint32_t* l, std::size_t capacity,
                               std::vector<std::uint32_t>& out) {
  const std::size_t count = std::min<std::size_t>(load_relaxed(l), capacity);
  out.resize(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = load_relaxed(l + 1 + i);
}

// Prefetches every cache line of a stored vector (rows are not line-aligned and span several
// lines; fetching only the first leaves the rest to demand misses).
inline void prefetch_row(const float* row, std::size_t bytes) {
  const char* p = reinterpret_cast<const char*>(row);
  for (std::size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
  __builtin_prefetch(p + bytes - 1, 0, 3);
}

// One expansion step of a beam search: marks the unvisited of the `count` slots at `links`
// (visited marks fetched first, then their rows and whatever `also_prefetch(n)` asks for), then
// calls `visit(n, l2)` for each with l2 = |q - x_n|^2, four rows at a time. The walks are bound
// by memory latency, not arithmetic. `fresh` needs room for `count` slots.
template <typename AlsoPrefetch, typename Visit>
inline void expand(const std::uint32_t* links, std::size_t count, const float* q,
                   const VectorStorage& storage, SearchScratch& scratch, std::uint32_t* fresh,
                   AlsoPrefetch&& also_prefetch, Visit&& visit) {
  const metric::Kernels& kernels = metric::kernels();
  const std::size_t dim = storage.dim();
  const std::size_t row_bytes = dim * sizeof(float);
  for (std::size_t i = 0; i < count; ++i) prefetch(scratch.visited.data() + links[i]);
  std::size_t n_fresh = 0;
  const std::size_t n_slots = storage.slots();
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t n = links[i];
    // Out of range only in an unverified mapped file (every load but a fast open checks every
    // link): skipped, one compare a link.
    if (n >= n_slots || scratch.seen(n)) continue;
    scratch.mark(n);
    prefetch_row(storage.vector(n), row_bytes);
    also_prefetch(n);
    fresh[n_fresh++] = n;
  }
  std::size_t j = 0;
  for (; j + 4 <= n_fresh; j += 4) {
    const float* rows[4] = {storage.vector(fresh[j]), storage.vector(fresh[j + 1]),
                            storage.vector(fresh[j + 2]), storage.vector(fresh[j + 3])};
    float l2[4];
    kernels.l2sq_batch4(q, rows, dim, l2);
    for (int m = 0; m < 4; ++m) visit(fresh[j + m], l2[m]);
  }
  for (; j < n_fresh; ++j) visit(fresh[j], kernels.l2sq(q, storage.vector(fresh[j]), dim));
}

// Starts a fresh level-0 beam in Euclidean order at `start` (new visited marks): frontier and
// results hold it alone, with its |q - start|^2 (results only when keep(start)).
template <typename Keep>
inline void start_l2_beam(SearchScratch& scratch, std::size_t n_slots, const float* q,
                          const VectorStorage& storage, std::uint32_t start, Keep&& keep) {
  scratch.begin(n_slots);
  const float l2 = metric::kernels().l2sq(q, storage.vector(start), storage.dim());
  scratch.mark(start);
  scratch.frontier.push_back({-l2, start});
  if (keep(start)) scratch.results.push_back({l2, start});
}

// Adds the nodes of a Euclidean beam (`l2_found`, by |q - x|^2) to `ranked` (by rank), with
// rank_of(c) as their rank, one entry per slot (the nearer rank kept); `ranked` ends up in slot
// order.
template <typename RankOf>
inline void merge_l2_found(std::vector<Candidate>& ranked, const std::vector<Candidate>& l2_found,
                           RankOf&& rank_of) {
  for (const Candidate& c : l2_found) ranked.push_back({rank_of(c), c.second});
  std::sort(ranked.begin(), ranked.end(), [](const Candidate& a, const Candidate& b) {
    return a.second < b.second || (a.second == b.second && a.first < b.first);
  });
  ranked.erase(
      std::unique(ranked.begin(), ranked.end(),
                  [](const Candidate& a, const Candidate& b) { return a.second == b.second; }),
      ranked.end());
}

}  // namespace poincare::hnsw_detail
