#include "codes.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "errors.h"
#include "metric.h"

namespace poincare::codes {

namespace {

float load_f32(const std::uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store_f32(std::uint8_t* p, float v) { std::memcpy(p, &v, sizeof v); }

std::uint16_t load_u16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store_u16(std::uint8_t* p, std::uint16_t v) { std::memcpy(p, &v, sizeof v); }

constexpr std::size_t kF16Header = 4;  // bias
constexpr std::size_t kSq8Header = 6;  // scale, bias / scale^2

// The sq8 scale and coordinates of a row (its code bytes start after the header).
float sq8_scale(const std::uint8_t* code) { return load_f32(code); }
const std::int8_t* sq8_coords(const std::uint8_t* code) {
  return reinterpret_cast<const std::int8_t*>(code + kSq8Header);
}

float portable_f16(const float* q, const std::uint8_t* code, std::size_t dim) {
  return l2sq_reference(CodeKind::kF16, q, code, dim);
}
float portable_sq8(const float* q, const std::uint8_t* code, std::size_t dim) {
  return l2sq_reference(CodeKind::kSq8, q, code, dim);
}

// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* placeholders some
// intrinsics start from); the kernels below read nothing uninitialised.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The tails (dim not a multiple of the width) run the reference's expression per coordinate.
__attribute__((target("avx512f"))) float f16_avx512(const float* q, const std::uint8_t* code,
                                                     std::size_t dim) {
  const std::uint8_t* h = code + kF16Header;
  __m512 acc = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m512 x =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 2 * i)));
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(q + i), x);
    acc = _mm512_fmadd_ps(d, d, acc);
  }
  float s = _mm512_reduce_add_ps(acc);
  for (; i < dim; ++i) {
    const float d = q[i] - float_from_half(load_u16(h + 2 * i));
    s += d * d;
  }
  return s;
}

__attribute__((target("avx512f"))) float sq8_avx512(const float* q, const std::uint8_t* code,
                                                     std::size_t dim) {
  const float scale = sq8_scale(code);
  const std::int8_t* c = sq8_coords(code);
  const __m512 vs = _mm512_set1_ps(scale);
  __m512 acc = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i));
    const __m512 x = _mm512_mul_ps(vs, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)));
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(q + i), x);
    acc = _mm512_fmadd_ps(d, d, acc);
  }
  float s = _mm512_reduce_add_ps(acc);
  for (; i < dim; ++i) {
    const float d = q[i] - scale * static_cast<float>(c[i]);
    s += d * d;
  }
  return s;
}

__attribute__((target("avx2,fma"))) float hsum_avx2(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma,f16c"))) float f16_avx2(const float* q, const std::uint8_t* code,
                                                         std::size_t dim) {
  const std::uint8_t* h = code + kF16Header;
  __m256 acc = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 2 * i)));
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(q + i), x);
    acc = _mm256_fmadd_ps(d, d, acc);
  }
  float s = hsum_avx2(acc);
  for (; i < dim; ++i) {
    const float d = q[i] - float_from_half(load_u16(h + 2 * i));
    s += d * d;
  }
  return s;
}

__attribute__((target("avx2,fma"))) float sq8_avx2(const float* q, const std::uint8_t* code,
                                                    std::size_t dim) {
  const float scale = sq8_scale(code);
  const std::int8_t* c = sq8_coords(code);
  const __m256 vs = _mm256_set1_ps(scale);
  __m256 acc = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + i));
    const __m256 x = _mm256_mul_ps(vs, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)));
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(q + i), x);
    acc = _mm256_fmadd_ps(d, d, acc);
  }
  float s = hsum_avx2(acc);
  for (; i < dim; ++i) {
    const float d = q[i] - scale * static_cast<float>(c[i]);
    s += d * d;
  }
  return s;
}

#pragma GCC diagnostic pop

}  // namespace

std::size_t row_bytes(CodeKind kind, std::size_t dim) {
  switch (kind) {
    case CodeKind::kF16:
      return kF16Header + 2 * dim;
    case CodeKind::kSq8:
      return kSq8Header + dim;
    case CodeKind::kNone:
      break;
  }
  return 0;
}

CodeKind kind_from_name(const std::string& name) {
  if (name == "f32") return CodeKind::kNone;
  if (name == "f16") return CodeKind::kF16;
  if (name == "sq8") return CodeKind::kSq8;
  throw InvalidArgument("storage must be 'f32', 'f16' or 'sq8', got '" + name + "'");
}

const char* kind_name(CodeKind kind) {
  switch (kind) {
    case CodeKind::kF16:
      return "f16";
    case CodeKind::kSq8:
      return "sq8";
    case CodeKind::kNone:
      break;
  }
  return "f32";
}

