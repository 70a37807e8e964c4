#include "hnsw.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "beam.h"
#include "errors.h"
#include "hnsw_links.h"
#include "rank.h"
#include "reserve.h"

namespace poincare {

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
  refill_start_.resize(n, kNoRefill);
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

std::uint32_t HnswGraph::connect(const VectorStorage& storage, std::uint32_t slot, int level,
                                 SearchScratch& scratch) {
  auto& selected = scratch.selection;
  std::uint32_t* backups = level == 0 ? backups_of(slot) : nullptr;
  // At level 0 the nearest candidates the heuristic passes over are kept as cheap in-link
  // sources for the connectivity repair.
  const std::size_t chosen = select_neighbors(
      storage, slot, selected, static_cast<std::size_t>(params_.M), backups, kRepairBackups);
  const std::size_t cap = max_links(level);
  {
    std::lock_guard<SpinLock> g(lock_of(slot));
    std::uint32_t* l = links_at(slot, level);
    for (std::size_t i = 0; i < selected.size(); ++i) store_relaxed(l + 1 + i, selected[i].second);
    store_relaxed(l, static_cast<std::uint32_t>(selected.size()));
    if (level == 0) set_refill_start(slot, chosen);
  }
  const std::size_t row_bytes = storage.dim() * sizeof(float);
  auto& pruned = scratch.pruned;
  auto& old_links = scratch.old_links;
  for (const Candidate& c : selected) {
    const std::uint32_t n = c.second;
    std::lock_guard<SpinLock> g(lock_of(n));
    std::uint32_t* l = links_at(n, level);
    const std::uint32_t count = l[0];
    if (std::find(l + 1, l + 1 + count, slot) != l + 1 + count) continue;
    if (count < cap) {
      if (level == 0) {
        add_before_refill(n, l, slot);
      } else {
        store_relaxed(l + 1 + count, slot);
        store_relaxed(l, count + 1);
      }
      continue;
    }
    // A full level-0 list gives up its farthest refill link before it is re-selected: the
    // refill only fills the list up, and re-selecting it for every link added back is most of
    // what a build spends on neighbour selection (docs/graph_walk.md).
    if (level == 0 && switches_.refill_yields && replace_refill(n, l, slot)) continue;
    // Full list: re-select among the old links and the new node with the same heuristic.
    old_links.assign(l + 1, l + 1 + count);
    for (const std::uint32_t o : old_links) prefetch_row(storage.vector(o), row_bytes);
    std::array<RankKeys<1>, kMaxListLinks> keys;
    PoincareRank<1>(storage, storage.vector(n), storage.rank_factor(n))
        .score(old_links.data(), count, keys.data());
    pruned.clear();
    pruned.push_back({c.first, slot});
    for (std::uint32_t i = 0; i < count; ++i) pruned.push_back({keys[i][0], old_links[i]});
    // Links the repair placed here stay (up to the list's capacity): dropping one would orphan
    // its target again, and the next repair would have to search for it. A list in place has
    // no slots beyond 2M, so the heuristic leaves room for them there.
    const std::size_t limit = level == 0 ? level0_capacity(n) : cap;
    std::size_t n_repair = 0;
    if (level == 0)
      for (const std::uint32_t o : old_links) n_repair += repair_source_.get(o) == n;
    const std::size_t n_select = std::min(cap, limit - std::min(limit, n_repair));
    std::size_t chosen_n = select_neighbors(storage, n, pruned, n_select);
    if (level == 0) {
      // The repair's links go ahead of the refill (its nearest are not worth more).
      for (const std::uint32_t o : old_links) {
        if (pruned.size() >= limit) break;
        if (repair_source_.get(o) != n) continue;
        bool kept = false;
        for (const Candidate& c2 : pruned) kept = kept || c2.second == o;
        if (!kept)
          pruned.insert(pruned.begin() + static_cast<std::ptrdiff_t>(chosen_n++),
                        Candidate{0.0f, o});
      }
    }
    for (std::size_t j = 0; j < pruned.size(); ++j) store_relaxed(l + 1 + j, pruned[j].second);
    store_relaxed(l, static_cast<std::uint32_t>(pruned.size()));
    if (level == 0) set_refill_start(n, chosen_n);
  }
  return selected.empty() ? kNone : selected.front().second;
}

void HnswGraph::add_before_refill(std::uint32_t from, std::uint32_t* l, std::uint32_t to) {
  const std::uint32_t count = l[0];
  const std::size_t start = refill_start(from, l);
  // The refill moves one place on, keeping its order (nearest first).
  for (std::size_t i = count; i > start; --i) store_relaxed(l + 1 + i, l[i]);
  store_relaxed(l + 1 + start, to);
  store_relaxed(l, count + 1);
  set_refill_start(from, start + 1);
}

bool HnswGraph::replace_refill(std::uint32_t from, std::uint32_t* l, std::uint32_t to) {
  const std::uint32_t count = l[0];
  const std::size_t start = refill_start(from, l);
  if (start >= count) return false;
  // The farthest refill link (the last) drops out; the rest of the refill moves one place on.
  for (std::size_t i = count - 1; i > start; --i) store_relaxed(l + 1 + i, l[i]);
  store_relaxed(l + 1 + start, to);
  set_refill_start(from, start + 1);
  return true;
}

void HnswGraph::move_before_refill(std::uint32_t from, std::uint32_t* l, std::size_t position) {
  const std::size_t start = refill_start(from, l);
  if (position <= start) return;
  const std::uint32_t link = l[position];
  for (std::size_t i = position; i > start + 1; --i) l[i] = l[i - 1];
  l[start + 1] = link;
  set_refill_start(from, start + 1);
}

std::uint32_t HnswGraph::descend(const VectorStorage& storage, const float* q,
                                 SearchScratch& scratch, float* rank_out, bool coordinates) const {
  return with_search_rank<1>(
      storage, q,
      [&](const auto& rank) {
        *rank_out = rank.score_one(entry_)[0];
        return greedy_descent([&](int level) { return UpperReader(*this, level); }, rank, entry_,
                              max_level_, 0, scratch, rank_out);
      },
      coordinates);
}

void HnswGraph::insert(const VectorStorage& storage, std::uint32_t slot, SearchScratch& scratch) {
  const int level = levels_[slot];
  const float* x = storage.vector(slot);

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

  // Keys are delta(x, n), scaled by a(x): the heuristic compares them with delta between
  // neighbours.
  const float ax = storage.rank_factor(slot);
  const PoincareRank<1> rank(storage, x, ax);
  float key = rank.score_one(cur)[0];
  cur = greedy_descent([&](int lv) { return ConcurrentReader(*this, lv); }, rank, cur, top, level,
                       scratch, &key);
  const auto ef = static_cast<std::size_t>(params_.ef_construction);
  KeepAll all;
  for (int lv = std::min(level, top); lv >= 0; --lv) {
    const ConcurrentReader reader(*this, lv);
    // At level 0 the candidates come from both orders: x must link to (and be linked from) the
    // points at its own depth around it, which the Poincaré order ranks behind shallower ones.
    if (lv == 0 && switches_.second_order) {
      beam_walk(reader, storage, PoincareRank<2>(storage, x, ax), cur, {ef, second_beam(ef)},
                scratch, all);
      beam_nodes(scratch, 2, scratch.selection);
    } else {
      beam_walk(reader, storage, rank, cur, {ef}, scratch, all);
      beam_nodes(scratch, 1, scratch.selection);
    }
    const std::uint32_t next = connect(storage, slot, lv, scratch);
    if (next != kNone) cur = next;
  }
  if (level > top) {
    entry_ = slot;
    max_level_ = level;
  }
}

void HnswGraph::search(const VectorStorage& storage, const float* q, std::size_t ef,
                       SearchScratch& scratch, std::vector<Candidate>& out, bool coordinates,
                       WalkLists lists) const {
  out.clear();
  if (entry_ == kNone) return;
  // The query's own factor a(q) is common to every candidate, so ranking uses |q - x|^2 a(x).
  float rank;
  const std::uint32_t start = descend(storage, q, scratch, &rank, coordinates);
  const bool whole = lists == WalkLists::kWhole;
  const Level0Reader reader(*this, !whole);
  KeepLive live{storage.deleted_flags()};
  if (switches_.second_order && whole)
    with_search_rank<2>(
        storage, q,
        [&](const auto& rank) {
          beam_walk(reader, storage, rank, start, {ef, second_beam(ef)}, scratch, live);
        },
        coordinates);
  else
    with_search_rank<1>(
        storage, q,
        [&](const auto& rank) { beam_walk(reader, storage, rank, start, {ef}, scratch, live); },
        coordinates);
  // The first beam holds the ef best by rank of every live node either order scored.
  for (const BeamEntry& e : scratch.beams[0]) out.push_back({e.key, e.slot});
  // A NaN rank (only from an unverified mapped file's coordinates) sorts last, not at random:
  // std::sort needs a strict weak order.
  for (Candidate& c : out)
    if (std::isnan(c.first)) c.first = std::numeric_limits<float>::infinity();
  std::sort(out.begin(), out.end());
}

void HnswGraph::memory(std::vector<std::pair<std::string, std::size_t>>& out) const {
  out.emplace_back("level0_links",
                   (level0_.capacity() + relocated_.capacity()) * sizeof(std::uint32_t));
  out.emplace_back("upper_links", (upper_.capacity() + upper_rank_start_.capacity() +
                                   upper_node_offset_.capacity()) *
                                          sizeof(std::uint32_t) +
                                      upper_mask_.capacity() * sizeof(std::uint64_t));
  out.emplace_back("levels", levels_.capacity());
  out.emplace_back("refill_start", refill_start_.capacity() * sizeof(std::uint16_t));
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
  // No list has a refill until restore_refill_starts() (files before version 4 record none).
  g->refill_start_.assign(n, kNoRefill);
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

std::vector<std::uint16_t> HnswGraph::refill_starts() const {
  std::vector<std::uint16_t> out(nodes());
  for (std::size_t s = 0; s < out.size(); ++s) {
    const auto slot = static_cast<std::uint32_t>(s);
    out[s] = static_cast<std::uint16_t>(refill_start(slot, level0_list(slot)));
  }
  return out;
}

void HnswGraph::restore_refill_starts(std::vector<std::uint16_t> starts) {
  if (starts.size() != nodes())
    throw FormatError("refill starts for " + std::to_string(starts.size()) + " nodes, not " +
                      std::to_string(nodes()));
  refill_start_ = std::move(starts);
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
