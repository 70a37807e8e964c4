#include "temporal.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "access_counts.h"
#include "errors.h"

namespace poincare {

namespace {

constexpr double kMicrosPerHour = 3.6e9;

bool positive_finite(double v) { return std::isfinite(v) && v > 0.0; }

// (later - earlier) in hours, callers passing later >= earlier. The Python layer only admits
// times in 1678..2261, whose differences fit an int64; a difference that would not (a time
// from another caller) is computed in double instead of overflowing.
double age_hours(std::int64_t later, std::int64_t earlier) {
  std::int64_t d;
  if (__builtin_sub_overflow(later, earlier, &d))
    return (static_cast<double>(later) - static_cast<double>(earlier)) / kMicrosPerHour;
  return static_cast<double>(d) / kMicrosPerHour;
}

// log of a custom weight clamped to (0, 1]: a user's function may return anything, and one NaN
// in a score would corrupt the ranking of the whole query.
double clamped_log(double w) {
  if (!(w > 0.0)) return std::log(std::numeric_limits<double>::min());
  return w >= 1.0 ? 0.0 : std::log(w);
}

// Above this many access counts a kAge bound stops evaluating every count and answers 0 (w <= 1):
// still a bound, only a looser one.
constexpr std::uint32_t kMaxCountsInBound = 256;

double custom_log_weight(const DecayTerm& term, double dt_hours, std::uint32_t access_count,
                         bool bound) {
  if (!bound) return clamped_log(term.custom(dt_hours, static_cast<double>(access_count)));
  switch (static_cast<CustomBound>(static_cast<int>(term.p1))) {
    case CustomBound::kAgeAndAccess:
      return clamped_log(term.custom(dt_hours, static_cast<double>(access_count)));
    case CustomBound::kAge: {
      if (access_count > kMaxCountsInBound) return 0.0;
      double best = -std::numeric_limits<double>::infinity();
      for (std::uint32_t a = 0; a <= access_count; ++a)
        best = std::max(best, clamped_log(term.custom(dt_hours, static_cast<double>(a))));
      return best;
    }
    default:
      return 0.0;
  }
}

}  // namespace

DecayProgram::DecayProgram(std::vector<DecayTerm> terms, std::int64_t at_us, double future_weight,
                           std::int64_t future_tolerance_us)
    : terms_(std::move(terms)), at_us_(at_us) {
  if (!(future_weight > 0.0 && future_weight <= 1.0))
    throw InvalidArgument("future_weight must be in (0, 1], got " + std::to_string(future_weight));
  if (future_tolerance_us < 0) throw InvalidArgument("future_tolerance must be >= 0");
  if (__builtin_add_overflow(at_us, future_tolerance_us, &horizon_us_))
    horizon_us_ = std::numeric_limits<std::int64_t>::max();
  log_future_weight_ = std::log(future_weight);
  for (DecayTerm& term : terms_) {
    uses_window_ |= term.kind == DecayKind::kValidity;
    uses_access_ |= term.kind == DecayKind::kEbbinghaus || term.kind == DecayKind::kCustom;
    switch (term.kind) {
      case DecayKind::kHalfLife:
        if (!positive_finite(term.p0)) throw InvalidArgument("half-life hours must be > 0");
        break;
      case DecayKind::kEbbinghaus:
        if (!positive_finite(term.p0)) throw InvalidArgument("stability_hours must be > 0");
        if (!(std::isfinite(term.p1) && term.p1 >= 0.0))
          throw InvalidArgument("boost_per_access must be >= 0");
        break;
      case DecayKind::kValidity:
        if (!(term.p0 > 0.0 && term.p0 <= 1.0))
          throw InvalidArgument("outside_weight must be in (0, 1]");
        break;
      case DecayKind::kExponential:
        if (!(std::isfinite(term.p0) && term.p0 >= 0.0)) throw InvalidArgument("rate must be >= 0");
        break;
      case DecayKind::kCustom: {
        // The address travels in a double; below 2^53 it is exact, and user-space addresses on
        // the platforms we build for are below 2^48.
        if (!(term.p0 >= 1.0 && term.p0 < 9007199254740992.0) || std::floor(term.p0) != term.p0)
          throw InvalidArgument("a custom decay term needs a function address, got " +
                                std::to_string(term.p0));
        const int how = static_cast<int>(term.p1);
        if (static_cast<double>(how) != term.p1 || how < 0 || how > 2)
          throw InvalidArgument("custom decay bound must be 0, 1 or 2, got " +
                                std::to_string(term.p1));
        term.custom = reinterpret_cast<CustomWeightFn>(static_cast<std::uintptr_t>(term.p0));
        break;
      }
      default:
        throw InvalidArgument("unknown decay term kind " +
                              std::to_string(static_cast<int>(term.kind)));
    }
  }
}

double DecayProgram::log_weight_aged(double dt_hours, std::int64_t valid_from,
                                     std::int64_t valid_until, std::uint32_t access_count,
                                     bool bound) const {
  double total = 0.0;
  for (const DecayTerm& term : terms_) {
    switch (term.kind) {
      case DecayKind::kHalfLife:
        total -= 0.6931471805599453 * dt_hours / term.p0;
        break;
      case DecayKind::kEbbinghaus:
        total -= dt_hours / (term.p0 * (1.0 + term.p1 * static_cast<double>(access_count)));
        break;
      case DecayKind::kValidity:
        if (!bound && !(valid_from <= at_us_ && at_us_ < valid_until)) total += std::log(term.p0);
        break;
      case DecayKind::kExponential:
        total -= term.p0 * dt_hours;
        break;
      case DecayKind::kCustom:
        total += custom_log_weight(term, dt_hours, access_count, bound);
        break;
    }
  }
  return total;
}

double DecayProgram::log_weight_of(std::int64_t t, std::int64_t valid_from,
                                   std::int64_t valid_until, std::uint32_t access_count) const {
  if (empty()) return 0.0;
  if (t > horizon_us_) return log_future_weight_;
  if (terms_.empty()) return 0.0;
  // Within the tolerance a later stamp is the query time itself (age 0). The difference of two
  // int64 times fits a double exactly up to 2^53 us (285 years).
  const double dt_hours = t > at_us_ ? 0.0 : age_hours(at_us_, t);
  return log_weight_aged(dt_hours, valid_from, valid_until, access_count, false);
}

double DecayProgram::log_weight(const TimeColumns& c, std::size_t row) const {
  if (empty()) return 0.0;
  // Only the columns some term reads: each is a random access (a likely cache miss) per node.
  const bool from = uses_window_ && c.valid_from != nullptr;
  const bool until = uses_window_ && c.valid_until != nullptr;
  const bool access = uses_access_ && c.access_count != nullptr;
  return log_weight_of(c.t[row], from ? c.valid_from[row] : kOpenStart,
                       until ? c.valid_until[row] : kOpenEnd,
                       access ? load_count(c.access_count, row) : 0u);
}

void log_weights_of_rows(const DecayProgram& program, const TimeColumns& columns,
                         const std::int64_t* rows, std::size_t n, double* out) {
  for (std::size_t i = 0; i < n; ++i)
    if (rows[i] < 0 || static_cast<std::size_t>(rows[i]) >= columns.rows)
      throw InvalidArgument("row " + std::to_string(rows[i]) + " is outside the time columns (" +
                            std::to_string(columns.rows) + " rows)");
  for (std::size_t i = 0; i < n; ++i)
    out[i] = program.log_weight(columns, static_cast<std::size_t>(rows[i]));
}

double DecayProgram::log_weight_bound(std::int64_t t_min, std::int64_t t_max,
                                      std::uint32_t max_access) const {
  if (empty()) return 0.0;
  if (t_min > horizon_us_) return log_future_weight_;
  if (terms_.empty()) return 0.0;  // rows up to the horizon weigh 1, later ones less
  // Every built-in term decreases with age and increases with accesses: the newest time not
  // after the query time with the most accesses bounds the range (rows within the tolerance are
  // aged 0, later ones weigh future_weight <= 1). A custom term bounds itself as it declared.
  const std::int64_t newest = t_max > at_us_ ? at_us_ : t_max;
  const double dt_hours = age_hours(at_us_, newest);
  const double aged = log_weight_aged(dt_hours, kOpenStart, kOpenEnd, max_access, true);
  return t_max > horizon_us_ ? std::max(aged, log_future_weight_) : aged;
}

}  // namespace poincare