std::uint16_t half_from_float(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)  // Inf, or NaN (kept quiet)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (abs < 0x38800000u) {
    // Below 2^-14 the half is subnormal: its integer significand is |f| / 2^-24, which the
    // multiply by 2^24 gives exactly; nearbyint rounds it to nearest even (2^10 is the smallest
    // normal half, which the bits encode correctly as they are).
    float v;
    std::memcpy(&v, &abs, sizeof v);
    const auto m = static_cast<std::uint32_t>(std::nearbyint(v * 16777216.0f));
    return static_cast<std::uint16_t>(sign | m);
  }
  const std::uint32_t exponent = (abs >> 23) - 127 + 15;
  std::uint32_t h = (exponent << 10) | ((abs & 0x7fffffu) >> 13);
  const std::uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves to the exponent
  return static_cast<std::uint16_t>(sign | h);
}

float float_from_half(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    const float v = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -v : v;
  }
  const std::uint32_t bits = exponent == 31
                                 ? sign | 0x7f800000u | (mantissa << 13)
                                 : sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

void encode_row(CodeKind kind, const float* x, std::size_t dim, std::uint8_t* out) {
  if (kind == CodeKind::kNone) return;
  if (kind == CodeKind::kF16) {
    double bias = 0.0;
    for (std::size_t i = 0; i < dim; ++i) {
      const std::uint16_t h = half_from_float(x[i]);
      store_u16(out + kF16Header + 2 * i, h);
      const double e = static_cast<double>(x[i]) - static_cast<double>(float_from_half(h));
      bias += e * e;
    }
    store_f32(out, static_cast<float>(bias));
    return;
  }
  if (dim > kMaxSq8Dim)
    throw InvalidArgument("sq8 storage codes at most " + std::to_string(kMaxSq8Dim) +
                          " dimensions, got " + std::to_string(dim));
  float max_abs = 0.0f;
  for (std::size_t i = 0; i < dim; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
  const float scale = max_abs / 127.0f;
  auto* c = reinterpret_cast<std::int8_t*>(out + kSq8Header);
  double bias = 0.0;
  for (std::size_t i = 0; i < dim; ++i) {
    const float code = scale > 0.0f ? std::nearbyint(x[i] / scale) : 0.0f;
    c[i] = static_cast<std::int8_t>(std::clamp(code, -127.0f, 127.0f));
    // The decoded value is the product the kernels form: scale * c_i rounded to float32.
    const double e = static_cast<double>(x[i]) - static_cast<double>(scale * static_cast<float>(c[i]));
    bias += e * e;
  }
  store_f32(out, scale);
  // bias <= dim (s / 2)^2: relative to s^2 it is at most dim / 4, well inside float16's range.
  const double ratio = scale > 0.0f ? bias / (static_cast<double>(scale) * scale) : 0.0;
  store_u16(out + 4, half_from_float(static_cast<float>(ratio)));
}

void decode_row(CodeKind kind, const std::uint8_t* code, std::size_t dim, float* out) {
  if (kind == CodeKind::kF16) {
    for (std::size_t i = 0; i < dim; ++i)
      out[i] = float_from_half(load_u16(code + kF16Header + 2 * i));
  } else if (kind == CodeKind::kSq8) {
    const float scale = sq8_scale(code);
    const std::int8_t* c = sq8_coords(code);
    for (std::size_t i = 0; i < dim; ++i) out[i] = scale * static_cast<float>(c[i]);
  }
}

float bias(CodeKind kind, const std::uint8_t* code) {
  if (kind == CodeKind::kF16) return load_f32(code);
  if (kind == CodeKind::kSq8) {
    const float scale = sq8_scale(code);
    return float_from_half(load_u16(code + 4)) * scale * scale;
  }
  return 0.0f;
}

float l2sq_reference(CodeKind kind, const float* q, const std::uint8_t* code, std::size_t dim) {
  float s = 0.0f;
  if (kind == CodeKind::kF16) {
    for (std::size_t i = 0; i < dim; ++i) {
      const float d = q[i] - float_from_half(load_u16(code + kF16Header + 2 * i));
      s += d * d;
    }
  } else if (kind == CodeKind::kSq8) {
    const float scale = sq8_scale(code);
    const std::int8_t* c = sq8_coords(code);
    for (std::size_t i = 0; i < dim; ++i) {
      const float d = q[i] - scale * static_cast<float>(c[i]);
      s += d * d;
    }
  }
  return s;
}

CodeL2SqFn l2sq_kernel(CodeKind kind) {
  const char* family = metric::kernels().name;
  const bool avx512 = std::strcmp(family, "avx512") == 0;
  const bool avx2 = std::strcmp(family, "avx2") == 0;
  if (kind == CodeKind::kF16) {
    if (avx512) return f16_avx512;
    // F16C came with AVX2 on every CPU that has both, but is its own flag.
    if (avx2 && __builtin_cpu_supports("f16c")) return f16_avx2;
    return portable_f16;
  }
  if (avx512) return sq8_avx512;
  if (avx2) return sq8_avx2;
  return portable_sq8;
}

}  // namespace poincare::codes
