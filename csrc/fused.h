// Fused ranking: score(q, x) = -d(q, x) + depth_bias depth(x) + time_coef log w(x, t_q), computed
// inside the graph traversal (with a sound stopping bound) or by an exact scan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hnsw.h"
#include "scratch.h"
#include "storage.h"
#include "temporal.h"

namespace poincare {

struct FusedParams {
  double depth_bias = 0.0;
  double time_coef = 1.0;
  DecayProgram decay;                     // empty: w = 1
  TimeColumns columns;                    // needed when decay is not empty or touch is set
  const std::uint8_t* allowed = nullptr;  // per slot (nonzero: may be returned); null: all
  // Slots at or past this are not returned: rows added after the caller took its views of
  // the columns / built its mask (a concurrent add), which the search must not read.
  std::size_t eligible_slots = static_cast<std::size_t>(-1);

  // True when a node at distance d can score at most -(1 - beta) d + beta depth(q): tau >= 0,
  // beta < 1 (log w <= 0, depth(x) <= depth(q) + d). Otherwise only an exact scan is sound.
  bool has_bound() const { return time_coef >= 0.0 && depth_bias < 1.0; }
};

struct ScoredHit {
  double score;
  double distance;
  double depth;
  double log_weight;
  std::uint32_t slot;
};

// Evaluates scores for one query against stored slots.
class FusedScorer {
 public:
  FusedScorer(const VectorStorage& storage, const FusedParams& params, const float* q);

  // Whether `slot` may be returned (live and allowed).
  bool eligible(std::uint32_t slot) const;
  // Exact (float64) hit for `slot`.
  ScoredHit exact(std::uint32_t slot) const;
  // The score from a float32 rank quantity rank = |q - x|^2 a(x) (graph traversal).
  double approx_score(std::uint32_t slot, float rank, double* distance) const;
  // Largest score any point at distance >= d can have (valid when params.has_bound()).
  double bound_at(double distance) const;
  double distance_of_rank(float rank) const;
  // A float32 rank at and beyond which no point can score above `score` (+inf when there is no
  // bound or score is -inf), rounded up so that comparing ranks never prunes a point that could.
  float rank_limit(double score) const;

 private:
  double depth_of(std::uint32_t slot) const;

  const VectorStorage& storage_;
  const FusedParams& params_;
  const float* q_;
  double a_q_;
  double depth_q_;
};

// Exact top-k by score over `slots` (the first n_slots slots when null), best first, into
// `out`: float32 ranks rule rows out through the stopping bound, the rest get an approximate
// score, and those near the k-th are re-scored exactly.
void fused_scan(const FusedScorer& scorer, const VectorStorage& storage, const float* q,
                std::size_t n_slots, const std::uint32_t* slots, std::size_t k,
                std::vector<ScoredHit>& out);

// Top-k by score from a traversal of the graph's level 0 in distance order: stops when the
// nearest unexpanded node cannot beat the k-th score (FusedScorer::bound_at), or when ef
// expansions in distance order (the HNSW beam rule) are exhausted. The reported hits are
// re-scored exactly.
void fused_graph_search(const HnswGraph& graph, const VectorStorage& storage,
                        const FusedScorer& scorer, const float* q, std::size_t k, std::size_t ef,
                        SearchScratch& scratch, std::vector<ScoredHit>& out);

// Increments access_count of each hit's slot atomically.
void touch_hits(const TimeColumns& columns, const std::vector<ScoredHit>& hits);

}  // namespace poincare
