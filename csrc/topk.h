// Final step of every search: exact float64 distances for the finalists, k best ascending; and
// the merge of several searches' top-k lists into one (the sharded index's driver).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "storage.h"

namespace poincare {

// Recomputes delta(q, x) in float64 for each slot in `slots` (q's factor is a_q), keeps the k
// nearest by exact distance (ties broken by id), and writes Poincaré distances (float32,
// ascending) to D and ids to I, padding with +inf / -1 when fewer than k remain.
// `slots` is reordered.
void write_exact_topk(const VectorStorage& storage, const float* q, double a_q,
                      std::vector<std::uint32_t>& slots, std::size_t k, float* D, std::int64_t* I);

// For each of nq rows, the k best entries of all parts by (distance, id) ascending, as a local
// index orders its results (a NaN distance counts as +inf; padding, id -1 at +inf, comes last);
// writes them to D and I (nq x k), padded with +inf / -1 when the parts hold fewer than k.
// Part p is nq x widths[p], row-major; its rows need not be sorted.
void merge_topk(const std::vector<const float*>& part_D,
                const std::vector<const std::int64_t*>& part_I,
                const std::vector<std::size_t>& widths, std::size_t nq, std::size_t k, float* D,
                std::int64_t* I);

}  // namespace poincare
