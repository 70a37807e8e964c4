// DecayProgram (temporal.h): log weights of each term kind against their closed forms, the
// future rule (rows stamped after the query time beyond the tolerance weigh future_weight), the
// bound over a time bucket, and int64 edges the Python layer never passes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "errors.h"
#include "support.h"
#include "temporal.h"

namespace poincare::test {
namespace {

constexpr std::int64_t kHour = 3600LL * 1000000LL;
constexpr std::int64_t kMinute = 60LL * 1000000LL;
constexpr double kLn2 = 0.69314718055994530942;

DecayTerm term(DecayKind kind, double p0, double p1 = 0.0) { return DecayTerm{kind, p0, p1}; }

}  // namespace

TEST_CASE("DecayProgram: half-life and other terms against closed forms, and the future rule") {
  const std::int64_t at = 1700000000LL * 1000000LL;  // Nov 2023, in microseconds
  const std::int64_t tol = 5 * kMinute;
  const double future_weight = 0.25;
  const DecayProgram half(
      {term(DecayKind::kHalfLife, 24.0), term(DecayKind::kHalfLife, 168.0)}, at, future_weight,
      tol);
  CHECK(!half.empty());
  Rng rng(9);
  std::vector<std::int64_t> t;
  for (const double age_h : {0.0, 1e-6, 0.5, 24.0, 168.0, 1000.0, 24.0 * 365 * 30})
    t.push_back(at - static_cast<std::int64_t>(age_h * kHour));
  for (int i = 0; i < 50; ++i)
    t.push_back(at - static_cast<std::int64_t>(rng.uniform() * 5e3 * kHour));
  // Within the tolerance after the query time (age 0), and beyond it (future_weight).
  const std::vector<std::int64_t> soon = {at + 1, at + tol - 1, at + tol};
  const std::vector<std::int64_t> later = {at + tol + 1, at + kHour, at + 10000 * kHour};
  for (const std::int64_t ti : t) {
    const double age_h = static_cast<double>(at - ti) / 3.6e9;
    // Each half-life term: log(0.5 ^ (age / h)).
    const double ref = -kLn2 * age_h / 24.0 - kLn2 * age_h / 168.0;
    CAPTURE(age_h);
    CHECK(half.log_weight_of(ti, kOpenStart, kOpenEnd, 0) ==
          doctest::Approx(ref).epsilon(1e-12).scale(1e-300));
  }
  for (const std::int64_t ti : soon) CHECK(half.log_weight_of(ti, kOpenStart, kOpenEnd, 0) == 0.0);
  for (const std::int64_t ti : later)
    CHECK(half.log_weight_of(ti, kOpenStart, kOpenEnd, 0) == std::log(future_weight));

  // The rule holds without terms too; with future_weight 1 and no terms the program is empty.
  const DecayProgram no_terms({}, at, future_weight, tol);
  CHECK(!no_terms.empty());
  CHECK(no_terms.log_weight_of(at - kHour, kOpenStart, kOpenEnd, 0) == 0.0);
  CHECK(no_terms.log_weight_of(at + tol + 1, kOpenStart, kOpenEnd, 0) == std::log(future_weight));
  CHECK(DecayProgram({}, at, 1.0).empty());

  // Every kind at once, against the sum of its closed forms, with windows and access counts.
  const double stab = 48.0, boost = 0.5, outside = 0.1, rate = 0.01;
  const DecayProgram all(
      {term(DecayKind::kHalfLife, 72.0), term(DecayKind::kEbbinghaus, stab, boost),
       term(DecayKind::kValidity, outside), term(DecayKind::kExponential, rate)},
      at, future_weight, 0);
  CHECK(all.uses_window());
  const std::size_t n = 40;
  std::vector<std::int64_t> ts(n), from(n), until(n);
  std::vector<std::uint32_t> access(n);
  for (std::size_t i = 0; i < n; ++i) {
    ts[i] = at - static_cast<std::int64_t>(rng.uniform() * 2e3 * kHour);
    if (i % 7 == 3) ts[i] = at + 1 + static_cast<std::int64_t>(rng.below(1000));  // future
    const auto shift = [&] { return static_cast<std::int64_t>(rng.uniform(-10, 10) * kHour); };
    from[i] = i % 3 == 0 ? kOpenStart : at - shift();
    until[i] = i % 4 == 0 ? kOpenEnd : at + shift();
    access[i] = static_cast<std::uint32_t>(rng.below(20));
  }
  from[1] = at;       // the window is [from, until): from == at is inside
  until[2] = at;      // until == at is outside
  const TimeColumns cols{ts.data(), from.data(), until.data(), access.data(), n};
  std::vector<std::int64_t> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = static_cast<std::int64_t>(n - 1 - i);
  std::vector<double> batch(n);
  log_weights_of_rows(all, cols, rows.data(), n, batch.data());
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    double ref;
    if (ts[i] > at) {
      ref = std::log(future_weight);
    } else {
      const double age_h = static_cast<double>(at - ts[i]) / 3.6e9;
      const bool inside = from[i] <= at && at < until[i];
      ref = -kLn2 * age_h / 72.0 - age_h / (stab * (1.0 + boost * access[i])) +
            (inside ? 0.0 : std::log(outside)) - rate * age_h;
    }
    const double got = all.log_weight(cols, i);
    CHECK(got == doctest::Approx(ref).epsilon(1e-12));
    CHECK(batch[n - 1 - i] == got);
  }
  CHECK(all.log_weight_of(at - kHour, at, kOpenEnd, 0) ==
        doctest::Approx(-kLn2 / 72.0 - 1.0 / stab - rate).epsilon(1e-12));
  CHECK(all.log_weight_of(at - kHour, kOpenStart, at, 0) ==
        doctest::Approx(-kLn2 / 72.0 - 1.0 / stab + std::log(outside) - rate).epsilon(1e-12));

