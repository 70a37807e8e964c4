#include "fused.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "access_counts.h"
#include "hnsw_links.h"
#include "metric.h"

namespace poincare {

using hnsw_detail::expand;
using hnsw_detail::prefetch;
using hnsw_detail::prefetch_row;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Min-heap on score (worst of the kept on top) over (score, slot).
using ScoreEntry = std::pair<double, std::uint32_t>;
struct WorseFirst {
  bool operator()(const ScoreEntry& a, const ScoreEntry& b) const { return a.first > b.first; }
};

void keep_best(std::vector<ScoreEntry>& heap, std::size_t k, ScoreEntry e) {
  if (heap.size() < k) {
    heap.push_back(e);
    std::push_heap(heap.begin(), heap.end(), WorseFirst());
  } else if (e.first > heap.front().first) {
    std::pop_heap(heap.begin(), heap.end(), WorseFirst());
    heap.back() = e;
    std::push_heap(heap.begin(), heap.end(), WorseFirst());
  }
}

bool better(const ScoredHit& a, const ScoredHit& b) {
  return a.score > b.score || (a.score == b.score && a.slot < b.slot);
}

}  // namespace

FusedScorer::FusedScorer(const VectorStorage& storage, const FusedParams& params, const float* q)
    : storage_(storage), params_(params), q_(q) {
  const double sq = metric::sq_norm_exact(q, storage.dim());
  a_q_ = metric::conformal_factor(sq, storage.curvature());
  a_q_f_ = static_cast<float>(a_q_);
  c_f_ = static_cast<float>(storage.curvature());
  two_over_sqrt_c_ = 2.0 / std::sqrt(storage.curvature());
  depth_q_ = metric::depth_from_sq_norm(sq, storage.curvature());
}

bool FusedScorer::eligible(std::uint32_t slot) const {
  return slot < params_.eligible_slots && !storage_.is_deleted(slot) &&
         (params_.allowed == nullptr || params_.allowed[slot] != 0) &&
         (params_.expected_ids == nullptr ||
          (slot < params_.n_expected_ids && params_.expected_ids[slot] == storage_.id(slot)));
}

double FusedScorer::depth_of(std::uint32_t slot) const {
  return metric::depth_from_sq_norm(storage_.sq_norm(slot), storage_.curvature());
}

ScoredHit FusedScorer::exact(std::uint32_t slot) const {
  ScoredHit h;
  h.slot = slot;
  const double delta = metric::kernels().l2sq_f64(q_, storage_.vector(slot), storage_.dim()) *
                       a_q_ * storage_.factor(slot);
  h.distance = metric::distance_from_delta(delta, storage_.curvature());
  h.depth = depth_of(slot);
  h.log_weight = params_.decay.log_weight(params_.columns, slot);
  h.score = -h.distance;
  if (params_.depth_bias != 0.0) h.score += params_.depth_bias * h.depth;
  if (params_.time_coef != 0.0) h.score += params_.time_coef * h.log_weight;
  return h;
}

double FusedScorer::distance_of_rank(float rank) const {
  // Ranking precision is enough here (float32 asinh, relative error ~1e-7); the reported hits
  // are re-scored in float64 (Collector::finish).
  return two_over_sqrt_c_ *
         static_cast<double>(std::asinh(std::sqrt(static_cast<float>(rank * a_q_f_ * c_f_))));
}

double FusedScorer::time_term(std::uint32_t slot) const {
  double s = 0.0;
  if (params_.depth_bias != 0.0) s += params_.depth_bias * depth_of(slot);
  if (params_.time_coef != 0.0)
    s += params_.time_coef * params_.decay.log_weight(params_.columns, slot);
  return s;
}

double FusedScorer::distance_lower_bound(float rank) const {
  // d = (2/sqrt c) asinh(y), y = sqrt(c delta) >= 0, and asinh(y) >= ln(1 + y) >=
  // ln 2 * floor(log2(1 + y)): the exponent of a float, no transcendental function.
  const float y = std::sqrt(rank * a_q_f_ * c_f_);
  const int e = std::ilogb(1.0f + y);
  return two_over_sqrt_c_ * 0.6931471805599453 * static_cast<double>(e);
}

float FusedScorer::rank_limit(double score) const {
  constexpr float kInfF = std::numeric_limits<float>::infinity();
  if (!params_.has_bound() || !(score > kNegInf)) return kInfF;
  const double beta = params_.depth_bias;
  // A point at distance d scores at most -(1 - beta) d + beta depth(q) (beta > 0), else -d;
  // that bound is <= score  <=>  d >= d_min.
  const double d_min = beta > 0.0 ? (beta * depth_q_ - score) / (1.0 - beta) : -score;
  if (d_min <= 0.0) return 0.0f;
  const double c = storage_.curvature();
  const double s = std::sinh(0.5 * std::sqrt(c) * d_min);
  const double rank = s * s / c / a_q_;  // delta = sinh^2(sqrt(c) d / 2) / c = rank a(q)
  // Margin for the float32 rank's rounding (relative error well below 1e-5).
  return static_cast<float>(rank * (1.0 + 1e-5)) + std::numeric_limits<float>::denorm_min();
}

