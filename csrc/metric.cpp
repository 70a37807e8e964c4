#include "metric.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <vector>

#include "errors.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define POINCARE_X86 1
#endif

namespace poincare::metric {

double sq_norm_exact(const float* x, std::size_t dim) {
  double s = 0.0;
  for (std::size_t i = 0; i < dim; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

double l2sq_exact(const float* a, const float* b, std::size_t dim) {
  // float32 - float32 is exact in float64, so only the summation rounds.
  double s = 0.0;
  for (std::size_t i = 0; i < dim; ++i) {
    const double t = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    s += t * t;
  }
  return s;
}

double conformal_factor(double sq_norm, double curvature) {
  const double r = std::sqrt(curvature * sq_norm);
  return 1.0 / ((1.0 - r) * (1.0 + r));
}

double distance_from_delta(double delta, double curvature) {
  const double sc = std::sqrt(curvature);
  return 2.0 / sc * std::asinh(std::sqrt(curvature * delta));
}

double depth_from_sq_norm(double sq_norm, double curvature) {
  const double sc = std::sqrt(curvature);
  return 2.0 / sc * std::atanh(std::sqrt(curvature * sq_norm));
}

void validate_points(const float* x, std::size_t n, std::size_t dim, double curvature,
                     const char* what) {
  const double limit = 1.0 - kBallMargin;
  for (std::size_t row = 0; row < n; ++row) {
    const float* p = x + row * dim;
    double s = 0.0;
    bool finite = true;
    for (std::size_t i = 0; i < dim; ++i) {
      finite = finite && std::isfinite(p[i]);
      s += static_cast<double>(p[i]) * p[i];
    }
    char buf[256];
    if (!finite) {
      std::snprintf(buf, sizeof buf, "%s row %zu contains NaN or Inf", what, row);
      throw InvalidArgument(buf);
    }
    if (curvature * s >= limit) {
      std::snprintf(buf, sizeof buf,
                    "%s row %zu lies on or outside the Poincare ball: c*|x|^2 = %.9g >= 1 - 1e-7 "
                    "(curvature %g); clip it with poincare_index.project()",
                    what, row, curvature * s, curvature);
      throw InvalidArgument(buf);
    }
  }
}

// ---- kernels
// --------------------------------------------------------------------------------------

float l2sq_reference(const float* a, const float* b, std::size_t dim) {
  float s = 0.0f;
  for (std::size_t i = 0; i < dim; ++i) {
    const float t = a[i] - b[i];
    s += t * t;
  }
  return s;
}

namespace {

inline void tile_epilogue(const TileQuery& q, const TileInfo& info, std::size_t dim,
                          const float* dots, float* rank, float* err, std::uint32_t* mask) {
  const float g = error_coefficient(dim);
  std::uint32_t m = 0;
  for (std::size_t j = 0; j < kTileWidth; ++j) {
    const float l2 = (q.sq_norm + info.sq_norm[j]) - 2.0f * dots[j];
    const float r = l2 * info.factor[j];
    const float s = q.norm + info.norm[j];
    const float e = info.factor[j] * g * s * s + std::fabs(r) * 0x1.0p-21f;
    rank[j] = r;
    err[j] = e;
    if (r - e <= q.tau) m |= 1u << j;
  }
  *mask = m;
}

}  // namespace

void scan_tile_reference(const TileQuery* queries, std::size_t nq, const float* tile,
                         const TileInfo& info, std::size_t dim, float* rank, float* err,
                         std::uint32_t* mask) {
  float dots[kTileWidth];
  for (std::size_t i = 0; i < nq; ++i) {
    for (std::size_t j = 0; j < kTileWidth; ++j) {
      float s = 0.0f;
      for (std::size_t k = 0; k < dim; ++k) s += queries[i].x[k] * tile[k * kTileWidth + j];
      dots[j] = s;
    }
    tile_epilogue(queries[i], info, dim, dots, rank + i * kTileWidth, err + i * kTileWidth,
                  mask + i);
  }
}

namespace {

// Portable fast path: four independent accumulators let the compiler pipeline without
// reassociating a single sum (we never build with -ffast-math).
float l2sq_portable(const float* a, const float* b, std::size_t dim) {
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
  std::size_t i = 0;
  for (; i + 4 <= dim; i += 4) {
    const float t0 = a[i] - b[i], t1 = a[i + 1] - b[i + 1];
    const float t2 = a[i + 2] - b[i + 2], t3 = a[i + 3] - b[i + 3];
    s0 += t0 * t0;
    s1 += t1 * t1;
    s2 += t2 * t2;
    s3 += t3 * t3;
  }
  for (; i < dim; ++i) {
    const float t = a[i] - b[i];
    s0 += t * t;
  }
  return (s0 + s1) + (s2 + s3);
}

void l2sq_batch4_portable(const float* q, const float* const* rows, std::size_t dim, float* out) {
  for (int j = 0; j < 4; ++j) out[j] = l2sq_portable(q, rows[j], dim);
}

// float64 |a - b|^2 with four independent sums: the serial loop of l2sq_exact is one chain of
// dependent additions (four cycles each), which cost ~1 us per query over the finalists.
double l2sq_f64_portable(const float* a, const float* b, std::size_t dim) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  std::size_t i = 0;
  for (; i + 4 <= dim; i += 4) {
    const double t0 = static_cast<double>(a[i]) - b[i];
    const double t1 = static_cast<double>(a[i + 1]) - b[i + 1];
    const double t2 = static_cast<double>(a[i + 2]) - b[i + 2];
    const double t3 = static_cast<double>(a[i + 3]) - b[i + 3];
    s0 += t0 * t0;
    s1 += t1 * t1;
    s2 += t2 * t2;
    s3 += t3 * t3;
  }
  for (; i < dim; ++i) {
    const double t = static_cast<double>(a[i]) - b[i];
    s0 += t * t;
  }
  return (s0 + s1) + (s2 + s3);
}

#ifdef POINCARE_X86

__attribute__((target("avx2,fma"))) float l2sq_avx2(const float* a, const float* b,
                                                    std::size_t dim) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    acc0 = _mm256_fmadd_ps(d0, d0, acc0);
    acc1 = _mm256_fmadd_ps(d1, d1, acc1);
  }
  for (; i + 8 <= dim; i += 8) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    acc0 = _mm256_fmadd_ps(d0, d0, acc0);
  }
  acc0 = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float total = _mm_cvtss_f32(s);
  for (; i < dim; ++i) {
    const float t = a[i] - b[i];
    total += t * t;
  }
  return total;
}

