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

// The slots in time order, cut into buckets, each with its time range and largest access count:
// an upper bound of the time weight per bucket at the query time (see fused_time_pass).
struct TimeBuckets {
  const std::uint32_t* order = nullptr;       // slots, newest first
  const std::int64_t* starts = nullptr;       // n_buckets + 1 offsets into order
  const std::int64_t* t_min = nullptr;        // per bucket
  const std::int64_t* t_max = nullptr;        // per bucket
  const std::uint32_t* max_access = nullptr;  // per bucket
  std::size_t n_buckets = 0;
  std::size_t scan_budget = 0;  // most rows the pass may scan per query
};

// What a fused search ranks by, fixed once per call: score(q, x) = -d(q, x) + depth_bias depth(x)
// + time_coef log w(x), w from the decay program bound to the query time.
struct ScoreSpec {
  DecayProgram decay;  // empty: w = 1
  double depth_bias = 0.0;
  double time_coef = 1.0;

  // True when a node at distance d can score at most -(1 - beta) d + beta depth(q): tau >= 0,
  // beta < 1 (log w <= 0, depth(x) <= depth(q) + d). Otherwise only an exact scan is sound.
  bool has_bound() const { return time_coef >= 0.0 && depth_bias < 1.0; }
};

struct FusedParams {
  ScoreSpec score;
  TimeColumns columns;                    // needed when decay is not empty or touch is set
  const std::uint8_t* allowed = nullptr;  // per slot (nonzero: may be returned); null: all
  // Slots at or past this are not returned: rows added after the caller took its views of
  // the columns / built its mask (a concurrent add), which the search must not read.
  std::size_t eligible_slots = static_cast<std::size_t>(-1);
  TimeBuckets buckets;  // n_buckets == 0: no time pass
  // The ids the caller saw per slot when it built `allowed` (null: not checked): a slot whose
  // point was replaced since (a later add reused it) is not returned, so a mask never lets
  // through a point it was not computed for.
  const std::int64_t* expected_ids = nullptr;
  std::size_t n_expected_ids = 0;
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
  // depth_bias depth(x) + time_coef log w(x): the score without the distance.
  double time_term(std::uint32_t slot) const;
  // A lower bound of the distance at `rank` without evaluating asinh (within 1.4 / sqrt(c)).
  double distance_lower_bound(float rank) const;
  // The distance at a float32 rank |q - x|^2 a(x), for ranking (float32 asinh).
  double distance_of_rank(float rank) const;
  // A float32 rank at and beyond which no point can score above `score` (+inf when there is no
  // bound or score is -inf), rounded up so that comparing ranks never prunes a point that could.
  float rank_limit(double score) const;
  const FusedParams& params() const { return params_; }
  double query_depth() const { return depth_q_; }
  double query_factor() const { return a_q_; }

 private:
  double depth_of(std::uint32_t slot) const;

  const VectorStorage& storage_;
  const FusedParams& params_;
  const float* q_;
  double a_q_;
  double depth_q_;
  float a_q_f_;
  float c_f_;
  double two_over_sqrt_c_;
};

// Exact top-k by score over `slots` (the first n_slots slots when null), best first, into
// `out`: float32 ranks rule rows out through the stopping bound, the rest get an approximate
// score, and those near the k-th are re-scored exactly.
void fused_scan(const FusedScorer& scorer, const VectorStorage& storage, const float* q,
                std::size_t n_slots, const std::uint32_t* slots, std::size_t k,
                std::vector<ScoredHit>& out);

// Top-k by score from a traversal of the graph's level 0 that walks exactly as the plain HNSW
// search does at the same ef (the beam of the ef nearest eligible nodes decides what is
// expanded and when the walk ends); every eligible node visited is scored, and the stopping
// bound (FusedScorer::rank_limit) only skips scoring nodes that cannot enter the top k; a walk
// that ends among hubs walks again in Euclidean order, as HnswGraph::search does. Then,
// when the parameters carry time buckets, the time pass: every bucket whose weight bound could
// still beat the k-th score is scanned exactly, provided they hold at most scan_budget rows in
// all. When time dominates (fast decay, long history) those are the few recent buckets and the
// result is exact; old buckets are skipped without being read. The reported hits are re-scored
// exactly.
// Returns the walk's reach: the position, in distance order among the ef nearest eligible nodes
// the walk kept, of the farthest returned hit the walk itself found (hits from the time seed or
// pass, which scan exactly, do not count); ef + 1 when such a hit lies beyond those ef, so the
// answer reaches past what this ef covers. A caller holding the recall the walk achieves for
// the m nearest at a given ef (a calibration) can tell whether this ef was enough.
std::size_t fused_graph_search(const HnswGraph& graph, const VectorStorage& storage,
                        const FusedScorer& scorer, const float* q, std::size_t k, std::size_t ef,
                        SearchScratch& scratch, std::vector<ScoredHit>& out);

// Increments access_count of each hit's slot atomically (see access_counts.h).
void touch_hits(const TimeColumns& columns, const std::vector<ScoredHit>& hits);

}  // namespace poincare
