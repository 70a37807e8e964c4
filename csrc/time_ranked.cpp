#include "time_ranked.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "errors.h"

namespace poincare {

std::size_t rank_with_time_term(const DecayProgram& program, const TimeColumns& columns,
                                const std::int64_t* rows, const double* relevance, std::size_t n,
                                double time_coef, std::size_t k, double* keys, std::int64_t* top) {
  for (std::size_t i = 0; i < n; ++i) {
    if (rows[i] < 0 || static_cast<std::size_t>(rows[i]) >= columns.rows)
      throw InvalidArgument("row " + std::to_string(rows[i]) + " is outside the time columns (" +
                            std::to_string(columns.rows) + " rows)");
    if (std::isnan(relevance[i]))
      throw InvalidArgument("relevance of row " + std::to_string(rows[i]) + " is NaN");
  }
  for (std::size_t i = 0; i < n; ++i) {
    // A policy of no terms weighs 1 (log 0): the key is the relevance, as in the Python path.
    const double term =
        program.empty() || time_coef == 0.0
            ? 0.0
            : time_coef * program.log_weight(columns, static_cast<std::size_t>(rows[i]));
    keys[i] = relevance[i] + term;
  }
  const std::size_t m = std::min(k, n);
  if (m == 0) return 0;
  // A partial selection, not a sort of every match (tens of thousands for common words): the
  // m-th best key by nth_element on a copy of the keys, then only the rows at or above it
  // (ties with it included, so the tie order by row is the full sort's) are sorted.
  thread_local std::vector<double> copy;
  copy.assign(keys, keys + n);
  std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(m - 1), copy.end(),
                   [](double a, double b) { return a > b; });
  const double kth = copy[m - 1];
  thread_local std::vector<std::int64_t> chosen;
  chosen.clear();
  for (std::size_t i = 0; i < n; ++i)
    if (keys[i] >= kth) chosen.push_back(static_cast<std::int64_t>(i));
  std::sort(chosen.begin(), chosen.end(), [&](std::int64_t a, std::int64_t b) {
    return keys[a] > keys[b] || (keys[a] == keys[b] && rows[a] < rows[b]);
  });
  std::copy(chosen.begin(), chosen.begin() + static_cast<std::ptrdiff_t>(m), top);
  return m;
}

}  // namespace poincare