// float64 differences are exact (float32 - float32), so each lane only rounds its sum.
__attribute__((target("avx2,fma"))) double l2sq_f64_avx2(const float* a, const float* b,
                                                         std::size_t dim) {
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  std::size_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    const __m256d d0 =
        _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i)), _mm256_cvtps_pd(_mm_loadu_ps(b + i)));
    const __m256d d1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(a + i + 4)),
                                     _mm256_cvtps_pd(_mm_loadu_ps(b + i + 4)));
    acc0 = _mm256_fmadd_pd(d0, d0, acc0);
    acc1 = _mm256_fmadd_pd(d1, d1, acc1);
  }
  acc0 = _mm256_add_pd(acc0, acc1);
  __m128d s = _mm_add_pd(_mm256_castpd256_pd128(acc0), _mm256_extractf128_pd(acc0, 1));
  double total = _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
  for (; i < dim; ++i) {
    const double t = static_cast<double>(a[i]) - b[i];
    total += t * t;
  }
  return total;
}

__attribute__((target("avx2,fma"))) void l2sq_batch4_avx2(const float* q, const float* const* rows,
                                                          std::size_t dim, float* out) {
  for (int j = 0; j < 4; ++j) out[j] = l2sq_avx2(q, rows[j], dim);
}

__attribute__((target("avx512f"))) float l2sq_avx512(const float* a, const float* b,
                                                     std::size_t dim) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    const __m512 d1 = _mm512_sub_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
    acc0 = _mm512_fmadd_ps(d0, d0, acc0);
    acc1 = _mm512_fmadd_ps(d1, d1, acc1);
  }
  for (; i + 16 <= dim; i += 16) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    acc0 = _mm512_fmadd_ps(d0, d0, acc0);
  }
  if (i < dim) {
    // Masked loads read nothing past the end of either vector.
    const __mmask16 m = static_cast<__mmask16>((1u << (dim - i)) - 1u);
    const __m512 d0 =
        _mm512_sub_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i));
    acc1 = _mm512_fmadd_ps(d0, d0, acc1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

__attribute__((target("avx512f"))) double l2sq_f64_avx512(const float* a, const float* b,
                                                          std::size_t dim) {
  __m512d acc0 = _mm512_setzero_pd(), acc1 = _mm512_setzero_pd();
  std::size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m512d d0 = _mm512_sub_pd(_mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(a + i)),
                                     _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(b + i)));
    const __m512d d1 = _mm512_sub_pd(_mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(a + i + 8)),
                                     _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(b + i + 8)));
    acc0 = _mm512_fmadd_pd(d0, d0, acc0);
    acc1 = _mm512_fmadd_pd(d1, d1, acc1);
  }
  if (i + 8 <= dim) {
    const __m512d d0 = _mm512_sub_pd(_mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(a + i)),
                                     _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(b + i)));
    acc0 = _mm512_fmadd_pd(d0, d0, acc0);
    i += 8;
  }
  double total = _mm512_reduce_add_pd(_mm512_add_pd(acc0, acc1));
  for (; i < dim; ++i) {
    const double t = static_cast<double>(a[i]) - b[i];
    total += t * t;
  }
  return total;
}