namespace {

// The k best approximate scores (for the stopping rule) and every eligible candidate scored,
// re-scored exactly at the end when near the k-th approximate score.
class Collector {
 public:
  Collector(const FusedScorer& scorer, std::size_t k) : scorer_(scorer), k_(k) {
    top_.clear();
    seen_.clear();
  }
  // Offers an eligible slot with its float32 rank |q - x|^2 a(x).
  // Returns whether the slot entered the k best.
  bool offer(std::uint32_t slot, float rank) {
    if (rank >= limit_) return false;
    // score = time_term - d. Below the k-th score by more than the slack a slot can never be
    // re-scored into the top k; the time term and a cheap lower bound of d often show that
    // before the asinh is evaluated.
    const double time_term = scorer_.time_term(slot);
    const bool full = top_.size() >= k_;
    if (full && time_term - scorer_.distance_lower_bound(rank) < floor_) return false;
    const double s = time_term - scorer_.distance_of_rank(rank);
    if (full && s < floor_) return false;
    seen_.push_back({s, slot});
    if (top_.size() >= k_ && s <= top_.front().first) return false;  // the k-th is unchanged
    keep_best(top_, k_, {s, slot});
    if (top_.size() >= k_) {
      const double kth = top_.front().first;
      limit_ = scorer_.rank_limit(kth);
      floor_ = kth - slack(kth);
    }
    return true;
  }
  static double slack(double kth) { return 1e-4 * (1.0 + std::fabs(kth)); }
  double kth() const { return top_.size() >= k_ ? top_.front().first : kNegInf; }
  void finish(std::vector<ScoredHit>& out) const {
    const double kth = top_.size() >= k_ ? top_.front().first : kNegInf;
    out.clear();
    for (const ScoreEntry& e : seen_)
      if (e.first >= kth - slack(kth)) out.push_back(scorer_.exact(e.second));
    std::sort(out.begin(), out.end(), better);
    if (out.size() > k_) out.resize(k_);
  }

 private:
  const FusedScorer& scorer_;
  std::size_t k_;
  float limit_ = std::numeric_limits<float>::infinity();
  double floor_ = kNegInf;
  static thread_local std::vector<ScoreEntry> top_;
  static thread_local std::vector<ScoreEntry> seen_;
};
thread_local std::vector<ScoreEntry> Collector::top_;
thread_local std::vector<ScoreEntry> Collector::seen_;

}  // namespace

void fused_scan(const FusedScorer& scorer, const VectorStorage& storage, const float* q,
                std::size_t n_slots, const std::uint32_t* slots, std::size_t k,
                std::vector<ScoredHit>& out) {
  const auto l2sq = metric::kernels().l2sq;
  const std::size_t dim = storage.dim();
  Collector collector(scorer, k);
  for (std::size_t i = 0; i < n_slots; ++i) {
    const std::uint32_t s = slots != nullptr ? slots[i] : static_cast<std::uint32_t>(i);
    if (!scorer.eligible(s)) continue;
    collector.offer(s, l2sq(q, storage.vector(s), dim) * storage.rank_factor(s));
  }
  collector.finish(out);
}