  // A row outside the columns is refused before anything is written.
  for (const std::int64_t bad : {std::int64_t{-1}, static_cast<std::int64_t>(n)}) {
    std::vector<std::int64_t> r = {0, bad};
    std::vector<double> out = {7.0, 7.0};
    CHECK_THROWS_AS(log_weights_of_rows(all, cols, r.data(), 2, out.data()), InvalidArgument);
    CHECK(out[0] == 7.0);
  }
}

TEST_CASE("DecayProgram: bounds over buckets, parameter checks, and int64 edges") {
  const std::int64_t at = 1700000000LL * 1000000LL;
  const double fw = 0.5;
  const DecayProgram p({term(DecayKind::kHalfLife, 12.0), term(DecayKind::kEbbinghaus, 30.0, 1.0)},
                       at, fw, 2 * kMinute);
  Rng rng(13);
  for (int b = 0; b < 200; ++b) {
    // A bucket [t_min, t_max] around the query time, and rows drawn inside it.
    std::int64_t t0 = at + static_cast<std::int64_t>(rng.uniform(-300, 5) * kHour);
    std::int64_t t1 = t0 + static_cast<std::int64_t>(rng.uniform(0, 10) * kHour);
    if (b % 10 == 0) t1 = t0;
    const auto max_access = static_cast<std::uint32_t>(rng.below(8));
    const double bound = p.log_weight_bound(t0, t1, max_access);
    for (int r = 0; r < 20; ++r) {
      const std::int64_t t =
          t0 + static_cast<std::int64_t>(rng.uniform() * static_cast<double>(t1 - t0));
      const auto a = static_cast<std::uint32_t>(rng.below(max_access + 1));
      CAPTURE(b);
      CAPTURE(t - at);
      CHECK(p.log_weight_of(t, kOpenStart, kOpenEnd, a) <= bound);
    }
  }

  CHECK_THROWS_AS(DecayProgram({term(DecayKind::kHalfLife, 0.0)}, at, fw), InvalidArgument);
  CHECK_THROWS_AS(DecayProgram({term(DecayKind::kHalfLife, NAN)}, at, fw), InvalidArgument);
  CHECK_THROWS_AS(DecayProgram({term(DecayKind::kEbbinghaus, 1.0, -1.0)}, at, fw), InvalidArgument);
  CHECK_THROWS_AS(DecayProgram({term(DecayKind::kValidity, 1.5)}, at, fw), InvalidArgument);
  CHECK_THROWS_AS(DecayProgram({term(DecayKind::kExponential, -0.1)}, at, fw), InvalidArgument);
  CHECK_THROWS_AS(DecayProgram({term(static_cast<DecayKind>(99), 1.0)}, at, fw), InvalidArgument);
  CHECK_THROWS_AS(DecayProgram({}, at, 0.0), InvalidArgument);
  CHECK_THROWS_AS(DecayProgram({}, at, 1.5), InvalidArgument);
  CHECK_THROWS_AS(DecayProgram({}, at, fw, -1), InvalidArgument);

  // The horizon saturates instead of overflowing: nothing is "after" a query near the int64 end.
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  const DecayProgram edge({term(DecayKind::kHalfLife, 1.0)}, max - 10, fw, 100);
  CHECK(edge.log_weight_of(max, kOpenStart, kOpenEnd, 0) == 0.0);
  // An age whose int64 difference overflows is computed in float64 instead.
  const std::int64_t oldest = std::numeric_limits<std::int64_t>::min() + 1;
  const double age_h = (static_cast<double>(max - 10) - static_cast<double>(oldest)) / 3.6e9;
  CHECK(edge.log_weight_of(oldest, kOpenStart, kOpenEnd, 0) ==
        doctest::Approx(-kLn2 * age_h).epsilon(1e-12));
}

}  // namespace poincare::test
