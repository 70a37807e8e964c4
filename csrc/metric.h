// Poincaré-ball metric: the ranking quantity, the exact distance, depth, and the vector kernels.
//
// Geometry (curvature c > 0): a point x is in the ball when c|x|^2 < 1. With the conformal factor
// a(x) = 1 / (1 - c|x|^2), delta(u, v) = |u - v|^2 a(u) a(v) is monotone in the Poincaré distance
// d(u, v) = (2 / sqrt c) asinh(sqrt(c delta)), so searches rank by delta (cheap, float32) and
// report d recomputed in float64 for the finalists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace poincare::metric {

// Points with c|x|^2 >= 1 - kBallMargin (computed in float64 from the float32 values) are refused.
// float32 can represent radii up to 1 - 6e-8, i.e. c|x|^2 up to about 1 - 1.2e-7: accepted.
constexpr double kBallMargin = 1e-7;

// Sum of x_i^2 in float64.
double sq_norm_exact(const float* x, std::size_t dim);

// |a - b|^2 in float64 from float32 coordinates by a plain serial loop: the reference for the
// l2sq_f64 kernels, which compute the finalists' distances of every search.
double l2sq_exact(const float* a, const float* b, std::size_t dim);

// a(x) = 1 / (1 - c|x|^2), evaluated as 1 / ((1 - sqrt(c)|x|)(1 + sqrt(c)|x|)) to avoid the
// cancellation of 1 - c|x|^2 near the boundary.
double conformal_factor(double sq_norm, double curvature);

// d = (2 / sqrt c) asinh(sqrt(c delta)); equals the arcosh form but stays exact for tiny delta.
double distance_from_delta(double delta, double curvature);

// depth(x) = d(0, x) = (2 / sqrt c) artanh(sqrt(c)|x|).
double depth_from_sq_norm(double sq_norm, double curvature);

// Throws InvalidArgument naming the first row (of `what`, e.g. "x") that holds a NaN/Inf or lies
// on or outside the ball (c|x|^2 >= 1 - kBallMargin).
void validate_points(const float* x, std::size_t n, std::size_t dim, double curvature,
                     const char* what);

// ---- vector kernels -----------------------------------------------------------------------------

// |a - b|^2 accumulated in float32 by a plain serial loop: the reference for the fast kernels.
float l2sq_reference(const float* a, const float* b, std::size_t dim);

// Width of a packed database tile for scan_tile: tile[k * kTileWidth + j] is coordinate k of
// vector j of the tile.
constexpr std::size_t kTileWidth = 32;
// Most queries one scan_tile call handles.
constexpr std::size_t kMaxTileQueries = 6;

struct TileQuery {
  const float* x;  // dim coordinates
  float sq_norm;   // |q|^2
  float norm;      // |q|
  float tau;       // current threshold on the rank quantity
};

// Per-lane data of a packed tile (unused lanes: zeros).
struct TileInfo {
  float sq_norm[kTileWidth];  // |x_j|^2
  float norm[kTileWidth];     // |x_j|
  float factor[kTileWidth];   // a(x_j)
};

// The flat scan's inner step. For each query i < nq (nq <= kMaxTileQueries) and lane j:
//   rank[i][j] = (|q_i|^2 + |x_j|^2 - 2 q_i.x_j) a(x_j)   (the GEMM identity, float32)
//   err[i][j]  = a(x_j) g (|q_i| + |x_j|)^2 + |rank| 2^-21, a bound on |rank - exact rank| for
//                g = error_coefficient(dim) (each lane sums serially: dot error <= dim u |q||x|)
//   bit j of mask[i] is set when rank - err <= q_i.tau.
void scan_tile_reference(const TileQuery* queries, std::size_t nq, const float* tile,
                         const TileInfo& info, std::size_t dim, float* rank, float* err,
                         std::uint32_t* mask);

// g for scan_tile: (2 dim + 8) 2^-24, covering the dot product, the norms and the subtraction.
inline float error_coefficient(std::size_t dim) {
  return static_cast<float>((2.0 * static_cast<double>(dim) + 8.0) * 0x1.0p-24);
}

// Test helper: packs 32 row-major vectors xs (32 x dim) into a tile and runs the reference or the
// selected scan_tile kernel for row-major queries (nq x dim) with thresholds taus.
void scan_rows(const float* queries, std::size_t nq, const float* xs, std::size_t dim,
               double curvature, const float* taus, bool reference, float* rank, float* err,
               std::uint32_t* mask);

using L2SqFn = float (*)(const float*, const float*, std::size_t);
// out[j] = |q - rows[j]|^2 for j < 4, each bit-identical to the same family's l2sq(q, rows[j]):
// four rows share the loads of q and run four independent accumulator chains.
using L2SqBatch4Fn = void (*)(const float* q, const float* const* rows, std::size_t dim,
                              float* out);
// |a - b|^2 in float64 from float32 coordinates (differences exact, sums rounded in float64).
using L2SqF64Fn = double (*)(const float*, const float*, std::size_t);
using ScanTileFn = void (*)(const TileQuery*, std::size_t, const float*, const TileInfo&,
                            std::size_t, float*, float*, std::uint32_t*);

// The kernels selected for this CPU at load time ("avx512", "avx2" or "portable").
struct Kernels {
  L2SqFn l2sq;
  L2SqBatch4Fn l2sq_batch4;
  L2SqF64Fn l2sq_f64;
  ScanTileFn scan_tile;
  const char* name;
};
const Kernels& kernels();

// Forces a kernel family (for tests and benchmarks); throws InvalidArgument if the name is
// unknown or the CPU lacks the instructions. Not thread-safe against concurrent searches.
void select_kernels(const std::string& name);
// The best family this CPU supports.
std::string best_kernel_name();

}  // namespace poincare::metric
