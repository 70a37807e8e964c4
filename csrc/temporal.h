// Decay policies evaluated on the time columns at one query time: log w(x, t_q) in float64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace poincare {

// Term kinds; the numbers are shared with poincare_index/decay.py.
enum class DecayKind : int {
  kHalfLife = 1,
  kEbbinghaus = 2,
  kValidity = 3,
  kExponential = 4,
  kCustom = 5
};

// A user's weight function compiled to C (numba.cfunc): w(age_hours, access_count) in (0, 1].
// It must be pure and thread-safe: searches call it from several threads without the GIL.
using CustomWeightFn = double (*)(double, double);

// How the bound of a custom term over a time bucket is taken (decay.py's CustomDecay.bound):
// none (w <= 1), non-increasing in age for each access count (the maximum over the counts up
// to the bucket's largest, at its youngest age), or also non-decreasing in the count.
enum class CustomBound : int { kNone = 0, kAge = 1, kAgeAndAccess = 2 };

// One factor of a product of policies (see decay.py for the formulas):
//   kHalfLife    p0 = half-life in hours           log w = -ln2 dt / p0
//   kEbbinghaus  p0 = stability hours, p1 = boost  log w = -dt / (p0 (1 + p1 access_count))
//   kValidity    p0 = outside weight               log w = 0 inside [from, until), else ln p0
//   kExponential p0 = rate per hour                log w = -p0 dt
//   kCustom      p0 = the function's address (an integer below 2^53, exact in a double),
//                p1 = its CustomBound              log w = ln fn(dt, access_count), the value
//                clamped to (0, 1]: NaN or <= 0 count as the smallest normal double
struct DecayTerm {
  DecayKind kind;
  double p0;
  double p1;
  CustomWeightFn custom = nullptr;  // set by DecayProgram from p0 for kCustom
};

// Open ends of a validity window as stored in the column buffers (null in Arrow).
constexpr std::int64_t kOpenStart = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kOpenEnd = std::numeric_limits<std::int64_t>::max();

// Borrowed views of the per-row time columns: int64 microseconds since the epoch (UTC), the
// data buffers of the Arrow columns; access_count is written by touch (atomically). A null
// valid_from, valid_until or access_count means every row holds the default (kOpenStart,
// kOpenEnd, 0): the index allocates those columns only once some row differs.
struct TimeColumns {
  const std::int64_t* t = nullptr;
  const std::int64_t* valid_from = nullptr;
  const std::int64_t* valid_until = nullptr;
  std::uint32_t* access_count = nullptr;
  std::size_t rows = 0;
};

// A policy (a product of terms) bound to one query time.
class DecayProgram {
 public:
  DecayProgram() = default;
  // Throws InvalidArgument for an unknown kind or a parameter outside its range. Rows stamped
  // at most future_tolerance_us after at_us (clocks of two machines differ) count as stamped at
  // at_us; later ones did not exist yet and weigh future_weight.
  DecayProgram(std::vector<DecayTerm> terms, std::int64_t at_us, double future_weight,
               std::int64_t future_tolerance_us = 0);

  // Whether every row weighs 1 (no terms, and rows after the query time weigh 1 too): only
  // then are the time columns not read. A point stamped after the query time did not exist yet,
  // whatever the policy, so with no terms the future rule alone still applies.
  bool empty() const { return terms_.empty() && log_future_weight_ == 0.0; }
  bool uses_window() const { return uses_window_; }
  std::int64_t at_us() const { return at_us_; }
  // log w of `row`; rows stamped after the query time (beyond the tolerance) get
  // log(future_weight), with or without terms. 0 when empty().
  double log_weight(const TimeColumns& columns, std::size_t row) const;
  // The same from explicit values (for a test against the numpy reference).
  double log_weight_of(std::int64_t t, std::int64_t valid_from, std::int64_t valid_until,
                       std::uint32_t access_count) const;
  // An upper bound of log w over rows with t in [t_min, t_max] and access_count <= max_access
  // (validity windows bounded by 1).
  double log_weight_bound(std::int64_t t_min, std::int64_t t_max, std::uint32_t max_access) const;

 private:
  double log_weight_aged(double dt_hours, std::int64_t valid_from, std::int64_t valid_until,
                         std::uint32_t access_count, bool bound) const;

  std::vector<DecayTerm> terms_;
  std::int64_t at_us_ = 0;
  std::int64_t horizon_us_ = 0;  // at_us_ + tolerance, saturated at the int64 maximum
  double log_future_weight_ = 0.0;
  bool uses_window_ = false;  // some term reads valid_from / valid_until
  bool uses_access_ = false;  // some term reads access_count
};

// out[i] = program.log_weight(columns, rows[i]) for each of n rows (access counts read
// atomically). Throws InvalidArgument, before writing anything, if a row is outside the columns.
void log_weights_of_rows(const DecayProgram& program, const TimeColumns& columns,
                         const std::int64_t* rows, std::size_t n, double* out);

}  // namespace poincare
