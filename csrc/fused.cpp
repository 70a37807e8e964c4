#include "fused.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "access_counts.h"
#include "beam.h"
#include "hnsw_links.h"
#include "metric.h"
#include "rank.h"

namespace poincare {

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
  h.log_weight = params_.score.decay.log_weight(params_.columns, slot);
  h.score = -h.distance;
  if (params_.score.depth_bias != 0.0) h.score += params_.score.depth_bias * h.depth;
  if (params_.score.time_coef != 0.0) h.score += params_.score.time_coef * h.log_weight;
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
  if (params_.score.depth_bias != 0.0) s += params_.score.depth_bias * depth_of(slot);
  if (params_.score.time_coef != 0.0)
    s += params_.score.time_coef * params_.score.decay.log_weight(params_.columns, slot);
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
  if (!params_.score.has_bound() || !(score > kNegInf)) return kInfF;
  const double beta = params_.score.depth_bias;
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
  const PoincareRank<1> rank(storage, q, 1.0f);
  Collector collector(scorer, k);
  for (std::size_t i = 0; i < n_slots; ++i) {
    const std::uint32_t s = slots != nullptr ? slots[i] : static_cast<std::uint32_t>(i);
    if (!scorer.eligible(s)) continue;
    collector.offer(s, rank.score_one(s)[0]);
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
  const TimeBuckets& b = scorer.params().buckets;
  const ScoreSpec& spec = scorer.params().score;
  if (b.n_buckets == 0 || spec.decay.empty() || !spec.has_bound() || spec.time_coef <= 0.0) return;
  // score <= beta depth(q) - (1 - beta) d + tau log w <= beta depth(q) + tau log w (beta > 0).
  const double head = spec.depth_bias > 0.0 ? spec.depth_bias * scorer.query_depth() : 0.0;
  thread_local std::vector<std::pair<double, std::size_t>> bounds;
  bounds.clear();
  std::size_t rows = 0;
  const double kth = collector.kth();
  for (std::size_t i = 0; i < b.n_buckets; ++i) {
    const double bound = head + spec.time_coef * spec.decay.log_weight_bound(
                                       b.t_min[i], b.t_max[i], b.max_access[i]);
    if (bound <= kth) continue;
    bounds.push_back({bound, i});
    rows += static_cast<std::size_t>(b.starts[i + 1] - b.starts[i]);
  }
  const bool exact = rows <= b.scan_budget;
  std::sort(bounds.begin(), bounds.end(),
            [](const auto& x, const auto& y) { return x.first > y.first; });
  const PoincareRank<1> rank(storage, q, 1.0f);
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
      entered += collector.offer(s, rank.score_one(s)[0]);
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
  const TimeBuckets& b = scorer.params().buckets;
  const ScoreSpec& spec = scorer.params().score;
  if (b.n_buckets == 0 || spec.decay.empty() || !spec.has_bound() || spec.time_coef <= 0.0) return;
  const std::int64_t probe_row = b.starts[b.n_buckets] / 10;
  std::size_t probe = 0;
  while (probe + 1 < b.n_buckets && b.starts[probe + 1] <= probe_row) ++probe;
  const double probe_bound =
      spec.time_coef *
      spec.decay.log_weight_bound(b.t_min[probe], b.t_max[probe], b.max_access[probe]);
  if (probe_bound > -10.0) return;
  const PoincareRank<1> rank(storage, q, 1.0f);
  std::size_t offered = 0;
  for (std::size_t i = 0; i < b.n_buckets && offered < k; ++i) {
    for (std::int64_t j = b.starts[i]; j < b.starts[i + 1]; ++j) {
      const std::uint32_t s = b.order[j];
      if (!scorer.eligible(s) || !scratch.first_score(s)) continue;
      collector.offer(s, rank.score_one(s)[0]);
      ++offered;
    }
  }
}

// The fused walk's result handler: the walk is the plain search's (the same beams decide what
// is expanded and when the walk ends, over eligible nodes), and every eligible node it scores
// that this query has not scored yet is offered to the collector. The score bound (the
// collector's rank limit) decides only whether a node itself can enter the top k, never whether
// it is expanded: a node that cannot score can still lead to one that can. So at equal ef the
// fused walk visits what the plain walk visits, and with a flat time term it is the plain walk.
// Over compressed storage the walk's keys carry the codes' error, which the collector's bound and
// slack (sized for float32 rounding) do not allow for: eligible nodes are offered with their
// float32 rank instead (one row read from the coordinates per node scored).
class FusedHandler {
 public:
  FusedHandler(const FusedScorer& scorer, SearchScratch& scratch, Collector& collector,
               const VectorStorage& storage, const float* q)
      : scorer_(scorer),
        scratch_(scratch),
        collector_(collector),
        exact_(storage, q, 1.0f),
        rescore_(storage.code_kind() != codes::CodeKind::kNone) {
    const FusedParams& params = scorer.params();
    time_ = params.score.decay.empty() ? nullptr : params.columns.t;
    rows_ = params.columns.rows;
    from_ = params.score.decay.uses_window() ? params.columns.valid_from : nullptr;
    until_ = params.score.decay.uses_window() ? params.columns.valid_until : nullptr;
  }
  bool eligible(std::uint32_t slot) const { return scorer_.eligible(slot); }
  template <typename Keys>
  void offer(std::uint32_t slot, const Keys& keys, bool eligible) {
    if (!eligible || !scratch_.first_score(slot)) return;
    collector_.offer(slot, rescore_ ? exact_.score_one(slot)[0] : keys[0]);
  }
  // The time stamps of unvisited nodes are read when they are scored: fetch them with the row.
  void also_prefetch(std::uint32_t slot) const {
    if (rescore_) exact_.prefetch(slot);
    if (time_ == nullptr || slot >= rows_) return;
    prefetch(time_ + slot);
    if (from_ != nullptr) prefetch(from_ + slot);
    if (until_ != nullptr) prefetch(until_ + slot);
  }

