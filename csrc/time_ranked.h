// Ranking rows that already carry a relevance (a keyword score) by relevance + the time term,
// for the Memory's keyword and hybrid modes: every match gets its time term before the cut.
#pragma once

#include <cstddef>
#include <cstdint>

#include "temporal.h"

namespace poincare {

// keys[i] = relevance[i] + time_coef * program.log_weight(columns, rows[i]) for each of the n
// rows, and top[0..m) the positions of the m = min(k, n) best keys, best first, ties by the
// smaller row. Returns m. Throws InvalidArgument, before writing anything, if a row is outside
// the columns or a relevance is NaN.
std::size_t rank_with_time_term(const DecayProgram& program, const TimeColumns& columns,
                                const std::int64_t* rows, const double* relevance, std::size_t n,
                                double time_coef, std::size_t k, double* keys, std::int64_t* top);

}  // namespace poincare
