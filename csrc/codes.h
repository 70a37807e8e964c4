// Compressed copies of float32 rows that a graph walk ranks by (docs/compressed_storage.md):
// float16 coordinates, or 8-bit coordinates on the row's own scale. Each code row starts with
// what the walk needs beside the coordinates, including the code's own squared error
// |x - decode(x)|^2, which a key subtracts so that its error shrinks with |q - x| (near
// neighbours keep their order at any depth).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace poincare::codes {

enum class CodeKind : std::uint8_t { kNone = 0, kF16 = 1, kSq8 = 2 };

// Most dimensions an sq8 row can code (its error header is float16 relative to the scale).
constexpr std::size_t kMaxSq8Dim = 1 << 16;

// Bytes of one code row (0 for kNone).
//   kF16: float32 bias, then dim IEEE half coordinates                     (4 + 2 dim)
//   kSq8: float32 scale s, float16 bias / s^2, then dim int8 c_i, x_i ~ s c_i (6 + dim)
std::size_t row_bytes(CodeKind kind, std::size_t dim);

// The kind a storage name stands for: "f32" (no codes), "f16", "sq8"; InvalidArgument otherwise.
CodeKind kind_from_name(const std::string& name);
// The storage name of a kind ("f32" for kNone).
const char* kind_name(CodeKind kind);

// Writes the code of the finite float32 row x (dim coordinates) to out (row_bytes bytes): f16
// rounds each coordinate to nearest even; sq8 takes s = max|x_i| / 127 and c_i = round(x_i / s).
// The bias is |x - decode(x)|^2 computed in float64. InvalidArgument for an sq8 dim over
// kMaxSq8Dim.
void encode_row(CodeKind kind, const float* x, std::size_t dim, std::uint8_t* out);
// The float32 coordinates a code row stands for.
void decode_row(CodeKind kind, const std::uint8_t* code, std::size_t dim, float* out);
// The code's squared error |x - decode(x)|^2 as stored in its row.
float bias(CodeKind kind, const std::uint8_t* code);

// |q - decode(code)|^2 accumulated in float32 by a serial loop: the reference for the kernels.
float l2sq_reference(CodeKind kind, const float* q, const std::uint8_t* code, std::size_t dim);

using CodeL2SqFn = float (*)(const float* q, const std::uint8_t* code, std::size_t dim);
// |q - decode(code)|^2 by the kernel of the selected family (metric::kernels(): avx512, avx2 or
// portable) for `kind`; agrees with l2sq_reference within float32 accumulation error.
CodeL2SqFn l2sq_kernel(CodeKind kind);

// IEEE binary16 <-> binary32 in software (round to nearest even), so codes are bit-identical on
// every CPU.
std::uint16_t half_from_float(float f);
float float_from_half(std::uint16_t h);

}  // namespace poincare::codes