 private:
  const FusedScorer& scorer_;
  SearchScratch& scratch_;
  Collector& collector_;
  PoincareRank<1> exact_;
  bool rescore_;
  const std::int64_t* time_;
  std::size_t rows_;
  const std::int64_t* from_;
  const std::int64_t* until_;
};

// See fused_graph_search: the farthest walk-found hit's position among the first beam's nodes
// in rank order (ties share the later position), ef + 1 when it is not among them.
std::size_t walk_reach(const SearchScratch& scratch, std::size_t ef,
                       const std::vector<ScoredHit>& hits) {
  const auto& beam = scratch.beams[0];
  std::size_t reach = 0;
  for (const ScoredHit& h : hits) {
    if (!scratch.seen(h.slot)) continue;  // scored by the time seed or pass, not the walk
    const auto it = std::find_if(beam.begin(), beam.end(),
                                 [&](const BeamEntry& e) { return e.slot == h.slot; });
    if (it == beam.end()) return ef + 1;
    const float key = it->key;
    const auto nearer = static_cast<std::size_t>(std::count_if(
        beam.begin(), beam.end(), [key](const BeamEntry& e) { return e.key <= key; }));
    reach = std::max(reach, nearer);
  }
  return reach;
}

}  // namespace

std::size_t fused_graph_search(const HnswGraph& graph, const VectorStorage& storage,
                               const FusedScorer& scorer, const float* q, std::size_t k,
                               std::size_t ef, SearchScratch& scratch,
                               std::vector<ScoredHit>& out) {
  out.clear();
  if (graph.entry_point() == HnswGraph::kNone) return 0;
  float cur_r;
  const std::uint32_t cur = graph.descend(storage, q, scratch, &cur_r);
  scratch.begin_scoring(storage.slots());
  Collector collector(scorer, k);
  time_seed(scorer, storage, q, scratch, collector, k);
  FusedHandler handler(scorer, scratch, collector, storage, q);
  const Level0Reader reader(graph);
  if (graph.switches().second_order)
    with_search_rank<2>(storage, q, [&](const auto& rank) {
      beam_walk(reader, storage, rank, cur, {ef, HnswGraph::second_beam(ef)}, scratch, handler);
    });
  else
    with_search_rank<1>(storage, q, [&](const auto& rank) {
      beam_walk(reader, storage, rank, cur, {ef}, scratch, handler);
    });
  time_pass(scorer, storage, q, scratch, collector);
  collector.finish(out);
  return walk_reach(scratch, ef, out);
}

void touch_hits(const TimeColumns& columns, const std::vector<ScoredHit>& hits) {
  if (columns.access_count == nullptr) return;
  for (const ScoredHit& h : hits)
    if (h.slot < columns.rows) add_count(columns.access_count, h.slot, 1);
}

}  // namespace poincare
