#include "hnsw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "errors.h"
#include "hnsw_links.h"
#include "metric.h"
#include "reserve.h"

namespace poincare {

using hnsw_detail::copy_links_relaxed;
using hnsw_detail::expand;
using hnsw_detail::load_relaxed;
using hnsw_detail::prefetch;
using hnsw_detail::prefetch_row;
using hnsw_detail::store_relaxed;

namespace {

// splitmix64: a well-mixed 64-bit hash, so a level depends only on (seed, slot) and a saved index
// that grows after loading draws the same levels as one that never stopped.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Heaps over std::vector: results is a max-heap on rank (worst on top); the frontier stores
// negated ranks in a max-heap so the nearest unexpanded node is on top.
inline void heap_push(std::vector<Candidate>& h, Candidate c) {
  h.push_back(c);
  std::push_heap(h.begin(), h.end());
}
inline void heap_pop(std::vector<Candidate>& h) {
  std::pop_heap(h.begin(), h.end());
  h.pop_back();
}

// Whether a kept neighbour with factor a_r may stand in for a candidate with factor a_e in the
// heuristic (see select_neighbors): only when the two lie at about the same depth. A hub much
// nearer the origin cannot hold the crowd beneath it; a node much deeper than e is a poor way up
// to e, since its few links point at its own crowd (see kCoverRatio).
inline bool can_cover(float a_r, float a_e) {
  return a_r * HnswGraph::kCoverRatio >= a_e && a_e * HnswGraph::kCoverRatio >= a_r;
}

}  // namespace

void HnswParams::validate() const {
  if (M < 2 || M > 256) throw InvalidArgument("M must be in [2, 256], got " + std::to_string(M));
  if (ef_construction < 1)
    throw InvalidArgument("ef_construction must be >= 1, got " + std::to_string(ef_construction));
}

HnswGraph::HnswGraph(const HnswParams& params)
    : params_(params), node_locks_(new SpinLock[kLockStripes]) {
  params_.validate();
  level_mult_ = 1.0 / std::log(static_cast<double>(params_.M));
}

int HnswGraph::draw_level(std::uint32_t slot) const {
  const std::uint64_t r = mix64(params_.seed ^ mix64(slot));
  // u in (0, 1]: 53 random bits, never 0, so -log(u) is finite.
  const double u = (static_cast<double>(r >> 11) + 1.0) * 0x1.0p-53;
  const int level = static_cast<int>(-std::log(u) * level_mult_);
  return std::min(level, kMaxLevel);
}

void HnswGraph::grow(std::size_t n) {
  const std::size_t old = nodes();
  if (n <= old) return;
  levels_.resize(n);
  level0_.resize(n * level0_stride(), 0);
  repair_backups_.resize((n - std::min(n, backups_base_)) * kRepairBackups, kNone);
  repair_source_.resize(n);
  for (std::size_t s = old; s < n; ++s) {
    const int lv = draw_level(static_cast<std::uint32_t>(s));
    levels_[s] = static_cast<std::int8_t>(lv);
    if (upper_.size() + static_cast<std::size_t>(lv) * upper_stride() > UINT32_MAX)
      throw InvalidArgument("too many upper-level links for one index");
    note_upper_lists(s, lv);
    upper_.resize(upper_.size() + static_cast<std::size_t>(lv) * upper_stride(), 0);
  }
}

void HnswGraph::reserve(std::size_t n) {
  if (n <= nodes()) return;
  std::size_t upper = upper_.size();
  for (std::size_t s = nodes(); s < n; ++s)
    upper += static_cast<std::size_t>(draw_level(static_cast<std::uint32_t>(s))) * upper_stride();
  reserve_amortised(levels_, n);
  reserve_amortised(level0_, n * level0_stride());
  repair_source_.reserve(n);
  reserve_amortised(upper_rank_start_, (n + 63) / 64);
  reserve_amortised(upper_mask_, (n + 63) / 64);
  reserve_amortised(upper_node_offset_, upper / upper_stride());
  reserve_amortised(upper_, upper);
}

std::uint32_t* HnswGraph::links_at(std::uint32_t slot, int level) {
  if (level == 0) return const_cast<std::uint32_t*>(level0_list(slot));
  return upper_.data() + upper_offset(slot) + static_cast<std::size_t>(level - 1) * upper_stride();
}

void HnswGraph::note_upper_lists(std::size_t slot, int level) {
  if (slot % 64 == 0) {
    upper_rank_start_.push_back(static_cast<std::uint32_t>(upper_node_offset_.size()));
    upper_mask_.push_back(0);
  }
  if (level == 0) return;
  upper_mask_[slot / 64] |= std::uint64_t{1} << (slot % 64);
  upper_node_offset_.push_back(static_cast<std::uint32_t>(upper_.size()));
}

std::size_t HnswGraph::upper_offset(std::uint32_t slot) const {
  // Its rank among the slots with upper levels: those before its block, then the set bits of
  // its block below it (one popcount; the descent asks for every neighbour it prefetches).
  const std::size_t block = slot >> 6;
  const std::uint64_t before = upper_mask_[block] & ((std::uint64_t{1} << (slot & 63)) - 1);
  return upper_node_offset_[upper_rank_start_[block] +
                            static_cast<std::size_t>(__builtin_popcountll(before))];
}

std::uint32_t* HnswGraph::level0_with_room(std::uint32_t slot) {
  std::uint32_t* l = links_at(slot, 0);
  if (is_relocated(slot) || l[0] < max_links(0)) return l;
  // A full list in place: copy it to a relocated list (count and links) and point the head at
  // it. The head stays a relocation for the node's life; the in-place words stay unused.
  const std::size_t index = relocated_.size() / relocated_stride();
  if (index >= kRelocated) throw InvalidArgument("too many relocated link lists");
  // 1/8 slack, not a doubling's: the lists grow by a few per repair, for the index's life.
  if (relocated_.capacity() < relocated_.size() + relocated_stride())
    relocated_.reserve(relocated_.size() + relocated_stride() + relocated_.size() / 8);
  relocated_.insert(relocated_.end(), l, l + level0_stride());
  relocated_.resize((index + 1) * relocated_stride(), 0);
  l[0] = kRelocated | static_cast<std::uint32_t>(index);
  return relocated_.data() + index * relocated_stride();
}

const std::uint32_t* HnswGraph::links_at(std::uint32_t slot, int level) const {
  if (level == 0) return level0_list(slot);
  return upper_.data() + upper_offset(slot) + static_cast<std::size_t>(level - 1) * upper_stride();
}

// Beam search on one level during construction: link lists are copied with relaxed loads
// because other threads may be rewriting them (see load_relaxed). Leaves the ef nearest in
// scratch.results, by the rank quantity |x - n|^2 a(x) a(n).
void HnswGraph::search_layer_concurrent(const VectorStorage& storage, const float* x, float ax,
                                        std::uint32_t entry, int level, std::size_t ef,
                                        SearchScratch& scratch) {
  const auto l2sq = metric::kernels().l2sq;
  scratch.begin(storage.slots());
  const float l2_entry = l2sq(x, storage.vector(entry), storage.dim());
  const float d0 = l2_entry * ax * storage.rank_factor(entry);
  scratch.mark(entry);
  heap_push(scratch.frontier, {-d0, entry});
  heap_push(scratch.results, {d0, entry});
  beam_concurrent(storage, x, level, ef, scratch,
                  [&](std::uint32_t n, float l2) { return l2 * ax * storage.rank_factor(n); });
}

// The loop of a construction beam from the frontier and results already in scratch, ordered by
// order(n, l2).
template <typename Order>
void HnswGraph::beam_concurrent(const VectorStorage& storage, const float* x, int level,
                                std::size_t ef, SearchScratch& scratch, const Order& order) {
  const std::size_t capacity = max_links(level) + (level == 0 ? kRepairSlots : 0);
  auto& frontier = scratch.frontier;
  auto& results = scratch.results;
  float bound = results.empty() ? std::numeric_limits<float>::infinity() : results.front().first;
  while (!frontier.empty()) {
    const Candidate c = frontier.front();
    if (-c.first > bound && results.size() >= ef) break;
    heap_pop(frontier);
    copy_links_relaxed(links_at(c.second, level), capacity, scratch.links);
    auto consider = [&](std::uint32_t n, float l2) {
      const float d = order(n, l2);
      if (results.size() < ef || d < bound) {
        heap_push(frontier, {-d, n});
        heap_push(results, {d, n});
        if (results.size() > ef) heap_pop(results);
        bound = results.front().first;
        // Its list is read when it leaves the frontier; start fetching it now.
        prefetch(links_at(n, level));
      }
    };
    expand(
        scratch.links.data(), scratch.links.size(), x, storage, scratch, scratch.fresh,
        [](std::uint32_t) {}, consider);
  }
}

bool HnswGraph::hub_dominated(const VectorStorage& storage, const std::vector<Candidate>& found,
                              float a_q) {
  if (found.empty()) return false;
  const Candidate* best = &found.front();
  for (const Candidate& c : found)
    if (c < *best) best = &c;
  return storage.rank_factor(best->second) * kHubRatio < a_q;
}

void HnswGraph::add_level0_l2_candidates(const VectorStorage& storage, const float* x, float ax,
                                         std::size_t ef, SearchScratch& scratch) {
  auto& saved = scratch.selection;
  saved.assign(scratch.results.begin(), scratch.results.end());
  // The Euclidean walk starts afresh at the nearest node found; what it keeps joins the
  // candidates once per slot. (Resuming from what the first walk scored, marks kept, found the
  // same candidates and saved nothing measurable, while recording every scored node cost the
  // common, untriggered walk 10-15 %.)
  const std::uint32_t start = std::min_element(saved.begin(), saved.end())->second;
  hnsw_detail::start_l2_beam(scratch, storage.slots(), x, storage, start,
                             [](std::uint32_t) { return true; });
  beam_concurrent(storage, x, 0, ef, scratch, [](std::uint32_t, float l2) { return l2; });
  hnsw_detail::merge_l2_found(saved, scratch.results, [&](const Candidate& c) {
    return c.first * ax * storage.rank_factor(c.second);
  });
  scratch.results.assign(saved.begin(), saved.end());
}

// The heuristic of the HNSW paper (Alg. 4 without extension): walk candidates from nearest and
// keep one only if it is closer to the base than to every neighbour already kept, which spreads
// links over directions instead of clustering them.
void HnswGraph::select_neighbors(const VectorStorage& storage, std::vector<Candidate>& candidates,
                                 std::size_t max_count, std::size_t fill,
                                 std::uint32_t* passed_over, std::size_t n_passed_over) const {
  std::sort(candidates.begin(), candidates.end());
  if (candidates.size() <= max_count) return;
  const auto l2sq = metric::kernels().l2sq;
  const auto l2sq_batch4 = metric::kernels().l2sq_batch4;
  const std::size_t dim = storage.dim();
  std::size_t kept = 0;
  thread_local std::vector<Candidate> pruned_scratch;
  pruned_scratch.clear();
  std::size_t examined = 0;
  for (std::size_t i = 0; i < candidates.size() && kept < max_count; ++i, examined = i) {
    const Candidate e = candidates[i];
    const float* ve = storage.vector(e.second);
    const float ae = storage.rank_factor(e.second);
    bool good = true;
    std::size_t r = 0;
    for (; good && r + 4 <= kept; r += 4) {  // four at a time; the decision is the same
      const Candidate* k = candidates.data() + r;
      const float* rows[4] = {storage.vector(k[0].second), storage.vector(k[1].second),
                              storage.vector(k[2].second), storage.vector(k[3].second)};
      float l2[4];
      l2sq_batch4(ve, rows, dim, l2);
      for (int j = 0; j < 4; ++j) {
        const float ar = storage.rank_factor(k[j].second);
        good &= !(l2[j] * ae * ar < e.first && can_cover(ar, ae));
      }
    }
    for (; good && r < kept; ++r) {
      const std::uint32_t s = candidates[r].second;
      const float ar = storage.rank_factor(s);
      good = !(l2sq(ve, storage.vector(s), dim) * ae * ar < e.first && can_cover(ar, ae));
    }
    if (good) {
      candidates[kept++] = e;
    } else {
      pruned_scratch.push_back(e);
    }
  }
  // Keep pruned connections (the paper's keepPrunedConnections), up to `fill` links: in a
  // tree-like (hyperbolic) metric the heuristic alone leaves many nodes with one or two links.
  // Measured on 100k boundary-heavy GloVe points, recall@10 at ef=16: 0.948 with no fill,
  // 0.958 filling to M, 0.964 filling to 2M; on 400k GloVe (largest norm 0.95) filling to M
  // needed ef=192 for recall 0.95 where filling to 2M needed 128.
  const std::size_t used = std::min(pruned_scratch.size(), fill > kept ? fill - kept : 0);
  if (passed_over != nullptr) {
    // The nearest candidates not kept, nearest first: the pruned ones the refill leaves, then
    // those the walk never reached (still in place from `examined` on, before the refill).
    std::size_t o = 0;
    for (std::size_t j = used; j < pruned_scratch.size() && o < n_passed_over; ++j)
      passed_over[o++] = pruned_scratch[j].second;
    for (std::size_t j = examined; j < candidates.size() && o < n_passed_over; ++j)
      passed_over[o++] = candidates[j].second;
  }
  for (std::size_t j = 0; j < used; ++j) candidates[kept++] = pruned_scratch[j];
  candidates.resize(kept);
}

std::uint32_t HnswGraph::connect(const VectorStorage& storage, std::uint32_t slot, int level,
                                 SearchScratch& scratch) {
  auto& selected = scratch.selection;
  selected.assign(scratch.results.begin(), scratch.results.end());
  std::uint32_t* backups = level == 0 ? backups_of(slot) : nullptr;
  // At level 0 the nearest candidates the heuristic passes over are kept as cheap in-link
  // sources for the connectivity repair.
  select_neighbors(storage, selected, static_cast<std::size_t>(params_.M),
                   static_cast<std::size_t>(params_.M), backups, kRepairBackups);
  const std::size_t cap = max_links(level);
  {
    std::lock_guard<SpinLock> g(lock_of(slot));
    std::uint32_t* l = links_at(slot, level);
    for (std::size_t i = 0; i < selected.size(); ++i) store_relaxed(l + 1 + i, selected[i].second);
    store_relaxed(l, static_cast<std::uint32_t>(selected.size()));
  }
  const auto l2sq = metric::kernels().l2sq;
  const auto l2sq_batch4 = metric::kernels().l2sq_batch4;
  const std::size_t dim = storage.dim();
  const std::size_t row_bytes = dim * sizeof(float);
  auto& pruned = scratch.pruned;
  auto& old_links = scratch.old_links;
  for (const Candidate& c : selected) {
    const std::uint32_t n = c.second;
    std::lock_guard<SpinLock> g(lock_of(n));
    std::uint32_t* l = links_at(n, level);
    const std::uint32_t count = l[0];
    if (std::find(l + 1, l + 1 + count, slot) != l + 1 + count) continue;
    if (count < cap) {
      store_relaxed(l + 1 + count, slot);
      store_relaxed(l, count + 1);
      continue;
    }
    // Full list: re-select among the old links and the new node with the same heuristic.
    const float* vn = storage.vector(n);
    const float an = storage.rank_factor(n);
    old_links.assign(l + 1, l + 1 + count);
    pruned.clear();
    pruned.push_back({c.first, slot});
    for (const std::uint32_t o : old_links) prefetch_row(storage.vector(o), row_bytes);
    std::uint32_t i = 0;
    for (; i + 4 <= count; i += 4) {
      const std::uint32_t* b = old_links.data() + i;
      const float* rows[4] = {storage.vector(b[0]), storage.vector(b[1]), storage.vector(b[2]),
                              storage.vector(b[3])};
      float l2[4];
      l2sq_batch4(vn, rows, dim, l2);
      for (int k = 0; k < 4; ++k) pruned.push_back({l2[k] * an * storage.rank_factor(b[k]), b[k]});
    }
    for (; i < count; ++i) {
      const std::uint32_t o = old_links[i];
      pruned.push_back({l2sq(vn, storage.vector(o), dim) * an * storage.rank_factor(o), o});
    }
    // Links the repair placed here stay (up to the list's capacity): dropping one would orphan
    // its target again, and the next repair would have to search for it. A list in place has
    // no slots beyond 2M, so the heuristic leaves room for them there.
    const std::size_t limit = level == 0 ? level0_capacity(n) : cap;
    std::size_t n_repair = 0;
    if (level == 0)
      for (const std::uint32_t o : old_links) n_repair += repair_source_.get(o) == n;
    const std::size_t n_select = std::min(cap, limit - std::min(limit, n_repair));
    select_neighbors(storage, pruned, n_select, n_select);
    if (level == 0) {
      for (const std::uint32_t o : old_links) {
        if (pruned.size() >= limit) break;
        if (repair_source_.get(o) != n) continue;
        bool kept = false;
        for (const Candidate& c2 : pruned) kept = kept || c2.second == o;
        if (!kept) pruned.push_back({0.0f, o});
      }
    }
    for (std::size_t j = 0; j < pruned.size(); ++j) store_relaxed(l + 1 + j, pruned[j].second);
    store_relaxed(l, static_cast<std::uint32_t>(pruned.size()));
  }
  return selected.empty() ? kNone : selected.front().second;
}

void HnswGraph::insert(const VectorStorage& storage, std::uint32_t slot, SearchScratch& scratch) {
  const int level = levels_[slot];
  const float* x = storage.vector(slot);
  const float ax = storage.rank_factor(slot);
  const auto l2sq = metric::kernels().l2sq;
  const std::size_t dim = storage.dim();

  // A node that raises the top level keeps the entry lock for its whole insertion, so no other
  // thread starts from an entry point whose upper links are still being written.
  std::unique_lock<std::mutex> entry_lock(entry_mutex_);
  const int top = max_level_;
  std::uint32_t cur = entry_;
  if (cur == kNone) {
    entry_ = slot;
    max_level_ = level;
    return;
  }
  if (level <= top) entry_lock.unlock();

  float cur_d = l2sq(x, storage.vector(cur), dim) * ax * storage.rank_factor(cur);
  for (int lv = top; lv > level; --lv) {
    for (bool changed = true; changed;) {
      changed = false;
      copy_links_relaxed(links_at(cur, lv), max_links(lv), scratch.links);
      for (const std::uint32_t n : scratch.links) {
        const float d = l2sq(x, storage.vector(n), dim) * ax * storage.rank_factor(n);
        if (d < cur_d) {
          cur_d = d;
          cur = n;
          changed = true;
        }
      }
    }
  }
  for (int lv = std::min(level, top); lv >= 0; --lv) {
    const auto ef = static_cast<std::size_t>(params_.ef_construction);
    search_layer_concurrent(storage, x, ax, cur, lv, ef, scratch);
    // Nodes at x's own depth hidden behind shallower hubs are found by a second beam in
    // Euclidean order; they must be among x's candidates, or x never links to (nor gets links
    // from) the crowd around it.
    if (lv == 0 && hub_dominated(storage, scratch.results, ax))
      add_level0_l2_candidates(storage, x, ax, ef, scratch);
    const std::uint32_t next = connect(storage, slot, lv, scratch);
    if (next != kNone) cur = next;
  }
  if (level > top) {
    entry_ = slot;
    max_level_ = level;
  }
}

std::uint32_t HnswGraph::descend(const VectorStorage& storage, const float* q,
                                 float* rank_out) const {
  const metric::Kernels& kernels = metric::kernels();
  const std::size_t dim = storage.dim();
  const std::size_t row_bytes = dim * sizeof(float);
  std::uint32_t cur = entry_;
  float cur_d = kernels.l2sq(q, storage.vector(cur), dim) * storage.rank_factor(cur);
  for (int lv = max_level_; lv > 0; --lv) {
    for (bool changed = true; changed;) {
      changed = false;
      const std::uint32_t* l = links_at(cur, lv);
      const std::uint32_t count = l[0];
      // Fetch every neighbour's row before the first distance: the rows are cold, and one
      // miss at a time would serialise them.
      for (std::uint32_t i = 1; i <= count; ++i) prefetch_row(storage.vector(l[i]), row_bytes);
      auto consider = [&](std::uint32_t n, float l2) {
        const float d = l2 * storage.rank_factor(n);
        if (d < cur_d) {
          cur_d = d;
          cur = n;
          changed = true;
        }
      };
      std::uint32_t i = 1;
      for (; i + 4 <= count + 1; i += 4) {
        const float* rows[4] = {storage.vector(l[i]), storage.vector(l[i + 1]),
                                storage.vector(l[i + 2]), storage.vector(l[i + 3])};
        float l2[4];
        kernels.l2sq_batch4(q, rows, dim, l2);
        for (int j = 0; j < 4; ++j) consider(l[i + j], l2[j]);
      }
      for (; i <= count; ++i) consider(l[i], kernels.l2sq(q, storage.vector(l[i]), dim));
    }
  }
  *rank_out = cur_d;
  return cur;
}

// The loop of a level-0 search beam from the frontier and results already in scratch, ordered
// by order(n, l2): deleted nodes are walked through but never enter the results, and the beam
// keeps going while it holds fewer than ef live results.
template <typename Order>
void HnswGraph::beam_level0(const VectorStorage& storage, const float* q, std::size_t ef,
                            SearchScratch& scratch, const Order& order) const {
  auto& frontier = scratch.frontier;
  auto& results = scratch.results;
  const std::uint8_t* deleted = storage.deleted_flags();
  float bound = results.empty() ? std::numeric_limits<float>::infinity() : results.front().first;
  while (!frontier.empty()) {
    const Candidate c = frontier.front();
    if (-c.first > bound && results.size() >= ef) break;
    heap_pop(frontier);
    const std::uint32_t* l = level0_list(c.second);
    auto consider = [&](std::uint32_t n, float l2) {
      const float d = order(n, l2);
      if (results.size() < ef || d < bound) {
        heap_push(frontier, {-d, n});
        // n was pushed, so it is likely to be expanded soon: fetch its link list now (the
        // list lives apart from the vectors, so this is a cache miss of its own).
        prefetch(level0_list(n));
        prefetch(level0_list(n) + 16);
        if (!deleted[n]) {
          heap_push(results, {d, n});
          if (results.size() > ef) heap_pop(results);
        }
        if (!results.empty()) bound = results.front().first;
      }
    };
    expand(
        l + 1, level0_count(c.second, l), q, storage, scratch, scratch.fresh, [](std::uint32_t) {},
        consider);
  }
}

void HnswGraph::search(const VectorStorage& storage, const float* q, std::size_t ef,
                       SearchScratch& scratch, std::vector<Candidate>& out) const {
  out.clear();
  if (entry_ == kNone) return;
  // The query's own factor a(q) is common to every candidate, so ranking uses |q - x|^2 a(x).
  float cur_d;
  const std::uint32_t cur = descend(storage, q, &cur_d);
  scratch.begin(storage.slots());
  const std::uint8_t* deleted = storage.deleted_flags();
  scratch.mark(cur);
  heap_push(scratch.frontier, {-cur_d, cur});
  if (!deleted[cur]) heap_push(scratch.results, {cur_d, cur});
  // The live node nearest in Euclidean terms that the beam scores: where a second, Euclidean
  // walk starts (below). Started there rather than at the nearest node by rank (a hub), it has
  // less far to go: 9-25 % more queries a second on boundary trees, about the same on GloVe
  // and the hierarchy, at the same recall (benchmarks/BENCHMARKS.md, Step 9, third sitting).
  std::uint32_t l2_nearest = cur;
  float l2_nearest_d = std::numeric_limits<float>::infinity();
  beam_level0(storage, q, ef, scratch, [&](std::uint32_t n, float l2) {
    if (l2 < l2_nearest_d && !deleted[n]) {
      l2_nearest_d = l2;
      l2_nearest = n;
    }
    return l2 * storage.rank_factor(n);
  });
  out.assign(scratch.results.begin(), scratch.results.end());
  const auto a_q = static_cast<float>(
      metric::conformal_factor(metric::sq_norm_exact(q, storage.dim()), storage.curvature()));
  if (hub_dominated(storage, out, a_q)) {
    // The beam ended among hubs: walk again in Euclidean order, for the query's own depth (see
    // kHubRatio). That walk keeps, by rank, the ef best of every node it scores, not only of
    // the nodes its Euclidean bound admits: a shallower node (an ancestor, an uncle) a link
    // from a node it found can be near by rank and far in Euclidean terms. Keeping only the
    // Euclidean beam's nodes missed those (on a hash half of a 110k hierarchy, 242 of 10,000
    // queries missed a top-10 id at ef=10; with this, 15), with no extra distance computed;
    // the fused walk offers every scored node for the same reason. The ef best of both walks
    // by rank are kept, one entry per slot.
    hnsw_detail::start_l2_beam(scratch, storage.slots(), q, storage, l2_nearest,
                               [&](std::uint32_t n) { return !deleted[n]; });
    auto& by_rank = scratch.selection;  // a max-heap by rank, at most ef entries
    by_rank.clear();
    // A node ranked behind the first beam's ef-th cannot reach the result: skip the heap then.
    const float first_worst = out.size() < ef ? std::numeric_limits<float>::infinity()
                                              : std::max_element(out.begin(), out.end())->first;
    auto keep_by_rank = [&](std::uint32_t n, float l2) {
      if (deleted[n]) return;
      const float r = l2 * storage.rank_factor(n);
      if (r > first_worst) return;
      if (by_rank.size() < ef || r < by_rank.front().first) {
        heap_push(by_rank, {r, n});
        if (by_rank.size() > ef) heap_pop(by_rank);
      }
    };
    beam_level0(storage, q, ef, scratch, [&](std::uint32_t n, float l2) {
      keep_by_rank(n, l2);
      return l2;
    });
    hnsw_detail::merge_l2_found(out, by_rank, [](const Candidate& c) { return c.first; });
  }
  // A NaN rank (only from an unverified mapped file's coordinates) sorts last, not at random:
  // std::sort needs a strict weak order.
  for (Candidate& c : out)
    if (std::isnan(c.first)) c.first = std::numeric_limits<float>::infinity();
  std::sort(out.begin(), out.end());
  if (out.size() > ef) out.resize(ef);
}

void HnswGraph::memory(std::vector<std::pair<std::string, std::size_t>>& out) const {
  out.emplace_back("level0_links",
                   (level0_.capacity() + relocated_.capacity()) * sizeof(std::uint32_t));
  out.emplace_back("upper_links", (upper_.capacity() + upper_rank_start_.capacity() +
                                   upper_node_offset_.capacity()) *
                                          sizeof(std::uint32_t) +
                                      upper_mask_.capacity() * sizeof(std::uint64_t));
  out.emplace_back("levels", levels_.capacity());
  out.emplace_back("repair",
                   repair_backups_.capacity() * sizeof(std::uint32_t) + repair_source_.bytes());
  out.emplace_back("node_locks", kLockStripes * sizeof(SpinLock));
}

std::unique_ptr<HnswGraph> HnswGraph::restore(const HnswParams& params,
                                              std::vector<std::int8_t> levels,
                                              MappableArray<std::uint32_t> level0,
                                              std::vector<std::uint32_t> relocated,
                                              std::vector<std::uint32_t> upper, std::uint32_t entry,
                                              int max_level, bool check_heads) {
  auto g = std::make_unique<HnswGraph>(params);
  const std::size_t n = levels.size();
  std::size_t total = 0;
  for (std::size_t s = 0; s < n; ++s) {
    if (levels[s] < 0) throw FormatError("negative level");
    total += static_cast<std::size_t>(levels[s]) * g->upper_stride();
    if (total > UINT32_MAX) throw FormatError("too many upper-level links");
  }
  if (level0.size() != n * g->level0_stride() || upper.size() != total ||
      relocated.size() % g->relocated_stride() != 0)
    throw FormatError("graph arrays disagree in length");
  g->levels_ = std::move(levels);
  for (std::size_t s = 0, at = 0; s < n; ++s) {  // the index of the upper lists
    if (s % 64 == 0) {
      g->upper_rank_start_.push_back(static_cast<std::uint32_t>(g->upper_node_offset_.size()));
      g->upper_mask_.push_back(0);
    }
    if (g->levels_[s] == 0) continue;
    g->upper_mask_[s / 64] |= std::uint64_t{1} << (s % 64);
    g->upper_node_offset_.push_back(static_cast<std::uint32_t>(at));
    at += static_cast<std::size_t>(g->levels_[s]) * g->upper_stride();
  }
  g->level0_ = std::move(level0);
  g->relocated_ = std::move(relocated);
  if (check_heads) g->validate_heads();
  g->upper_ = std::move(upper);
  g->entry_ = entry;
  g->max_level_ = max_level;
  g->repair_source_.resize(n);  // filled by restore_repair_sources()
  return g;
}

std::vector<std::uint32_t> HnswGraph::repair_source_pairs() const {
  std::vector<std::uint32_t> out;
  repair_source_.for_each([&](std::uint32_t slot, std::uint32_t source) {
    out.push_back(slot);
    out.push_back(source);
  });
  // Slot order: the same graph writes the same bytes.
  std::vector<std::size_t> order(out.size() / 2);
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return out[2 * a] < out[2 * b]; });
  std::vector<std::uint32_t> sorted;
  sorted.reserve(out.size());
  for (const std::size_t i : order) {
    sorted.push_back(out[2 * i]);
    sorted.push_back(out[2 * i + 1]);
  }
  return sorted;
}

