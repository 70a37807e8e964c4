// The graph walks: one beam walk and one greedy descent, parameterised by a link reader (which
// lists, read how), a rank computer (rank.h: the orders) and a result handler (what is kept).
// Searches, the fused search and construction are instances of these two templates.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "hnsw.h"
#include "hnsw_links.h"
#include "scratch.h"
#include "storage.h"

namespace poincare {

// Most links one list holds: 2M + kRepairSlots with M <= 256.
constexpr std::size_t kMaxListLinks = 2 * 256 + HnswGraph::kRepairSlots;

// ---- link readers ---------------------------------------------------------------------------

// Level 0 of a graph no thread is changing (searches): whole lists, or with `first_part` only
// each list's links ahead of its refill (WalkLists::kFirstPart).
class Level0Reader {
 public:
  explicit Level0Reader(const HnswGraph& graph, bool first_part = false)
      : graph_(graph), first_part_(first_part) {}
  // The links of `slot` and their number.
  const std::uint32_t* list(std::uint32_t slot, SearchScratch&, std::size_t& count) const {
    const std::uint32_t* l = graph_.level0_list(slot);
    count = first_part_ ? graph_.refill_start(slot, l) : graph_.level0_count(slot, l);
    return l + 1;
  }
  // Starts fetching the list of `slot` (a cache miss of its own, read when it is expanded;
  // HnswGraph::prefetch_list reads nothing of it first).
  void prefetch(std::uint32_t slot) const { graph_.prefetch_list(slot, 0); }

 private:
  const HnswGraph& graph_;
  bool first_part_;
};

// An upper level (>= 1) of a graph no thread is changing.
class UpperReader {
 public:
  UpperReader(const HnswGraph& graph, int level) : graph_(graph), level_(level) {}
  const std::uint32_t* list(std::uint32_t slot, SearchScratch&, std::size_t& count) const {
    const std::uint32_t* l = graph_.links(slot, level_);
    count = std::min<std::size_t>(l[0], static_cast<std::size_t>(graph_.params().M));
    return l + 1;
  }
  void prefetch(std::uint32_t slot) const { graph_.prefetch_list(slot, level_); }

 private:
  const HnswGraph& graph_;
  int level_;
};

// A level of a graph other threads are inserting into: each list is copied word by word with
// relaxed loads (see hnsw_links.h) into the scratch before it is read.
class ConcurrentReader {
 public:
  ConcurrentReader(const HnswGraph& graph, int level)
      : graph_(graph),
        level_(level),
        capacity_(level == 0 ? 2 * static_cast<std::size_t>(graph.params().M) +
                                   HnswGraph::kRepairSlots
                             : static_cast<std::size_t>(graph.params().M)) {}
  const std::uint32_t* list(std::uint32_t slot, SearchScratch& scratch, std::size_t& count) const {
    hnsw_detail::copy_links_relaxed(graph_.links(slot, level_), capacity_, scratch.links);
    count = scratch.links.size();
    return scratch.links.data();
  }
  void prefetch(std::uint32_t slot) const { graph_.prefetch_list(slot, level_); }

