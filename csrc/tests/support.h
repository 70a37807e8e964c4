// Shared helpers of the C++ unit tests: a generator with the same sequence on every platform,
// points at chosen radii, serial float64 references, a storage from rows, and the kernel
// families this CPU runs.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "errors.h"
#include "metric.h"
#include "storage.h"

namespace poincare::test {

// splitmix64 steps: std::mt19937 is portable but its distributions are not, so the tests draw
// from raw bits.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform in [0, n).
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
  // Standard normal (Box-Muller).
  double normal() {
    const double u = 1.0 - uniform();  // (0, 1]
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * uniform());
  }

 private:
  std::uint64_t s_;
};

// |x|^2 and |a - b|^2 in float64 by a plain serial loop.
inline double sq_norm_ref(const float* x, std::size_t dim) {
  double s = 0.0;
  for (std::size_t i = 0; i < dim; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}
inline double l2_ref(const float* a, const float* b, std::size_t dim) {
  double s = 0.0;
  for (std::size_t i = 0; i < dim; ++i) {
    const double t = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    s += t * t;
  }
  return s;
}
// a(x) = 1 / (1 - c|x|^2) (the plain form: |x|^2 of float32 coordinates is exact enough in
// float64 that the cancellation costs at most ~1e-9 relative at c|x|^2 = 1 - 1.2e-7).
inline double factor_ref(double sq_norm, double curvature) {
  return 1.0 / (1.0 - curvature * sq_norm);
}

// A float32 point of `dim` coordinates in a uniformly drawn direction at Euclidean radius about
// r / sqrt(c), pulled in by float32 steps until c|x|^2 < 1 - 1e-7 (what the index accepts).
inline std::vector<float> point_at_radius(Rng& rng, std::size_t dim, double r, double curvature) {
  std::vector<double> d(dim);
  double n2 = 0.0;
  while (n2 == 0.0) {
    n2 = 0.0;
    for (double& v : d) {
      v = rng.normal();
      n2 += v * v;
    }
  }
  const double scale = r / std::sqrt(curvature * n2);
  std::vector<float> x(dim);
  for (std::size_t i = 0; i < dim; ++i) x[i] = static_cast<float>(d[i] * scale);
  while (curvature * sq_norm_ref(x.data(), dim) >= 1.0 - metric::kBallMargin)
    for (float& v : x) v = std::nextafter(v, 0.0f);
  return x;
}

// n points (row-major, n x dim) with radii cycling through `radii`.
inline std::vector<float> points(Rng& rng, std::size_t n, std::size_t dim,
                                 const std::vector<double>& radii, double curvature) {
  std::vector<float> out;
  out.reserve(n * dim);
  for (std::size_t i = 0; i < n; ++i) {
    const auto p = point_at_radius(rng, dim, radii[i % radii.size()], curvature);
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

// A storage holding `rows` (n x dim) in slots 0..n-1 with ids equal to the slots.
inline VectorStorage storage_of(const std::vector<float>& rows, std::size_t dim, double curvature) {
  VectorStorage s(dim, curvature);
  const std::size_t n = rows.size() / dim;
  metric::validate_points(rows.data(), n, dim, curvature, "test point");
  const auto where = s.plan(n, false);
  std::vector<std::int64_t> ids(where.begin(), where.end());
  s.place(rows.data(), n, ids.data(), where.data());
  return s;
}

// The kernel families this CPU runs ("portable" always).
inline std::vector<std::string> kernel_families() {
  std::vector<std::string> out;
  for (const char* name : {"portable", "avx2", "avx512"}) {
    try {
      metric::select_kernels(name);
      out.push_back(name);
    } catch (const InvalidArgument&) {
    }
  }
  metric::select_kernels(metric::best_kernel_name());
  return out;
}

// Selects the best family again when a test that forced one ends (passed or not).
struct RestoreKernels {
  ~RestoreKernels() { metric::select_kernels(metric::best_kernel_name()); }
};

}  // namespace poincare::test
