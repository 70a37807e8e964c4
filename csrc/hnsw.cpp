#include "hnsw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "errors.h"
#include "metric.h"

namespace poincare {

namespace {

inline void prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

// Link lists are read without their lock while other threads insert: every word of a list is
// written and read with relaxed atomic accesses, so a reader sees, word by word, either an old or
// a new value; each is a valid slot (lists start zeroed) and the count never exceeds the list's
// capacity, so a torn read only makes a construction search see a slightly stale neighbourhood,
// as in hnswlib and FAISS. Writers still serialize on the node's lock.
inline std::uint32_t load_relaxed(const std::uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
inline void store_relaxed(std::uint32_t* p, std::uint32_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
inline void copy_links_relaxed(const std::uint32_t* l, std::size_t capacity,
                               std::vector<std::uint32_t>& out) {
  const std::size_t count = std::min<std::size_t>(load_relaxed(l), capacity);
  out.resize(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = load_relaxed(l + 1 + i);
}

// Prefetches every cache line of a stored vector (rows are not line-aligned and span several
// lines; fetching only the first leaves the rest to demand misses).
inline void prefetch_row(const float* row, std::size_t bytes) {
  const char* p = reinterpret_cast<const char*>(row);
  for (std::size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
  __builtin_prefetch(p + bytes - 1, 0, 3);
}

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

}  // namespace

void HnswParams::validate() const {
  if (M < 2 || M > 256) throw InvalidArgument("M must be in [2, 256], got " + std::to_string(M));
  if (ef_construction < 1)
    throw InvalidArgument("ef_construction must be >= 1, got " + std::to_string(ef_construction));
}

HnswGraph::HnswGraph(const HnswParams& params) : params_(params) {
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
  in_degree_.resize(n, 0);
  upper_offset_.resize(n);
  for (std::size_t s = old; s < n; ++s) {
    const int lv = draw_level(static_cast<std::uint32_t>(s));
    levels_[s] = static_cast<std::int8_t>(lv);
    if (upper_.size() + static_cast<std::size_t>(lv) * upper_stride() > UINT32_MAX)
      throw InvalidArgument("too many upper-level links for one index");
    upper_offset_[s] = static_cast<std::uint32_t>(upper_.size());
    upper_.resize(upper_.size() + static_cast<std::size_t>(lv) * upper_stride(), 0);
  }
  if (n > lock_capacity_) {
    const std::size_t cap = std::max(n, lock_capacity_ * 2);
    node_locks_.reset(new SpinLock[cap]);
    lock_capacity_ = cap;
  }
}

std::uint32_t* HnswGraph::links_at(std::uint32_t slot, int level) {
  if (level == 0) return level0_.data() + slot * level0_stride();
  return upper_.data() + upper_offset_[slot] + static_cast<std::size_t>(level - 1) * upper_stride();
}
const std::uint32_t* HnswGraph::links_at(std::uint32_t slot, int level) const {
  if (level == 0) return level0_.data() + slot * level0_stride();
  return upper_.data() + upper_offset_[slot] + static_cast<std::size_t>(level - 1) * upper_stride();
}

// Beam search on one level during construction: link lists are copied with relaxed loads
// because other threads may be rewriting them (see load_relaxed). Leaves the ef nearest in
// scratch.results.
void HnswGraph::search_layer_concurrent(const VectorStorage& storage, const float* x, float ax,
                                        std::uint32_t entry, int level, std::size_t ef,
                                        SearchScratch& scratch) {
  const auto l2sq = metric::kernels().l2sq;
  const auto l2sq_batch4 = metric::kernels().l2sq_batch4;
  const std::size_t dim = storage.dim();
  const std::size_t row_bytes = dim * sizeof(float);
  const std::size_t capacity = max_links(level) + (level == 0 ? kRepairSlots : 0);
  scratch.begin(storage.slots());
  auto& frontier = scratch.frontier;
  auto& results = scratch.results;
  const float d0 = l2sq(x, storage.vector(entry), dim) * ax * storage.rank_factor(entry);
  scratch.mark(entry);
  heap_push(frontier, {-d0, entry});
  heap_push(results, {d0, entry});
  float bound = d0;
  while (!frontier.empty()) {
    const Candidate c = frontier.front();
    if (-c.first > bound && results.size() >= ef) break;
    heap_pop(frontier);
    copy_links_relaxed(links_at(c.second, level), capacity, scratch.links);
    // Unvisited neighbours first (their rows prefetched), then distances four at a time.
    std::size_t fresh = 0;
    for (const std::uint32_t n : scratch.links) prefetch(scratch.visited.data() + n);
    for (const std::uint32_t n : scratch.links) {
      if (scratch.seen(n)) continue;
      scratch.mark(n);
      prefetch_row(storage.vector(n), row_bytes);
      scratch.links[fresh++] = n;
    }
    auto consider = [&](std::uint32_t n, float l2) {
      const float d = l2 * ax * storage.rank_factor(n);
      if (results.size() < ef || d < bound) {
        heap_push(frontier, {-d, n});
        heap_push(results, {d, n});
        if (results.size() > ef) heap_pop(results);
        bound = results.front().first;
        // Its list is read when it leaves the frontier; start fetching it now.
        prefetch(links_at(n, level));
      }
    };
    std::size_t j = 0;
    for (; j + 4 <= fresh; j += 4) {
      const std::uint32_t* b = scratch.links.data() + j;
      const float* rows[4] = {storage.vector(b[0]), storage.vector(b[1]), storage.vector(b[2]),
                              storage.vector(b[3])};
      float l2[4];
      l2sq_batch4(x, rows, dim, l2);
      for (int k = 0; k < 4; ++k) consider(b[k], l2[k]);
    }
    for (; j < fresh; ++j)
      consider(scratch.links[j], l2sq(x, storage.vector(scratch.links[j]), dim));
  }
}

// The heuristic of the HNSW paper (Alg. 4 without extension): walk candidates from nearest and
// keep one only if it is closer to the base than to every neighbour already kept, which spreads
// links over directions instead of clustering them.
void HnswGraph::select_neighbors(const VectorStorage& storage, std::vector<Candidate>& candidates,
                                 std::size_t max_count, std::size_t fill) const {
  std::sort(candidates.begin(), candidates.end());
  if (candidates.size() <= max_count) return;
  const auto l2sq = metric::kernels().l2sq;
  const auto l2sq_batch4 = metric::kernels().l2sq_batch4;
  const std::size_t dim = storage.dim();
  std::size_t kept = 0;
  thread_local std::vector<Candidate> pruned_scratch;
  pruned_scratch.clear();
  for (std::size_t i = 0; i < candidates.size() && kept < max_count; ++i) {
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
      for (int j = 0; j < 4; ++j)
        good &= !(l2[j] * ae * storage.rank_factor(k[j].second) < e.first);
    }
    for (; good && r < kept; ++r) {
      const std::uint32_t s = candidates[r].second;
      good = !(l2sq(ve, storage.vector(s), dim) * ae * storage.rank_factor(s) < e.first);
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
  for (std::size_t i = 0; i < pruned_scratch.size() && kept < fill; ++i)
    candidates[kept++] = pruned_scratch[i];
  candidates.resize(kept);
}

std::uint32_t HnswGraph::connect(const VectorStorage& storage, std::uint32_t slot, int level,
                                 SearchScratch& scratch) {
  auto& selected = scratch.selection;
  selected.assign(scratch.results.begin(), scratch.results.end());
  select_neighbors(storage, selected, static_cast<std::size_t>(params_.M),
                   static_cast<std::size_t>(params_.M));
  const std::size_t cap = max_links(level);
  {
    std::lock_guard<SpinLock> g(node_locks_[slot]);
    std::uint32_t* l = links_at(slot, level);
    for (std::size_t i = 0; i < selected.size(); ++i) store_relaxed(l + 1 + i, selected[i].second);
    store_relaxed(l, static_cast<std::uint32_t>(selected.size()));
  }
  if (level == 0)
    for (const Candidate& c : selected) add_in_degree(c.second, 1);
  const auto l2sq = metric::kernels().l2sq;
  const auto l2sq_batch4 = metric::kernels().l2sq_batch4;
  const std::size_t dim = storage.dim();
  const std::size_t row_bytes = dim * sizeof(float);
  // On level 0 in-degrees are tracked so fewer nodes are left for the repair's beam searches:
  // the new node gets an in-link even when every neighbour's heuristic drops it, and a link a
  // re-selection drops that was its target's last in-link may move to the new node's list.
  const bool track = level == 0;
  bool slot_linked = false;
  auto& pruned = scratch.pruned;
  auto& old_links = scratch.old_links;
  auto& orphans = scratch.orphans;
  for (const Candidate& c : selected) {
    const std::uint32_t n = c.second;
    bool slot_kept = false;
    orphans.clear();
    {
      std::lock_guard<SpinLock> g(node_locks_[n]);
      std::uint32_t* l = links_at(n, level);
      const std::uint32_t count = l[0];
      if (std::find(l + 1, l + 1 + count, slot) != l + 1 + count) {
        slot_linked = true;
        continue;
      }
      if (count < cap) {
        store_relaxed(l + 1 + count, slot);
        store_relaxed(l, count + 1);
        if (track) add_in_degree(slot, 1);
        slot_linked = true;
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
        for (int k = 0; k < 4; ++k)
          pruned.push_back({l2[k] * an * storage.rank_factor(b[k]), b[k]});
      }
      for (; i < count; ++i) {
        const std::uint32_t o = old_links[i];
        pruned.push_back({l2sq(vn, storage.vector(o), dim) * an * storage.rank_factor(o), o});
      }
      select_neighbors(storage, pruned, cap, cap);
      for (std::size_t i = 0; i < pruned.size(); ++i) store_relaxed(l + 1 + i, pruned[i].second);
      store_relaxed(l, static_cast<std::uint32_t>(pruned.size()));
      if (track) {
        for (const Candidate& k : pruned) slot_kept |= k.second == slot;
        if (slot_kept) {
          add_in_degree(slot, 1);
          slot_linked = true;
        }
        for (const std::uint32_t o : old_links) {
          bool kept = false;
          for (const Candidate& k : pruned) kept |= k.second == o;
          if (kept || add_in_degree(o, -1) != 0) continue;
          // o lost its last in-link. When the new node (kept by n, so reachable through n) is
          // nearer to o than n is, it links to o: a search heading for o that reaches n also
          // looks at it. Otherwise the final repair links o from the nearest reachable node
          // its beam search finds; linking from the new node regardless was 10 % faster to
          // build on boundary-heavy GloVe but left 6 % of the points of
          // test_boundary_points_stay_reachable unfindable.
          const float* vo = storage.vector(o);
          if (slot_kept && l2sq(storage.vector(slot), vo, dim) * storage.rank_factor(slot) <
                               l2sq(vn, vo, dim) * an)
            orphans.push_back(o);
        }
      }
    }
    // Outside n's lock (one list lock at a time); a list with no room leaves o to the repair.
    for (const std::uint32_t o : orphans) append_link(slot, o);
  }
  if (track && !slot_linked && !selected.empty()) link_from(storage, selected.front().second, slot);
  return selected.empty() ? kNone : selected.front().second;
}

void HnswGraph::count_in_degrees() {
  const std::size_t n = nodes();
  const std::size_t capacity = max_links(0) + kRepairSlots;
  in_degree_.assign(n, 0);
  for (std::size_t s = 0; s < n; ++s) {
    const std::uint32_t* l = links_at(static_cast<std::uint32_t>(s), 0);
    const std::size_t count = std::min<std::size_t>(l[0], capacity);
    for (std::size_t i = 1; i <= count; ++i)
      if (l[i] < n) ++in_degree_[l[i]];
  }
}

std::uint32_t HnswGraph::add_in_degree(std::uint32_t slot, int delta) {
  return __atomic_add_fetch(&in_degree_[slot], static_cast<std::uint32_t>(delta), __ATOMIC_RELAXED);
}

bool HnswGraph::append_link(std::uint32_t from, std::uint32_t to) {
  std::lock_guard<SpinLock> g(node_locks_[from]);
  std::uint32_t* l = links_at(from, 0);
  const std::uint32_t count = l[0];
  if (count >= max_links(0) + kRepairSlots) return false;
  if (from == to || std::find(l + 1, l + 1 + count, to) != l + 1 + count) return true;
  store_relaxed(l + 1 + count, to);
  store_relaxed(l, count + 1);
  add_in_degree(to, 1);
  return true;
}

void HnswGraph::link_from(const VectorStorage& storage, std::uint32_t from, std::uint32_t to) {
  const std::size_t cap = max_links(0) + kRepairSlots;
  if (append_link(from, to)) return;
  std::lock_guard<SpinLock> g(node_locks_[from]);
  std::uint32_t* l = links_at(from, 0);
  const std::uint32_t count = l[0];
  if (count < cap) return;  // another thread made room and ran first; the repair links `to`
  // Full even with the reserved slots: replace the link whose target has the most other
  // in-links (ties: the farthest), never a target's last in-link.
  const auto l2sq = metric::kernels().l2sq;
  const std::size_t dim = storage.dim();
  std::uint32_t best = 0, best_in = 1;
  float best_d = -1.0f;
  for (std::uint32_t i = 1; i <= count; ++i) {
    const std::uint32_t in = load_relaxed(&in_degree_[l[i]]);
    if (in < best_in) continue;
    const float d =
        l2sq(storage.vector(from), storage.vector(l[i]), dim) * storage.rank_factor(l[i]);
    if (in > best_in || d > best_d) {
      best = i;
      best_in = in;
      best_d = d;
    }
  }
  if (best == 0 || best_in < 2) return;  // the final repair links `to`
  add_in_degree(l[best], -1);
  store_relaxed(l + best, to);
  add_in_degree(to, 1);
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
    search_layer_concurrent(storage, x, ax, cur, lv,
                            static_cast<std::size_t>(params_.ef_construction), scratch);
    const std::uint32_t next = connect(storage, slot, lv, scratch);
    if (next != kNone) cur = next;
  }
  if (level > top) {
    entry_ = slot;
    max_level_ = level;
  }
}

void HnswGraph::search(const VectorStorage& storage, const float* q, std::size_t ef,
                       SearchScratch& scratch, std::vector<Candidate>& out) const {
  out.clear();
  if (entry_ == kNone) return;
  const auto l2sq = metric::kernels().l2sq;
  const std::size_t dim = storage.dim();
  const std::size_t row_bytes = dim * sizeof(float);
  // The query's own factor a(q) is common to every candidate, so ranking uses |q - x|^2 a(x).
  auto rank = [&](std::uint32_t s) {
    return l2sq(q, storage.vector(s), dim) * storage.rank_factor(s);
  };

  std::uint32_t cur = entry_;
  float cur_d = rank(cur);
  for (int lv = max_level_; lv > 0; --lv) {
    for (bool changed = true; changed;) {
      changed = false;
      const std::uint32_t* l = links_at(cur, lv);
      for (std::uint32_t i = 1; i <= l[0]; ++i) {
        const float d = rank(l[i]);
        if (d < cur_d) {
          cur_d = d;
          cur = l[i];
          changed = true;
        }
      }
    }
  }

  // Level 0: deleted nodes are walked through but never enter the results, and the beam keeps
  // going while it holds fewer than ef live results.
  scratch.begin(storage.slots());
  auto& frontier = scratch.frontier;
  auto& results = scratch.results;
  const std::uint8_t* deleted = storage.deleted_flags();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  scratch.mark(cur);
  heap_push(frontier, {-cur_d, cur});
  if (!deleted[cur]) heap_push(results, {cur_d, cur});
  float bound = results.empty() ? kInf : cur_d;
  const std::size_t stride = level0_stride();
  while (!frontier.empty()) {
    const Candidate c = frontier.front();
    if (-c.first > bound && results.size() >= ef) break;
    heap_pop(frontier);
    const std::uint32_t* l = level0_.data() + c.second * stride;
    const std::uint32_t count = l[0];
    // Visited marks of every neighbour and the first vectors up front, then each vector two
    // ahead of its use: the loop is bound by memory latency, not arithmetic.
    for (std::uint32_t i = 1; i <= count; ++i) prefetch(scratch.visited.data() + l[i]);
    for (std::uint32_t i = 1; i <= count && i <= 2; ++i)
      prefetch_row(storage.vector(l[i]), row_bytes);
    for (std::uint32_t i = 1; i <= count; ++i) {
      const std::uint32_t n = l[i];
      if (i + 2 <= count) prefetch_row(storage.vector(l[i + 2]), row_bytes);
      if (scratch.seen(n)) continue;
      scratch.mark(n);
      const float d = rank(n);
      if (results.size() < ef || d < bound) {
        heap_push(frontier, {-d, n});
        // n was pushed, so it is likely to be expanded soon: fetch its link list now (the
        // list lives apart from the vectors, so this is a cache miss of its own).
        prefetch(level0_.data() + static_cast<std::size_t>(n) * stride);
        prefetch(level0_.data() + static_cast<std::size_t>(n) * stride + 16);
        if (!deleted[n]) {
          heap_push(results, {d, n});
          if (results.size() > ef) heap_pop(results);
        }
        if (!results.empty()) bound = results.front().first;
      }
    }
  }
  out.assign(results.begin(), results.end());
  std::sort(out.begin(), out.end());
}

std::size_t HnswGraph::flood_level0(std::uint32_t start, std::vector<std::uint8_t>& reached,
                                    std::vector<std::uint32_t>& queue) const {
  queue.assign(1, start);
  reached[start] = 1;
  for (std::size_t head = 0; head < queue.size(); ++head) {
    const std::uint32_t* l = links_at(queue[head], 0);
    for (std::uint32_t i = 1; i <= l[0]; ++i)
      if (!reached[l[i]]) {
        reached[l[i]] = 1;
        queue.push_back(l[i]);
      }
  }
  return queue.size();
}

std::size_t HnswGraph::repair_connectivity(const VectorStorage& storage, ScratchPool& scratch,
                                           ThreadPool& pool) {
  // A replaced link can orphan a node that only unreachable nodes pointed at, so repeat until
  // a round adds nothing (in practice one or two rounds).
  std::size_t total = 0;
  for (int round = 0; round < 8; ++round) {
    const std::size_t added = repair_round(storage, scratch, pool);
    total += added;
    if (added == 0) break;
  }
  return total;
}

std::size_t HnswGraph::repair_round(const VectorStorage& storage, ScratchPool& scratch_pool,
                                    ThreadPool& pool) {
  const std::size_t n = nodes();
  if (n < 2 || entry_ == kNone) return 0;
  std::vector<std::uint8_t> reached(n, 0);
  count_in_degrees();
  auto& in_degree = in_degree_;
  std::vector<std::uint32_t> queue;
  auto flood = [&](std::uint32_t start) { flood_level0(start, reached, queue); };
  flood(entry_);
  const auto l2sq = metric::kernels().l2sq;
  const std::size_t dim = storage.dim();
  // Repair links go into the reserved slots past 2M, so nothing construction chose is evicted;
  // the next insertion that shrinks a list treats them like any other link.
  const std::size_t cap = max_links(0) + kRepairSlots;
  // Beam searches run in parallel batches ahead of the sequential linking; a batch's results
  // can be a little stale (computed before the batch's earlier nodes were linked), which only
  // matters for which reachable node gives the in-link.
  const std::size_t batch_size = 32 * static_cast<std::size_t>(pool.size());
  std::vector<std::vector<Candidate>> batch(batch_size);
  std::size_t added = 0;
  // Cheap passes first: link u from a reachable out-neighbour with room, repeating while that
  // makes progress (each fix floods reachability into u's cluster, so later nodes find a
  // reachable neighbour); only the nodes left need a beam search.
  std::vector<std::uint32_t> pending;
  for (std::uint32_t u = 0; u < n; ++u)
    if (!reached[u]) pending.push_back(u);
  bool searching = false;
  int cheap_passes = 0;
  while (!pending.empty()) {
    std::size_t kept_pending = 0;
    bool progress = false;
    std::size_t batch_begin = 0, batch_end = 0;
    for (std::size_t pi = 0; pi < pending.size(); ++pi) {
      const std::uint32_t u = pending[pi];
      if (reached[u]) continue;
      std::uint32_t from = kNone, first_reachable = kNone;
      auto consider = [&](std::uint32_t v) {
        if (v == u || !reached[v] || from != kNone) return;
        if (first_reachable == kNone) first_reachable = v;
        if (links_at(v, 0)[0] < cap) from = v;
      };
      const std::uint32_t* out = links_at(u, 0);
      for (std::uint32_t i = 1; i <= out[0]; ++i) consider(out[i]);
      if (from == kNone && !searching) {
        pending[kept_pending++] = u;
        continue;
      }
      if (from == kNone) {
        if (pi >= batch_end) {  // search for the next batch of pending nodes in parallel
          batch_begin = pi;
          batch_end = std::min(pending.size(), pi + batch_size);
          pool.parallel_for(batch_end - batch_begin, [&](std::size_t j, int) {
            const std::uint32_t v = pending[batch_begin + j];
            batch[j].clear();
            if (reached[v]) return;
            ScratchGuard sg(scratch_pool);
            search(storage, storage.vector(v), static_cast<std::size_t>(params_.ef_construction),
                   *sg, batch[j]);
          });
        }
        for (const Candidate& c : batch[pi - batch_begin]) consider(c.second);
      }
      if (from == kNone) from = first_reachable != kNone ? first_reachable : entry_;
      std::uint32_t* l = links_at(from, 0);
      if (l[0] < cap) {
        l[1 + l[0]] = u;
        ++l[0];
      } else {
        // Replace the link whose target has the most other in-links (ties: the farthest).
        std::uint32_t best = 1;
        float best_d = -1.0f;
        for (std::uint32_t i = 1; i <= l[0]; ++i) {
          if (in_degree[l[i]] < in_degree[l[best]]) continue;
          const float d =
              l2sq(storage.vector(from), storage.vector(l[i]), dim) * storage.rank_factor(l[i]);
          if (in_degree[l[i]] > in_degree[l[best]] || d > best_d) {
            best = i;
            best_d = d;
          }
        }
        const std::uint32_t dropped = l[best];
        --in_degree[dropped];
        l[best] = u;
        // Keep the dropped node reachable through u when it had no other in-link.
        std::uint32_t* lu = links_at(u, 0);
        if (in_degree[dropped] == 0 && lu[0] < cap &&
            std::find(lu + 1, lu + 1 + lu[0], dropped) == lu + 1 + lu[0]) {
          lu[1 + lu[0]] = dropped;
          ++lu[0];
          ++in_degree[dropped];
        }
      }
      ++in_degree[u];
      ++added;
      flood(u);
      progress = true;
    }
    pending.resize(kept_pending);
    // No cheap fix left, or too many passes (each costs O(pending)): search for the rest.
    if (!progress || ++cheap_passes >= 3) searching = true;
  }
  return added;
}

GraphStats HnswGraph::check_integrity() const {
  GraphStats st;
  const std::size_t n = nodes();
  st.nodes = n;
  st.max_level = max_level_;
  if (n == 0) {
    if (entry_ != kNone || max_level_ != -1) throw FormatError("empty graph with an entry point");
    return st;
  }
  if (entry_ >= n) throw FormatError("entry point " + std::to_string(entry_) + " out of range");
  if (levels_[entry_] != max_level_) throw FormatError("entry point is not on the top level");
  std::vector<std::uint64_t> seen_mark(n, UINT64_MAX);
  for (std::size_t s = 0; s < n; ++s) {
    const int lv = levels_[s];
    if (lv < 0 || lv > max_level_)
      throw FormatError("node " + std::to_string(s) + " has level " + std::to_string(lv) +
                        " outside [0, " + std::to_string(max_level_) + "]");
    const std::size_t end = s + 1 < n ? upper_offset_[s + 1] : upper_.size();
    if (end - upper_offset_[s] != static_cast<std::size_t>(lv) * upper_stride())
      throw FormatError("node " + std::to_string(s) + " has a wrong number of upper link lists");
    for (int l = 0; l <= lv; ++l) {
      const std::uint32_t* links = links_at(static_cast<std::uint32_t>(s), l);
      if (links[0] > max_links(l) + (l == 0 ? kRepairSlots : 0))
        throw FormatError("node " + std::to_string(s) + " level " + std::to_string(l) + " has " +
                          std::to_string(links[0]) + " links, more than " +
                          std::to_string(max_links(l)));
      const std::uint64_t tag =
          static_cast<std::uint64_t>(s) * (kMaxLevel + 1) + static_cast<std::uint64_t>(l);
      for (std::uint32_t i = 1; i <= links[0]; ++i) {
        const std::uint32_t t = links[i];
        if (t >= n || t == s || levels_[t] < l)
          throw FormatError("node " + std::to_string(s) + " level " + std::to_string(l) +
                            " has an invalid link to " + std::to_string(t));
        if (seen_mark[t] == tag)
          throw FormatError("node " + std::to_string(s) + " links twice to " + std::to_string(t));
        seen_mark[t] = tag;
      }
      st.links += links[0];
    }
  }
  // Reachability on level 0 from the entry point (breadth-first).
  std::vector<std::uint8_t> reached(n, 0);
  std::vector<std::uint32_t> queue;
  flood_level0(entry_, reached, queue);
  st.unreachable = n - queue.size();
  return st;
}

std::unique_ptr<HnswGraph> HnswGraph::restore(const HnswParams& params,
                                              std::vector<std::int8_t> levels,
                                              std::vector<std::uint32_t> level0,
                                              std::vector<std::uint32_t> upper, std::uint32_t entry,
                                              int max_level) {
  auto g = std::make_unique<HnswGraph>(params);
  const std::size_t n = levels.size();
  std::vector<std::uint32_t> offsets(n);
  std::size_t total = 0;
  for (std::size_t s = 0; s < n; ++s) {
    if (levels[s] < 0) throw FormatError("negative level");
    offsets[s] = static_cast<std::uint32_t>(total);
    total += static_cast<std::size_t>(levels[s]) * g->upper_stride();
    if (total > UINT32_MAX) throw FormatError("too many upper-level links");
  }
  if (level0.size() != n * g->level0_stride() || upper.size() != total)
    throw FormatError("graph arrays disagree in length");
  g->upper_offset_ = std::move(offsets);
  g->levels_ = std::move(levels);
  g->level0_ = std::move(level0);
  g->upper_ = std::move(upper);
  g->entry_ = entry;
  g->max_level_ = max_level;
  g->node_locks_.reset(new SpinLock[std::max<std::size_t>(n, 1)]);
  g->lock_capacity_ = std::max<std::size_t>(n, 1);
  g->count_in_degrees();
  return g;
}

}  // namespace poincare