void HnswGraph::restore_repair_sources(const std::vector<std::uint32_t>& pairs) {
  for (std::size_t i = 0; i + 1 < pairs.size(); i += 2) {
    const std::uint32_t slot = pairs[i], source = pairs[i + 1];
    if (slot >= nodes() || source >= nodes() || slot == source || repair_source_.get(slot) != kNone)
      throw FormatError("invalid repair source " + std::to_string(source) + " of node " +
                        std::to_string(slot));
    repair_source_.set(slot, source);
  }
}

void HnswGraph::validate_heads() const {
  // Every head is a count that fits in place or names a relocated list no other node names,
  // and every relocated list's count fits it: links_at() follows them unchecked.
  const std::size_t n_relocated = relocated_.size() / relocated_stride();
  std::vector<std::uint8_t> named(n_relocated, 0);
  for (std::size_t s = 0; s < nodes(); ++s) {
    const std::uint32_t head = level0_[s * level0_stride()];
    if ((head & kRelocated) == 0) {
      if (head > max_links(0))
        throw FormatError("node " + std::to_string(s) + " has " + std::to_string(head) +
                          " level-0 links, more than " + std::to_string(max_links(0)));
      continue;
    }
    const std::size_t index = head & ~kRelocated;
    if (index >= n_relocated || named[index])
      throw FormatError("node " + std::to_string(s) + " names relocated list " +
                        std::to_string(index) + ", which is missing or taken");
    named[index] = 1;
    if (relocated_[index * relocated_stride()] > max_links(0) + kRepairSlots)
      throw FormatError("relocated list " + std::to_string(index) + " holds too many links");
  }
  for (std::size_t i = 0; i < n_relocated; ++i)
    if (!named[i]) throw FormatError("relocated list " + std::to_string(i) + " belongs to no node");
}

}  // namespace poincare
