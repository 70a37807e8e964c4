// The graph walks' rank keys (rank.h) under every kernel family: PoincareRank<1> / <2> scoring
// rows four at a time and one at a time, pair_keys / pair_keys4 and l2_from_delta, against
// |q - x|^2 a(x) (and |q - x|^2) in float64.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rank.h"
#include "support.h"

namespace poincare::test {
namespace {

constexpr double kU = 0x1.0p-24;

// The relative error a float32 key may carry: the kernel's sum (dim + 2 roundings of terms
// >= 0), a(x) rounded to float32, and up to three products.
double key_tolerance(std::size_t dim) { return (static_cast<double>(dim) + 8.0) * kU; }

}  // namespace

TEST_CASE("PoincareRank keys, four rows at a time and one at a time, match float64 references") {
  RestoreKernels restore;
  const std::vector<double> radii = {0.0, 0.5, 0.9, 0.999, 0.9999999, 0.2, 0.97};
  for (const std::string& family : kernel_families()) {
    metric::select_kernels(family);
    Rng rng(3);
    for (const double c : {1.0, 0.5}) {
      for (const std::size_t dim : {std::size_t{1}, std::size_t{5}, std::size_t{16},
                                    std::size_t{19}, std::size_t{64}, std::size_t{70}}) {
        CAPTURE(family);
        CAPTURE(c);
        CAPTURE(dim);
        const std::size_t n = 23;  // five batches of four and a tail of three
        const auto rows = points(rng, n, dim, radii, c);
        const VectorStorage storage = storage_of(rows, dim, c);
        std::vector<std::uint32_t> slots(n);
        for (std::size_t j = 0; j < n; ++j) slots[j] = static_cast<std::uint32_t>(n - 1 - j);
        // A search query (scale 1) and a construction query (a stored row, scale a(q)).
        const auto query = point_at_radius(rng, dim, 0.95, c);
        const float* stored = storage.vector(4);  // radius 0.9999999
        const float stored_scale = storage.rank_factor(4);
        for (const bool construction : {false, true}) {
          CAPTURE(construction);
          const float* q = construction ? stored : query.data();
          const float scale = construction ? stored_scale : 1.0f;
          const double scale_ref =
              construction ? factor_ref(sq_norm_ref(stored, dim), c) : 1.0;
          const PoincareRank<2> rank2(storage, q, scale);
          const PoincareRank<1> rank1(storage, q, scale);
          std::vector<RankKeys<2>> k2(n);
          std::vector<RankKeys<1>> k1(n);
          rank2.score(slots.data(), n, k2.data());
          rank1.score(slots.data(), n, k1.data());
          for (std::size_t j = 0; j < n; ++j) {
            const std::uint32_t s = slots[j];
            CAPTURE(s);
            const float* x = storage.vector(s);
            const double l2 = l2_ref(q, x, dim);
            const double key = l2 * factor_ref(sq_norm_ref(x, dim), c) * scale_ref;
            CHECK(std::fabs(k2[j][1] - l2) <= key_tolerance(dim) * l2);
            CHECK(std::fabs(k2[j][0] - key) <= key_tolerance(dim) * key);
            // One order or two, a batch of four or one row: the same bits.
            CHECK(k1[j][0] == k2[j][0]);
            const RankKeys<2> one = rank2.score_one(s);
            CHECK(one[0] == k2[j][0]);
            CHECK(one[1] == k2[j][1]);
          }
          if (construction) CHECK(rank2.score_one(4)[0] == 0.0f);
        }
      }
    }
  }
}

TEST_CASE("pair_keys, pair_keys4 and l2_from_delta agree with delta(u, v) in float64") {
  RestoreKernels restore;
  for (const std::string& family : kernel_families()) {
    metric::select_kernels(family);
    Rng rng(17);
    const std::size_t dim = 33, n = 16;
    const double c = 1.0;
    const auto rows = points(rng, n, dim, {0.1, 0.6, 0.999, 0.9999999, 0.8}, c);
    const VectorStorage storage = storage_of(rows, dim, c);
    for (std::uint32_t u = 0; u < n; ++u) {
      for (std::uint32_t v0 = 0; v0 + 4 <= n; v0 += 4) {
        const std::uint32_t v[4] = {v0 + 3, v0, v0 + 2, v0 + 1};
        RankKeys<2> four[4];
        pair_keys4(storage, u, v, four);
        for (int j = 0; j < 4; ++j) {
          CAPTURE(family);
          CAPTURE(u);
          CAPTURE(v[j]);
          const RankKeys<2> one = pair_keys(storage, u, v[j]);
          CHECK(four[j][0] == one[0]);
          CHECK(four[j][1] == one[1]);
          const float* xu = storage.vector(u);
          const float* xv = storage.vector(v[j]);
          const double l2 = l2_ref(xu, xv, dim);
          const double delta =
              l2 * factor_ref(sq_norm_ref(xu, dim), c) * factor_ref(sq_norm_ref(xv, dim), c);
          CHECK(std::fabs(one[1] - l2) <= key_tolerance(dim) * l2);
          CHECK(std::fabs(one[0] - delta) <= key_tolerance(dim) * delta);
          // The second order's key from the first's: within a few ulp of the kernel's |u - v|^2.
          const float back = l2_from_delta(storage, u, v[j], one[0]);
          CHECK(std::fabs(static_cast<double>(back) - one[1]) <= 4.0 * kU * one[1]);
          // delta is symmetric up to the order of the products.
          CHECK(std::fabs(pair_keys(storage, v[j], u)[0] - one[0]) <= 4 * kU * one[0]);
        }
      }
    }
  }
}

}  // namespace poincare::test
