// The compressed codes (codes.cpp): the software half conversion against the IEEE rules, the code
// kernels of every family against serial float64 references over the decoded rows, and each
// row's stored squared error against its float64 value, from the origin to c|x|^2 = 1 - 2.4e-7.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "codes.h"
#include "metric.h"
#include "support.h"

namespace poincare::test {
namespace {

constexpr double kU = 0x1.0p-24;  // float32 unit roundoff
const std::size_t kDims[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 135, 256};
const std::vector<double> kRadii = {0.0, 0.3, 0.7, 0.9, 0.999, 0.9999999};
const codes::CodeKind kKinds[] = {codes::CodeKind::kF16, codes::CodeKind::kSq8};

// The nearest half to f by the IEEE rules, computed in double from the value (not the bits):
// the reference for half_from_float on finite inputs.
double nearest_half(double f) {
  const double a = std::fabs(f);
  if (a >= 65520.0) return std::copysign(std::numeric_limits<double>::infinity(), f);
  // The spacing of halves at a: 2^-24 below 2^-14, else 2^(e - 10).
  const int e = a < 0x1.0p-14 ? -14 : std::ilogb(a);
  const double step = std::ldexp(1.0, e - 10);
  return std::copysign(std::nearbyint(a / step) * step, f);  // nearbyint: ties to even
}

}  // namespace

TEST_CASE("half conversion: every half round-trips, and floats round to the nearest half, ties to even") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = codes::float_from_half(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) continue;
    CAPTURE(h);
    CHECK(codes::half_from_float(f) == h);
  }
  Rng rng(5);
  for (int i = 0; i < 200000; ++i) {
    // Magnitudes from subnormal halves to past the largest.
    const float f = static_cast<float>(std::ldexp(rng.uniform(-1.0, 1.0), static_cast<int>(rng.below(44)) - 27));
    CAPTURE(f);
    CHECK(static_cast<double>(codes::float_from_half(codes::half_from_float(f))) == nearest_half(f));
  }
  // Exact ties between two halves go to the even one.
  CHECK(codes::half_from_float(1.0f + 0x1.0p-11f) == 0x3c00);
  CHECK(codes::half_from_float(1.0f + 3 * 0x1.0p-11f) == 0x3c02);
  CHECK(std::isnan(codes::float_from_half(codes::half_from_float(std::nanf("")))));
}

TEST_CASE("code kernels of each family match a float64 loop over the decoded row") {
  RestoreKernels restore;
  for (const std::string& family : kernel_families()) {
    metric::select_kernels(family);
    Rng rng(17);
    for (const codes::CodeKind kind : kKinds) {
      const codes::CodeL2SqFn kernel = codes::l2sq_kernel(kind);
      for (const std::size_t dim : kDims) {
        CAPTURE(family);
        CAPTURE(std::string(codes::kind_name(kind)));
        CAPTURE(dim);
        const auto xs = points(rng, 12, dim, kRadii, 1.0);
        std::vector<std::uint8_t> row(codes::row_bytes(kind, dim));
        std::vector<float> decoded(dim);
        for (std::size_t b = 0; b < 12; ++b) {
          codes::encode_row(kind, xs.data() + b * dim, dim, row.data());
          codes::decode_row(kind, row.data(), dim, decoded.data());
          for (std::size_t a = 0; a < 12; ++a) {
            const float* q = xs.data() + a * dim;
            const double ref = l2_ref(q, decoded.data(), dim);
            const double tol = (static_cast<double>(dim) + 4.0) * kU * ref + 1e-30;
            CHECK(std::fabs(kernel(q, row.data(), dim) - ref) <= tol);
            CHECK(std::fabs(codes::l2sq_reference(kind, q, row.data(), dim) - ref) <= tol);
          }
        }
      }
    }
  }
}

TEST_CASE("each code row stores its own squared error, and codes stay within their step") {
  Rng rng(23);
  for (const codes::CodeKind kind : kKinds) {
    for (const std::size_t dim : kDims) {
      CAPTURE(std::string(codes::kind_name(kind)));
      CAPTURE(dim);
      const auto xs = points(rng, 12, dim, kRadii, 1.0);
      std::vector<std::uint8_t> row(codes::row_bytes(kind, dim));
      std::vector<float> decoded(dim);
      for (std::size_t b = 0; b < 12; ++b) {
        const float* x = xs.data() + b * dim;
        codes::encode_row(kind, x, dim, row.data());
        codes::decode_row(kind, row.data(), dim, decoded.data());
        const double err = l2_ref(x, decoded.data(), dim);
        double max_abs = 0.0;
        for (std::size_t i = 0; i < dim; ++i) max_abs = std::max(max_abs, std::fabs(double(x[i])));
        // f16: the bias is float32 (one rounding); sq8: a float16 multiple of s^2, s = max/127
        // (relative 2^-11 and, below float16's normal range, absolute 2^-25 s^2).
        const double scale = max_abs / 127.0;
        const double tol = kind == codes::CodeKind::kF16
                               ? 2 * kU * err + 1e-45
                               : 0x1.0p-10 * err + 0x1.0p-24 * scale * scale;
        CHECK(std::fabs(codes::bias(kind, row.data()) - err) <= tol);
        for (std::size_t i = 0; i < dim; ++i) {
          const double e = std::fabs(double(x[i]) - double(decoded[i]));
          if (kind == codes::CodeKind::kF16)
            CHECK(e <= std::fabs(double(x[i])) * 0x1.0p-11 + 0x1.0p-25);
          else
            CHECK(e <= max_abs / 127.0 * (0.5 + 1e-6));
        }
      }
    }
  }
}

TEST_CASE("the storage's kinds by name; sq8 refuses dimensions past its header's range") {
  CHECK(codes::kind_from_name("f32") == codes::CodeKind::kNone);
  CHECK(codes::kind_from_name("f16") == codes::CodeKind::kF16);
  CHECK(codes::kind_from_name("sq8") == codes::CodeKind::kSq8);
  CHECK_THROWS_AS(codes::kind_from_name("pq"), InvalidArgument);
  CHECK(codes::row_bytes(codes::CodeKind::kNone, 64) == 0);
  CHECK(codes::row_bytes(codes::CodeKind::kF16, 64) == 132);
  CHECK(codes::row_bytes(codes::CodeKind::kSq8, 64) == 70);
  CHECK_THROWS_AS(VectorStorage(codes::kMaxSq8Dim + 1, 1.0, codes::CodeKind::kSq8),
                  InvalidArgument);
}

}  // namespace poincare::test