namespace {

// See fused_graph_search. Reads the buckets whose weight bound can still beat the k-th score,
// best bound first, skipping slots the walk already scored. When all of them fit in the budget
// the pass is exact. Otherwise it reads them only while reading pays: a probe of the first
// bucket's rows must place a point in the top k (time dominates: recent points beat what the
// walk found), then each bucket read must improve the top k, and the budget caps the total.
// Where distances decide (a probe finds nothing) the pass costs one probe.
void time_pass(const FusedScorer& scorer, const VectorStorage& storage, const float* q,
               SearchScratch& scratch, Collector& collector) {
  constexpr std::int64_t kProbeRows = 32;
  const FusedParams& p = scorer.params();
  const TimeBuckets& b = p.buckets;
  if (b.n_buckets == 0 || p.decay.empty() || !p.has_bound() || p.time_coef <= 0.0) return;
  // score <= beta depth(q) - (1 - beta) d + tau log w <= beta depth(q) + tau log w (beta > 0).
  const double head = p.depth_bias > 0.0 ? p.depth_bias * scorer.query_depth() : 0.0;
  thread_local std::vector<std::pair<double, std::size_t>> bounds;
  bounds.clear();
  std::size_t rows = 0;
  const double kth = collector.kth();
  for (std::size_t i = 0; i < b.n_buckets; ++i) {
    const double bound =
        head + p.time_coef * p.decay.log_weight_bound(b.t_min[i], b.t_max[i], b.max_access[i]);
    if (bound <= kth) continue;
    bounds.push_back({bound, i});
    rows += static_cast<std::size_t>(b.starts[i + 1] - b.starts[i]);
  }
  const bool exact = rows <= b.scan_budget;
  std::sort(bounds.begin(), bounds.end(),
            [](const auto& x, const auto& y) { return x.first > y.first; });
  const auto l2sq = metric::kernels().l2sq;
  const std::size_t dim = storage.dim();
  std::size_t scanned = 0;
  // Rows in time order lie anywhere in storage: fetching a few rows ahead hides the memory
  // latency that otherwise dominates the scan (each row a cache miss on a large index).
  constexpr std::int64_t kAhead = 4;
  const std::size_t row_bytes = dim * sizeof(float);
  auto scan = [&](std::int64_t from, std::int64_t to) {
    std::size_t entered = 0;
    for (std::int64_t j = from; j < std::min(to, from + kAhead); ++j)
      prefetch_row(storage.vector(b.order[j]), row_bytes);
    for (std::int64_t j = from; j < to; ++j) {
      if (j + kAhead < to) prefetch_row(storage.vector(b.order[j + kAhead]), row_bytes);
      const std::uint32_t s = b.order[j];
      if (!scorer.eligible(s) || !scratch.first_score(s)) continue;
      entered += collector.offer(s, l2sq(q, storage.vector(s), dim) * storage.rank_factor(s));
    }
    scanned += static_cast<std::size_t>(to - from);
    return entered;
  };
  for (std::size_t n = 0; n < bounds.size(); ++n) {
    const auto [bound, i] = bounds[n];
    if (bound <= collector.kth()) break;
    std::int64_t from = b.starts[i];
    const std::int64_t to = b.starts[i + 1];
    if (!exact) {
      if (scanned + static_cast<std::size_t>(to - from) > b.scan_budget) break;
      if (n == 0) {
        const std::int64_t probe_end = std::min(to, from + kProbeRows);
        if (scan(from, probe_end) == 0) break;
        from = probe_end;
      }
      if (scan(from, to) == 0 && n > 0) break;
    } else {
      scan(from, to);
    }
  }
}

// When time dominates (the row 10 % down the time order already weighs below e^-10), the best
// scores are recent points wherever they lie and a distance-ordered walk finds them late: score
// the newest bucket(s) first, so the walk and the time pass start from a k-th score that prunes.
// The seeded slots are marked scored, not visited: the walk still expands through them.
void time_seed(const FusedScorer& scorer, const VectorStorage& storage, const float* q,
               SearchScratch& scratch, Collector& collector, std::size_t k) {
  const FusedParams& p = scorer.params();
  const TimeBuckets& b = p.buckets;
  if (b.n_buckets == 0 || p.decay.empty() || !p.has_bound() || p.time_coef <= 0.0) return;
  const std::int64_t probe_row = b.starts[b.n_buckets] / 10;
  std::size_t probe = 0;
  while (probe + 1 < b.n_buckets && b.starts[probe + 1] <= probe_row) ++probe;
  const double probe_bound =
      p.time_coef * p.decay.log_weight_bound(b.t_min[probe], b.t_max[probe], b.max_access[probe]);
  if (probe_bound > -10.0) return;
  const auto l2sq = metric::kernels().l2sq;
  const std::size_t dim = storage.dim();
  std::size_t offered = 0;
  for (std::size_t i = 0; i < b.n_buckets && offered < k; ++i) {
    for (std::int64_t j = b.starts[i]; j < b.starts[i + 1]; ++j) {
      const std::uint32_t s = b.order[j];
      if (!scorer.eligible(s) || !scratch.first_score(s)) continue;
      collector.offer(s, l2sq(q, storage.vector(s), dim) * storage.rank_factor(s));
      ++offered;
    }
  }
}

// A walk of level 0 as the plain HNSW search walks it, offering every eligible node it visits
// that this query has not scored yet. frontier: nearest unexpanded first; beam: the ef nearest
// eligible nodes seen (the HNSW budget): a node enters the frontier while the beam holds fewer
// than ef eligible nodes or it is nearer than the beam's farthest, and the walk stops when the
// nearest unexpanded node is farther than that. The score bound (the collector's rank limit)
// decides only whether a node itself can enter the top k, never whether it is expanded: a node
// that cannot score can still lead to one that can. (Stopping the walk at the limit made it a
// beam of width k: recall@10 0.74 on text embeddings at any ef, where the plain walk at ef=128
// reads 0.996.) So at equal ef the fused walk visits what the plain walk visits, and with a
// flat time term it is the plain walk. by_l2: the walk is ordered by |q - x|^2 instead (the
// second walk, see HnswGraph::kHubRatio). Returns the eligible node nearest to q in Euclidean
// terms that the walk visited (where the second walk starts, as in the plain search), or
// HnswGraph::kNone.
std::uint32_t walk_level0(const HnswGraph& graph, const VectorStorage& storage,
                          const FusedScorer& scorer, const float* q, std::uint32_t entry,
                          std::size_t ef, bool by_l2, SearchScratch& scratch,
                          Collector& collector) {
  auto& frontier = scratch.frontier;
  auto& beam = scratch.results;
  const FusedParams& params = scorer.params();
  const std::int64_t* time_column = params.decay.empty() ? nullptr : params.columns.t;
  const std::size_t time_rows = params.columns.rows;
  const std::int64_t* window_from =
      params.decay.uses_window() ? params.columns.valid_from : nullptr;
  const std::int64_t* window_until =
      params.decay.uses_window() ? params.columns.valid_until : nullptr;
  std::uint32_t l2_nearest = HnswGraph::kNone;
  float l2_nearest_d = std::numeric_limits<float>::infinity();
  auto visit = [&](std::uint32_t n, float l2) {
    scratch.mark(n);
    const float r = l2 * storage.rank_factor(n);
    const float key = by_l2 ? l2 : r;
    const bool eligible = scorer.eligible(n);
    if (eligible && l2 < l2_nearest_d) {
      l2_nearest_d = l2;
      l2_nearest = n;
    }
    if (eligible && scratch.first_score(n)) collector.offer(n, r);
    if (!(beam.size() < ef || key < beam.front().first)) return;
    frontier.push_back({-key, n});
    std::push_heap(frontier.begin(), frontier.end());
    // Its list is read when it leaves the frontier (a cache miss of its own): fetch it now.
    prefetch(graph.level0_list(n));
    prefetch(graph.level0_list(n) + 16);
    if (!eligible) return;
    beam.push_back({key, n});
    std::push_heap(beam.begin(), beam.end());
    if (beam.size() > ef) {
      std::pop_heap(beam.begin(), beam.end());
      beam.pop_back();
    }
  };
  scratch.begin(storage.slots());
  visit(entry, metric::kernels().l2sq(q, storage.vector(entry), storage.dim()));
  while (!frontier.empty()) {
    const Candidate c = frontier.front();
    if (beam.size() >= ef && -c.first > beam.front().first) break;
    std::pop_heap(frontier.begin(), frontier.end());
    frontier.pop_back();
    // As in the plain search, with the time stamps of unvisited nodes prefetched too.
    const std::uint32_t* l = graph.level0_list(c.second);
    expand(
        l + 1, graph.level0_count(c.second, l), q, storage, scratch, scratch.fresh,
        [&](std::uint32_t n) {
          if (time_column == nullptr || n >= time_rows) return;
          prefetch(time_column + n);
          if (window_from != nullptr) prefetch(window_from + n);
          if (window_until != nullptr) prefetch(window_until + n);
        },
        visit);
  }
  return l2_nearest;
}

}  // namespace