// The same accumulation order as l2sq_avx512 for each of the four rows (so the results are
// bit-identical), with the query's loads shared.
__attribute__((target("avx512f"))) void l2sq_batch4_avx512(const float* q, const float* const* rows,
                                                           std::size_t dim, float* out) {
  __m512 acc0[4], acc1[4];
  for (int j = 0; j < 4; ++j) acc0[j] = acc1[j] = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    const __m512 q0 = _mm512_loadu_ps(q + i), q1 = _mm512_loadu_ps(q + i + 16);
    for (int j = 0; j < 4; ++j) {
      const __m512 d0 = _mm512_sub_ps(q0, _mm512_loadu_ps(rows[j] + i));
      const __m512 d1 = _mm512_sub_ps(q1, _mm512_loadu_ps(rows[j] + i + 16));
      acc0[j] = _mm512_fmadd_ps(d0, d0, acc0[j]);
      acc1[j] = _mm512_fmadd_ps(d1, d1, acc1[j]);
    }
  }
  for (; i + 16 <= dim; i += 16) {
    const __m512 q0 = _mm512_loadu_ps(q + i);
    for (int j = 0; j < 4; ++j) {
      const __m512 d0 = _mm512_sub_ps(q0, _mm512_loadu_ps(rows[j] + i));
      acc0[j] = _mm512_fmadd_ps(d0, d0, acc0[j]);
    }
  }
  if (i < dim) {
    const __mmask16 m = static_cast<__mmask16>((1u << (dim - i)) - 1u);
    const __m512 q0 = _mm512_maskz_loadu_ps(m, q + i);
    for (int j = 0; j < 4; ++j) {
      const __m512 d0 = _mm512_sub_ps(q0, _mm512_maskz_loadu_ps(m, rows[j] + i));
      acc1[j] = _mm512_fmadd_ps(d0, d0, acc1[j]);
    }
  }
  for (int j = 0; j < 4; ++j) out[j] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[j], acc1[j]));
}

