// The vector kernels of every family this CPU runs (metric.cpp: portable, AVX2, AVX-512) against
// serial float64 references written here, on points from the origin to c|x|^2 = 1 - 2.4e-7.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "metric.h"
#include "support.h"

namespace poincare::test {
namespace {

constexpr double kU = 0x1.0p-24;  // float32 unit roundoff
constexpr double kC = 1.0;

// Lengths around every SIMD width and tail (4, 8, 16, 32 lanes).
const std::size_t kDims[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 100, 135};
const std::vector<double> kRadii = {0.0, 0.3, 0.7, 0.9, 0.999, 0.9999999};

}  // namespace

TEST_CASE("l2sq, l2sq_batch4 and l2sq_f64 of each kernel family match a serial float64 loop") {
  RestoreKernels restore;
  const auto families = kernel_families();
  MESSAGE("kernel families on this CPU: " << families.size() << " (best: "
                                          << metric::best_kernel_name() << ")");
  for (const std::string& family : families) {
    metric::select_kernels(family);
    const metric::Kernels& k = metric::kernels();
    REQUIRE(std::string(k.name) == family);
    Rng rng(11);
    for (const std::size_t dim : kDims) {
      CAPTURE(family);
      CAPTURE(dim);
      // Pairs far apart, and near pairs at the boundary (a point and a nudge of it).
      const auto xs = points(rng, 12, dim, kRadii, kC);
      std::vector<float> near(xs.begin() + 5 * dim, xs.begin() + 6 * dim);  // radius 0.9999999
      for (std::size_t i = 0; i < dim; i += 2) near[i] = std::nextafter(near[i], 0.0f);
      for (std::size_t a = 0; a < 12; ++a) {
        const float* q = xs.data() + a * dim;
        const float* rows[4];
        std::size_t nr = 0;
        for (std::size_t b = 0; b < 12; ++b) {
          const float* x = xs.data() + b * dim;
          const double ref = l2_ref(q, x, dim);
          // Every term is >= 0, so a sum of rounded terms is within (dim + 2) u of the exact one.
          const double tol32 = (static_cast<double>(dim) + 2.0) * kU * ref;
          CHECK(std::fabs(k.l2sq(q, x, dim) - ref) <= tol32);
          CHECK(std::fabs(metric::l2sq_reference(q, x, dim) - ref) <= tol32);
          CHECK(std::fabs(k.l2sq_f64(q, x, dim) - ref) <=
                (static_cast<double>(dim) + 2.0) * 0x1.0p-53 * ref);
          rows[nr++] = x;
          if (nr == 4) {  // four rows at a time: bit-identical to one at a time
            float out[4];
            k.l2sq_batch4(q, rows, dim, out);
            for (int j = 0; j < 4; ++j) CHECK(out[j] == k.l2sq(q, rows[j], dim));
            nr = 0;
          }
        }
        CHECK(k.l2sq(q, q, dim) == 0.0f);
      }
      const float* edge = xs.data() + 5 * dim;
      const double ref = l2_ref(edge, near.data(), dim);
      REQUIRE(ref > 0.0);
      CHECK(std::fabs(k.l2sq(edge, near.data(), dim) - ref) <=
            (static_cast<double>(dim) + 2.0) * kU * ref);
      CHECK(std::fabs(k.l2sq_f64(edge, near.data(), dim) - ref) <= 1e-14 * ref);
    }
  }
}

TEST_CASE("scan_tile of each kernel family: error bound holds and no point within tau is masked") {
  RestoreKernels restore;
  for (const std::string& family : kernel_families()) {
    metric::select_kernels(family);
    Rng rng(23);
    for (const std::size_t dim : {std::size_t{1}, std::size_t{7}, std::size_t{16},
                                  std::size_t{33}, std::size_t{100}}) {
      for (std::size_t nq = 1; nq <= metric::kMaxTileQueries; ++nq) {
        CAPTURE(family);
        CAPTURE(dim);
        CAPTURE(nq);
        const auto xs = points(rng, metric::kTileWidth, dim, kRadii, kC);
        // Queries at radii of their own, and one that is a stored lane itself.
        auto qs = points(rng, nq, dim, {0.5, 0.0, 0.999, 0.95, 0.9999999, 0.2}, kC);
        std::copy(xs.begin() + 3 * dim, xs.begin() + 4 * dim, qs.begin());
        std::vector<double> exact(nq * metric::kTileWidth);
        std::vector<float> taus(nq);
        for (std::size_t i = 0; i < nq; ++i) {
          std::vector<double> sorted;
          for (std::size_t j = 0; j < metric::kTileWidth; ++j) {
            const float* x = xs.data() + j * dim;
            const double e = l2_ref(qs.data() + i * dim, x, dim) *
                             factor_ref(sq_norm_ref(x, dim), kC);
            exact[i * metric::kTileWidth + j] = e;
            sorted.push_back(e);
          }
          std::sort(sorted.begin(), sorted.end());
          // tau: the 8th smallest exact rank, rounded up to float32.
          float t = static_cast<float>(sorted[7]);
          if (t < sorted[7]) t = std::nextafter(t, INFINITY);
          taus[i] = t;
        }
        for (const bool reference : {true, false}) {
          CAPTURE(reference);
          std::vector<float> rank(nq * metric::kTileWidth), err(nq * metric::kTileWidth);
          std::vector<std::uint32_t> mask(nq);
          metric::scan_rows(qs.data(), nq, xs.data(), dim, kC, taus.data(), reference,
                            rank.data(), err.data(), mask.data());
          for (std::size_t i = 0; i < nq; ++i) {
            std::size_t within = 0;
            for (std::size_t j = 0; j < metric::kTileWidth; ++j) {
              CAPTURE(i);
              CAPTURE(j);
              const std::size_t at = i * metric::kTileWidth + j;
              const bool bit = (mask[i] >> j) & 1u;
              // err bounds the distance of the float32 rank from the exact one ...
              CHECK(std::fabs(static_cast<double>(rank[at]) - exact[at]) <= err[at]);
              // ... the mask is what rank and err say ...
              CHECK(bit == (rank[at] - err[at] <= taus[i]));
              // ... and so every lane within tau is kept (a flat scan misses no result).
              if (exact[at] <= taus[i]) {
                CHECK(bit);
                ++within;
              }
            }
            CHECK(within >= 8);
          }
        }
      }
    }
  }
}

TEST_CASE("scalar metric functions: conformal factor, depth and distance near the boundary") {
  // The forms the core evaluates (factor as 1/((1 - r)(1 + r)), distance through asinh) against
  // the textbook forms in float64 at radii where the naive 1 - c|x|^2 is still exact enough.
  Rng rng(5);
  for (const double c : {1.0, 0.25, 3.0}) {
    const auto xs = points(rng, 24, 6, kRadii, c);
    for (std::size_t a = 0; a < 24; ++a) {
      const float* u = xs.data() + a * 6;
      const double su = sq_norm_ref(u, 6);
      CAPTURE(c);
      CAPTURE(su);
      CHECK(metric::conformal_factor(su, c) == doctest::Approx(factor_ref(su, c)).epsilon(1e-8));
      const double r = std::sqrt(c * su);
      CHECK(metric::depth_from_sq_norm(su, c) ==
            doctest::Approx(std::log((1.0 + r) / (1.0 - r)) / std::sqrt(c)).epsilon(1e-8));
      for (std::size_t b = 0; b < 24; ++b) {
        if (a == b) continue;
        const float* v = xs.data() + b * 6;
        const double l2 = l2_ref(u, v, 6);
        const double arg =
            1.0 + 2.0 * c * l2 / ((1.0 - c * su) * (1.0 - c * sq_norm_ref(v, 6)));
        const double d_ref = std::acosh(arg) / std::sqrt(c);
        const double delta = l2 * factor_ref(su, c) * factor_ref(sq_norm_ref(v, 6), c);
        // acosh near 1 loses digits to the argument's rounding: the tolerance follows it.
        CHECK(metric::distance_from_delta(delta, c) == doctest::Approx(d_ref).epsilon(1e-7));
      }
    }
  }
}

}  // namespace poincare::test
