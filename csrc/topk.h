// Final step of every search: exact float64 distances for the finalists, k best ascending.
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

}  // namespace poincare
