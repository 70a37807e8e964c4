// Exact search by a blocked scan of every live point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "storage.h"
#include "thread_pool.h"

namespace poincare {

// Writes the k nearest live points of each query by Poincaré distance to D (float32, ascending)
// and I (ids), padded with +inf / -1. Exact: the float32 scan keeps every point whose error
// bound could reach the k-th best, and those are re-scored in float64 (write_exact_topk).
// Queries must be validated points of the storage's dimension.
void flat_search(const VectorStorage& storage, const float* queries, std::size_t nq, std::size_t k,
                 ThreadPool& pool, float* D, std::int64_t* I);

// Range search results laid out as FAISS does: the hits of query i are D/I[lims[i]:lims[i+1]].
struct RangeHits {
  std::vector<std::uint64_t> lims;
  std::vector<float> D;
  std::vector<std::int64_t> I;
};

// Every live point at Poincaré distance < radius from each query, ascending by distance (ties
// by id). Exact: the float32 scan keeps every point whose error bound reaches the radius's rank
// threshold, and each is decided by its distance computed in float64 and reported in float32
// (so every reported distance is < radius). radius must be finite and > 0.
RangeHits flat_range_search(const VectorStorage& storage, const float* queries, std::size_t nq,
                            double radius, ThreadPool& pool);

}  // namespace poincare