void fused_graph_search(const HnswGraph& graph, const VectorStorage& storage,
                        const FusedScorer& scorer, const float* q, std::size_t k, std::size_t ef,
                        SearchScratch& scratch, std::vector<ScoredHit>& out) {
  out.clear();
  if (graph.entry_point() == HnswGraph::kNone) return;
  float cur_r;
  const std::uint32_t cur = graph.descend(storage, q, &cur_r);
  scratch.begin_scoring(storage.slots());
  Collector collector(scorer, k);
  time_seed(scorer, storage, q, scratch, collector, k);
  const std::uint32_t l2_nearest =
      walk_level0(graph, storage, scorer, q, cur, ef, false, scratch, collector);
  // As in the plain search: a walk that ended among hubs walks again in Euclidean order, from
  // the eligible node nearest in Euclidean terms that it visited, for the points at the
  // query's own depth (HnswGraph::kHubRatio).
  const auto a_q = static_cast<float>(scorer.query_factor());
  if (HnswGraph::hub_dominated(storage, scratch.results, a_q) && l2_nearest != HnswGraph::kNone)
    walk_level0(graph, storage, scorer, q, l2_nearest, ef, true, scratch, collector);
  time_pass(scorer, storage, q, scratch, collector);
  collector.finish(out);
}

void touch_hits(const TimeColumns& columns, const std::vector<ScoredHit>& hits) {
  if (columns.access_count == nullptr) return;
  for (const ScoredHit& h : hits)
    if (h.slot < columns.rows) add_count(columns.access_count, h.slot, 1);
}

}  // namespace poincare