// Register-blocked dot products, NQ queries x 32 database lanes (two zmm per query) over a tile
// transposed so each coordinate is one contiguous row of 32 floats, then the epilogue of
// scan_tile_reference on the accumulators, in registers.
template <int NQ>
__attribute__((target("avx512f"))) void scan_tile_avx512_n(const TileQuery* q, const float* tile,
                                                           const TileInfo& info, std::size_t dim,
                                                           float* rank, float* err,
                                                           std::uint32_t* mask) {
  __m512 acc[NQ][2];
  for (int i = 0; i < NQ; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (std::size_t k = 0; k < dim; ++k) {
    const __m512 t0 = _mm512_loadu_ps(tile + k * kTileWidth);
    const __m512 t1 = _mm512_loadu_ps(tile + k * kTileWidth + 16);
    for (int i = 0; i < NQ; ++i) {
      const __m512 b = _mm512_set1_ps(q[i].x[k]);
      acc[i][0] = _mm512_fmadd_ps(b, t0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(b, t1, acc[i][1]);
    }
  }
  const __m512 g = _mm512_set1_ps(error_coefficient(dim));
  const __m512 rel = _mm512_set1_ps(0x1.0p-21f);
  const __m512 two = _mm512_set1_ps(2.0f);
  for (int h = 0; h < 2; ++h) {
    const __m512 xn = _mm512_loadu_ps(info.sq_norm + 16 * h);
    const __m512 nx = _mm512_loadu_ps(info.norm + 16 * h);
    const __m512 a = _mm512_loadu_ps(info.factor + 16 * h);
    const __m512 ag = _mm512_mul_ps(a, g);
    for (int i = 0; i < NQ; ++i) {
      const __m512 l2 =
          _mm512_fnmadd_ps(two, acc[i][h], _mm512_add_ps(_mm512_set1_ps(q[i].sq_norm), xn));
      const __m512 r = _mm512_mul_ps(l2, a);
      const __m512 s = _mm512_add_ps(_mm512_set1_ps(q[i].norm), nx);
      const __m512 absr = _mm512_abs_ps(r);
      const __m512 e = _mm512_fmadd_ps(absr, rel, _mm512_mul_ps(_mm512_mul_ps(ag, s), s));
      _mm512_storeu_ps(rank + i * kTileWidth + 16 * h, r);
      _mm512_storeu_ps(err + i * kTileWidth + 16 * h, e);
      const __mmask16 m =
          _mm512_cmp_ps_mask(_mm512_sub_ps(r, e), _mm512_set1_ps(q[i].tau), _CMP_LE_OQ);
      if (h == 0)
        mask[i] = m;
      else
        mask[i] |= static_cast<std::uint32_t>(m) << 16;
    }
  }
}

__attribute__((target("avx512f"))) void scan_tile_avx512(const TileQuery* q, std::size_t nq,
                                                         const float* tile, const TileInfo& info,
                                                         std::size_t dim, float* rank, float* err,
                                                         std::uint32_t* mask) {
  switch (nq) {
    case 1:
      return scan_tile_avx512_n<1>(q, tile, info, dim, rank, err, mask);
    case 2:
      return scan_tile_avx512_n<2>(q, tile, info, dim, rank, err, mask);
    case 3:
      return scan_tile_avx512_n<3>(q, tile, info, dim, rank, err, mask);
    case 4:
      return scan_tile_avx512_n<4>(q, tile, info, dim, rank, err, mask);
    case 5:
      return scan_tile_avx512_n<5>(q, tile, info, dim, rank, err, mask);
    default:
      return scan_tile_avx512_n<6>(q, tile, info, dim, rank, err, mask);
  }
}

// AVX2: three queries x four ymm = 12 accumulators, as many as fit beside the tile rows; the
// epilogue runs on the stored dot products.
template <int NQ>
__attribute__((target("avx2,fma"))) void dot_tile_avx2_n(const TileQuery* q, const float* tile,
                                                         std::size_t dim, float* out) {
  __m256 acc[NQ][4];
  for (int i = 0; i < NQ; ++i)
    for (int h = 0; h < 4; ++h) acc[i][h] = _mm256_setzero_ps();
  for (std::size_t k = 0; k < dim; ++k) {
    __m256 t[4];
    for (int h = 0; h < 4; ++h) t[h] = _mm256_loadu_ps(tile + k * kTileWidth + 8 * h);
    for (int i = 0; i < NQ; ++i) {
      const __m256 b = _mm256_set1_ps(q[i].x[k]);
      for (int h = 0; h < 4; ++h) acc[i][h] = _mm256_fmadd_ps(b, t[h], acc[i][h]);
    }
  }
  for (int i = 0; i < NQ; ++i)
    for (int h = 0; h < 4; ++h) _mm256_storeu_ps(out + i * kTileWidth + 8 * h, acc[i][h]);
}

__attribute__((target("avx2,fma"))) void scan_tile_avx2(const TileQuery* q, std::size_t nq,
                                                        const float* tile, const TileInfo& info,
                                                        std::size_t dim, float* rank, float* err,
                                                        std::uint32_t* mask) {
  float dots[kMaxTileQueries * kTileWidth];
  std::size_t i = 0;
  for (; i + 3 <= nq; i += 3) dot_tile_avx2_n<3>(q + i, tile, dim, dots + i * kTileWidth);
  if (nq - i == 2) dot_tile_avx2_n<2>(q + i, tile, dim, dots + i * kTileWidth);
  if (nq - i == 1) dot_tile_avx2_n<1>(q + i, tile, dim, dots + i * kTileWidth);
  for (i = 0; i < nq; ++i)
    tile_epilogue(q[i], info, dim, dots + i * kTileWidth, rank + i * kTileWidth,
                  err + i * kTileWidth, mask + i);
}

#endif  // POINCARE_X86

const Kernels kPortable{l2sq_portable, l2sq_batch4_portable, l2sq_f64_portable, scan_tile_reference,
                        "portable"};
#ifdef POINCARE_X86
const Kernels kAvx2{l2sq_avx2, l2sq_batch4_avx2, l2sq_f64_avx2, scan_tile_avx2, "avx2"};
const Kernels kAvx512{l2sq_avx512, l2sq_batch4_avx512, l2sq_f64_avx512, scan_tile_avx512, "avx512"};
#endif

bool cpu_has(const std::string& name) {
#ifdef POINCARE_X86
  __builtin_cpu_init();
  if (name == "avx512") return __builtin_cpu_supports("avx512f");
  if (name == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return name == "portable";
}

const Kernels* kernels_for(const std::string& name) {
#ifdef POINCARE_X86
  if (name == "avx512") return &kAvx512;
  if (name == "avx2") return &kAvx2;
#endif
  if (name == "portable") return &kPortable;
  return nullptr;
}

std::atomic<const Kernels*>& current() {
  static std::atomic<const Kernels*> selected{kernels_for(best_kernel_name())};
  return selected;
}

}  // namespace

void scan_rows(const float* queries, std::size_t nq, const float* xs, std::size_t dim,
               double curvature, const float* taus, bool reference, float* rank, float* err,
               std::uint32_t* mask) {
  if (nq > kMaxTileQueries) throw InvalidArgument("scan_rows takes at most 6 queries");
  std::vector<float> tile(kTileWidth * dim);
  TileInfo info{};
  for (std::size_t j = 0; j < kTileWidth; ++j) {
    const float* x = xs + j * dim;
    for (std::size_t d = 0; d < dim; ++d) tile[d * kTileWidth + j] = x[d];
    const double sq = sq_norm_exact(x, dim);
    info.sq_norm[j] = static_cast<float>(sq);
    info.norm[j] = static_cast<float>(std::sqrt(sq));
    info.factor[j] = static_cast<float>(conformal_factor(sq, curvature));
  }
  TileQuery tq[kMaxTileQueries];
  for (std::size_t i = 0; i < nq; ++i) {
    const float* q = queries + i * dim;
    const double sq = sq_norm_exact(q, dim);
    tq[i] = {q, static_cast<float>(sq), static_cast<float>(std::sqrt(sq)), taus[i]};
  }
  const ScanTileFn fn = reference ? scan_tile_reference : kernels().scan_tile;
  fn(tq, nq, tile.data(), info, dim, rank, err, mask);
}

std::string best_kernel_name() {
  if (cpu_has("avx512")) return "avx512";
  if (cpu_has("avx2")) return "avx2";
  return "portable";
}

const Kernels& kernels() { return *current().load(std::memory_order_acquire); }

void select_kernels(const std::string& name) {
  const Kernels* k = kernels_for(name);
  if (k == nullptr) throw InvalidArgument("unknown kernel family '" + name + "'");
  if (!cpu_has(name)) throw InvalidArgument("this CPU does not support the '" + name + "' kernels");
  current().store(k, std::memory_order_release);
}

}  // namespace poincare::metric
