// Internal helpers shared by the graph's translation units and walks (beam.h): how link lists
// are read and written while several threads build the graph, and prefetching.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

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
inline void prefetch_row(const void* row, std::size_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (std::size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
  __builtin_prefetch(p + bytes - 1, 0, 3);
}

}  // namespace poincare::hnsw_detail