 private:
  const HnswGraph& graph_;
  int level_;
  std::size_t capacity_;
};

// ---- result handlers ------------------------------------------------------------------------

// Keeps nothing beyond the walk's beams; every node may enter them (construction).
struct KeepAll {
  bool eligible(std::uint32_t) const { return true; }
  template <typename Keys>
  void offer(std::uint32_t, const Keys&, bool) {}
  void also_prefetch(std::uint32_t) const {}
};

// The beams hold live nodes only; deleted ones are walked through (searches).
struct KeepLive {
  const std::uint8_t* deleted;
  bool eligible(std::uint32_t slot) const { return deleted[slot] == 0; }
  template <typename Keys>
  void offer(std::uint32_t, const Keys&, bool) {}
  void also_prefetch(std::uint32_t) const {}
};

// ---- the walks ------------------------------------------------------------------------------

// Greedy descent of levels from_level .. to_level + 1: on each level, moves to the neighbour with
// the smallest order-0 key while there is one smaller than the current node's. `key` holds the
// start's key on entry and the result's on return; returns the node reached.
// reader_at(level) gives that level's link reader.
template <typename ReaderAt, typename Rank>
std::uint32_t greedy_descent(ReaderAt&& reader_at, const Rank& rank, std::uint32_t start, int from_level, int to_level,
                             SearchScratch& scratch, float* key) {
  std::array<typename Rank::Keys, kMaxListLinks> keys;
  std::uint32_t cur = start;
  float best = *key;
  for (int lv = from_level; lv > to_level; --lv) {
    const auto reader = reader_at(lv);
    for (bool changed = true; changed;) {
      changed = false;
      std::size_t count;
      const std::uint32_t* l = reader.list(cur, scratch, count);
      // Every neighbour's row is fetched before the first key: one miss at a time would
      // serialise them.
      for (std::size_t i = 0; i < count; ++i) rank.prefetch(l[i]);
      rank.score(l, count, keys.data());
      std::uint32_t next = cur;
      for (std::size_t i = 0; i < count; ++i)
        if (keys[i][0] < best) {
          best = keys[i][0];
          next = l[i];
        }
      changed = next != cur;
      cur = next;
    }
  }
  *key = best;
  return cur;
}

// The beam walk of one level from `entry`. Per order o of the rank computer it keeps a beam, the
// ef[o] best eligible nodes by key o (the HNSW budget), and a frontier, the nodes not yet
// expanded that entered it: a scored node enters order o's frontier while that beam holds fewer
// than ef[o] nodes or its key o beats the beam's worst. The orders take turns expanding their
// nearest frontier node; an order whose nearest is past its full beam's worst is done until a
// node scored by another order enters its frontier again; the walk ends when every order is done.
// Every node is scored once (one visited mark for all orders), offered to the handler once and
// expanded at most once, so with one order this is the HNSW search, and with two it costs the
// union of both walks.
// Leaves the beams in scratch.beams[o] (heaps by key, worst on top).
template <typename Reader, typename Rank, typename Handler>
void beam_walk(const Reader& reader, const VectorStorage& storage, const Rank& rank,
               std::uint32_t entry, const std::array<std::size_t, Rank::kOrders>& ef,
               SearchScratch& scratch, Handler& handler) {
  constexpr int N = Rank::kOrders;
  using Keys = typename Rank::Keys;
  const std::size_t n_slots = storage.slots();
  scratch.begin(n_slots);
  auto& frontiers = scratch.frontiers;
  auto& beams = scratch.beams;
  auto admit = [&](std::uint32_t n, const Keys& k) {
    const bool ok = handler.eligible(n);
    handler.offer(n, k, ok);
    bool pushed = false;
    for (int o = 0; o < N; ++o) {
      auto& beam = beams[o];
      if (beam.size() >= ef[o] && !(k[o] < beam.front().key)) continue;
      frontiers[o].push_back({-k[o], n});
      std::push_heap(frontiers[o].begin(), frontiers[o].end());
      pushed = true;
      if (!ok) continue;
      beam.push_back({k[o], n, k[0]});
      std::push_heap(beam.begin(), beam.end());
      if (beam.size() > ef[o]) {
        std::pop_heap(beam.begin(), beam.end());
        beam.pop_back();
      }
    }
    if (pushed) reader.prefetch(n);
  };
  std::array<Keys, kMaxListLinks> keys;
  auto expand = [&](std::uint32_t c) {
    std::size_t count;
    const std::uint32_t* l = reader.list(c, scratch, count);
    for (std::size_t i = 0; i < count; ++i) hnsw_detail::prefetch(scratch.visited.data() + l[i]);
    std::uint32_t* fresh = scratch.fresh;
    std::size_t n_fresh = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint32_t n = l[i];
      // Out of range only in an unverified mapped file (every load but a fast open checks
      // every link): skipped, one compare a link.
      if (n >= n_slots || scratch.seen(n)) continue;
      scratch.mark(n);
      rank.prefetch(n);
      handler.also_prefetch(n);
      fresh[n_fresh++] = n;
    }
    rank.score(fresh, n_fresh, keys.data());
    for (std::size_t j = 0; j < n_fresh; ++j) admit(fresh[j], keys[j]);
  };
  scratch.mark(entry);
  admit(entry, rank.score_one(entry));
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int o = 0; o < N; ++o) {
      auto& frontier = frontiers[o];
      if (frontier.empty()) continue;
      const Candidate c = frontier.front();
      if (beams[o].size() >= ef[o] && -c.first > beams[o].front().key) {
        frontier.clear();  // the beam's worst only improves: none of them can be expanded
        continue;
      }
      std::pop_heap(frontier.begin(), frontier.end());
      frontier.pop_back();
      progressed = true;
      // A node good in both orders sits in both frontiers; its second expansion would score
      // nothing new (one node enters one order's frontier once, so one order needs no check).
      if (N > 1 && !scratch.first_expansion(c.second)) continue;
      expand(c.second);
    }
  }
}

// The nodes of the beams after beam_walk, each once, as (order-0 key, slot), in slot order.
inline void beam_nodes(const SearchScratch& scratch, int n_orders, std::vector<Candidate>& out) {
  out.clear();
  for (int o = 0; o < n_orders; ++o)
    for (const BeamEntry& e : scratch.beams[o]) out.push_back({e.rank, e.slot});
  std::sort(out.begin(), out.end(),
            [](const Candidate& a, const Candidate& b) { return a.second < b.second; });
  out.erase(std::unique(out.begin(), out.end(),
                        [](const Candidate& a, const Candidate& b) { return a.second == b.second; }),
            out.end());
}

}  // namespace poincare
