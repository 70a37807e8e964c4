// Level-0 connectivity of the HNSW graph: the repair that makes every node reachable from the
// entry point, and the structural integrity check.
#include <algorithm>
#include <limits>
#include <string>

#include "errors.h"
#include "hnsw.h"
#include "hnsw_links.h"
#include "rank.h"

namespace poincare {

std::size_t HnswGraph::flood_level0(std::uint32_t start, std::vector<std::uint8_t>& reached,
                                    std::vector<std::uint32_t>& queue) const {
  // The queue is bounded (a flood from the entry point reaches every node, and a queue of all
  // of them would be 4-8 bytes a node at the build's peak): a node found while it is full is
  // marked kReachedUnexpanded and picked up by a scan of the marks once the queue drains. Each
  // scan refills up to `bound` nodes, so there are at most n / bound + 1 scans.
  constexpr std::uint8_t kReachedUnexpanded = 2;
  const std::size_t n = nodes();
  const std::size_t bound = std::max<std::size_t>(4096, n / 16);
  queue.assign(1, start);
  reached[start] = 1;
  std::size_t newly = 1, head = 0;
  bool spilled = false;
  for (;;) {
    while (head < queue.size()) {
      const std::uint32_t* l = links_at(queue[head++], 0);
      for (std::uint32_t i = 1; i <= l[0]; ++i) {
        const std::uint32_t t = l[i];
        if (reached[t]) continue;
        ++newly;
        // Drop the expanded prefix when it is at least half the queue (so each move is paid for
        // by bound / 2 pushes).
        if (queue.size() >= bound && head >= bound / 2) {
          queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(head));
          head = 0;
        }
        if (queue.size() < bound) {
          reached[t] = 1;
          queue.push_back(t);
        } else {
          reached[t] = kReachedUnexpanded;
          spilled = true;
        }
      }
    }
    if (!spilled) break;
    queue.clear();
    head = 0;
    std::size_t s = 0;
    for (; s < n && queue.size() < bound; ++s)
      if (reached[s] == kReachedUnexpanded) {
        reached[s] = 1;
        queue.push_back(static_cast<std::uint32_t>(s));
      }
    spilled = s < n;  // stopped with the queue full: marks past s may still wait
  }
  return newly;
}

std::vector<std::uint32_t> HnswGraph::without_way_down(const VectorStorage& storage) const {
  const std::size_t n = nodes();
  std::vector<std::uint8_t> covered(n, 0);
  for (std::uint32_t s = 0; s < n; ++s) {
    const std::uint32_t* l = links_at(s, 0);
    for (std::uint32_t i = 1; i <= l[0]; ++i)
      if (from_above(storage, s, l[i])) covered[l[i]] = 1;
  }
  std::vector<std::uint32_t> out;
  for (std::uint32_t u = 0; u < n; ++u)
    if (!covered[u] && u != entry_ && !storage.is_deleted(u) && levels_[u] <= max_level_)
      out.push_back(u);
  return out;
}

bool HnswGraph::append_repair_link(std::uint32_t from, std::uint32_t to) {
  std::uint32_t* l = links_at(from, 0);
  if (!has_repair_room(from) || std::find(l + 1, l + 1 + l[0], to) != l + 1 + l[0]) return false;
  add_before_refill(from, level0_with_room(from), to);
  repair_source_.set(to, from);
  return true;
}

std::size_t HnswGraph::link_from_above(const VectorStorage& storage, ThreadPool& pool) {
  if (nodes() < 2 || entry_ == kNone) return 0;
  const std::vector<std::uint32_t> pending = without_way_down(storage);
  if (pending.empty()) return 0;
  // Candidate sources per pending node, nearest first: its own out-neighbours above it, else
  // their out-neighbours above it. No beam search: a node whose neighbourhood holds no source
  // with room stays pending, and each full repair would search for it again.
  std::vector<std::vector<Candidate>> sources(pending.size());
  pool.parallel_for(pending.size(), [&](std::size_t j, int) {
    const std::uint32_t u = pending[j];
    auto& out = sources[j];
    auto consider = [&](std::uint32_t s) {
      if (s != u && from_above(storage, s, u))
        out.push_back({pair_keys(storage, u, s)[0], s});
    };
    const std::uint32_t* l = links_at(u, 0);
    for (std::uint32_t i = 1; i <= l[0]; ++i) consider(l[i]);
    if (out.empty())
      for (std::uint32_t i = 1; i <= l[0]; ++i) {
        const std::uint32_t* second = links_at(l[i], 0);
        for (std::uint32_t k = 1; k <= second[0]; ++k) consider(second[k]);
      }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  });
  // Appends only, into the reserved slots: no link construction chose is evicted, so nothing
  // loses reachability here.
  std::size_t added = 0;
  for (std::size_t j = 0; j < pending.size(); ++j) {
    const std::uint32_t u = pending[j];
    for (const Candidate& c : sources[j])
      if (append_repair_link(c.second, u)) {
        ++added;
        break;
      }
  }
  return added;
}

std::size_t HnswGraph::link_unfound(const VectorStorage& storage,
                                    const std::vector<std::uint32_t>& slots,
                                    ScratchPool& scratch_pool, ThreadPool& pool) {
  if (nodes() < 2 || entry_ == kNone || slots.empty()) return 0;
  // Per pool thread, the probe's results (the pool numbers its threads from 0).
  std::vector<std::vector<Candidate>> found(static_cast<std::size_t>(pool.size()) + 1);
  auto probe = [&](std::uint32_t u, std::vector<Candidate>& out) {
    ScratchGuard sg(scratch_pool);
    search(storage, storage.vector(u), kProbeEf, *sg, out, /*coordinates=*/true);
    return std::any_of(out.begin(), out.end(), [u](const Candidate& c) { return c.second == u; });
  };
  std::vector<std::uint8_t> lost(slots.size(), 0);
  pool.parallel_for(slots.size(), [&](std::size_t j, int thread) {
    const std::uint32_t u = slots[j];
    if (u == entry_ || storage.is_deleted(u) || levels_[u] > max_level_) return;
    std::vector<Candidate>& out = found[static_cast<std::size_t>(thread)];
    // Lists only fill up from here on: a node whose beam ended on full lists stays as it is
    // (on boundary GloVe a fifth of the points: their beams end on hubs), without a second probe.
    lost[j] = !probe(u, out) && std::any_of(out.begin(), out.end(), [&](const Candidate& c) {
      return has_repair_room(c.second);
    });
  });
  std::vector<std::uint32_t> pending;
  for (std::size_t j = 0; j < slots.size(); ++j)
    if (lost[j]) pending.push_back(slots[j]);
  // Shallowest first: the link into the top of a lost subtree leads the probes of its deeper
  // nodes in, and they need none of their own.
  std::sort(pending.begin(), pending.end(), [&](std::uint32_t a, std::uint32_t b) {
    const float fa = storage.rank_factor(a), fb = storage.rank_factor(b);
    return fa < fb || (fa == fb && a < b);
  });
  std::vector<Candidate>& out = found.back();
  std::size_t added = 0;
  for (const std::uint32_t u : pending) {
    if (probe(u, out)) continue;  // an earlier link let the beam in
    // The nodes the beam ended on, nearest to u first: the next beam towards u or a query near
    // it stops there too, and now sees u.
    for (const Candidate& c : out)
      if (append_repair_link(c.second, u)) {
        ++added;
        break;
      }
  }
  return added;
}

std::size_t HnswGraph::repair_connectivity(const VectorStorage& storage, ScratchPool& scratch,
                                           ThreadPool& pool) {
  // Ways down first: they only append links, so the reachability rounds below still see
  // every link they could replace.
  std::size_t total = switches_.ways_down ? link_from_above(storage, pool) : 0;
  // A replaced link can orphan a node that only unreachable nodes pointed at, so repeat until
  // a round replaces nothing: a round that only appended links left every node reachable (each
  // pending node got an in-link from a reached one), and checking that again costs a full
  // walk of the graph per added chunk.
  for (int round = 0; switches_.reachability && round < 8; ++round) {
    std::size_t replaced = 0;
    const std::size_t added = repair_round(storage, scratch, pool, replaced);
    total += added;
    if (added == 0 || replaced == 0) break;
  }
  // Every node is reachable now; the next repair looks at the nodes inserted after this one
  // mostly, so only their backups are worth keeping.
  std::vector<std::uint32_t>().swap(repair_backups_);
  backups_base_ = nodes();
  return total;
}

std::size_t HnswGraph::repair_round(const VectorStorage& storage, ScratchPool& scratch_pool,
                                    ThreadPool& pool, std::size_t& replaced) {
  replaced = 0;
  const std::size_t n = nodes();
  if (n < 2 || entry_ == kNone) return 0;
  std::vector<std::uint8_t> reached(n, 0);
  // In-link counts, two bytes a node: a count that reaches the top stays there (a hub with
  // 65535 in-links is "many" for the choice of a link to replace, and is never taken for 0).
  constexpr std::uint16_t kManyInLinks = std::numeric_limits<std::uint16_t>::max();
  std::vector<std::uint16_t> in_degree(n, 0);
  auto count_in = [&](std::uint32_t v) { in_degree[v] += in_degree[v] != kManyInLinks; };
  auto uncount_in = [&](std::uint32_t v) { in_degree[v] -= in_degree[v] != kManyInLinks; };
  for (std::size_t s = 0; s < n; ++s) {
    const std::uint32_t* l = links_at(static_cast<std::uint32_t>(s), 0);
    for (std::uint32_t i = 1; i <= l[0]; ++i) count_in(l[i]);
  }
  std::vector<std::uint32_t> queue;
  auto flood = [&](std::uint32_t start) { flood_level0(start, reached, queue); };
  flood(entry_);
  // Repair links go into the reserved slots past 2M, so nothing construction chose is evicted;
  // the next insertion that shrinks a list treats them like any other link.
  const std::size_t cap = max_links(0) + kRepairSlots;
  // Beam searches run in parallel batches ahead of the sequential linking; a batch's results
  // can be a little stale (computed before the batch's earlier nodes were linked), which only
  // matters for which reachable node gives the in-link.
  const std::size_t batch_size = 32 * static_cast<std::size_t>(pool.size());
  std::vector<std::vector<Candidate>> batch(batch_size);
  std::size_t added = 0;
  // Before a beam search: the nearest reachable node with room among the neighbours of u's
  // neighbours (a few hundred distances), which is where a beam search for u mostly ends.
  auto nearest_two_hop_with_room = [&](std::uint32_t u) {
    std::uint32_t best = kNone;
    float best_d = std::numeric_limits<float>::infinity();
    const std::uint32_t* out = links_at(u, 0);
    for (std::uint32_t i = 1; i <= out[0]; ++i) {
      const std::uint32_t* second = links_at(out[i], 0);
      for (std::uint32_t j = 1; j <= second[0]; ++j) {
        const std::uint32_t w = second[j];
        if (w == u || !reached[w] || !has_repair_room(w)) continue;
        const float d = pair_keys(storage, u, w)[0];
        if (d < best_d) {
          best_d = d;
          best = w;
        }
      }
    }
    return best;
  };
  // Cheap passes first: link u from a reachable out-neighbour with room, repeating while that
  // makes progress (each fix floods reachability into u's cluster, so later nodes find a
  // reachable neighbour); only the nodes left need a beam search.
  std::vector<std::uint32_t> pending;
  // Deleted nodes are waypoints at most (or have left the graph): only live ones need an in-link.
  for (std::uint32_t u = 0; u < n; ++u)
    if (!reached[u] && !storage.is_deleted(u)) pending.push_back(u);
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
        if (has_repair_room(v)) from = v;  // a repair link goes in without replacing one
      };
      const std::uint32_t* out = links_at(u, 0);
      for (std::uint32_t i = 1; i <= out[0]; ++i) consider(out[i]);
      if (const std::uint32_t* backups = backups_of(u); from == kNone && backups != nullptr) {
        for (std::size_t i = 0; i < kRepairBackups && backups[i] != kNone; ++i)
          consider(backups[i]);
      }
      if (from == kNone && !searching) {
        pending[kept_pending++] = u;
        continue;
      }
      if (from == kNone) from = nearest_two_hop_with_room(u);
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
                   *sg, batch[j], /*coordinates=*/true);
          });
        }
        for (const Candidate& c : batch[pi - batch_begin]) consider(c.second);
      }
      if (from == kNone) from = first_reachable != kNone ? first_reachable : entry_;
      std::uint32_t* l = links_at(from, 0);
      repair_source_.set(u, from);
      if (l[0] < cap) {
        add_before_refill(from, level0_with_room(from), u);
      } else {
        // Replace the link whose target has the most other in-links (ties: the farthest).
        std::uint32_t best = 1;
        float best_d = -1.0f;
        for (std::uint32_t i = 1; i <= l[0]; ++i) {
          if (in_degree[l[i]] < in_degree[l[best]]) continue;
          const float d = pair_keys(storage, from, l[i])[0];
          if (in_degree[l[i]] > in_degree[l[best]] || d > best_d) {
            best = i;
            best_d = d;
          }
        }
        const std::uint32_t dropped = l[best];
        ++replaced;
        uncount_in(dropped);
        // The link is gone: it no longer protects `dropped` in `from`'s list.
        if (repair_source_.get(dropped) == from) repair_source_.set(dropped, kNone);
        l[best] = u;
        move_before_refill(from, l, best);
        // Keep the dropped node reachable through u when it had no other in-link.
        std::uint32_t* lu = links_at(u, 0);
        if (in_degree[dropped] == 0 && lu[0] < cap &&
            std::find(lu + 1, lu + 1 + lu[0], dropped) == lu + 1 + lu[0]) {
          add_before_refill(u, level0_with_room(u), dropped);
          repair_source_.set(dropped, u);
          count_in(dropped);
        }
      }
      count_in(u);
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

bool HnswGraph::link_new_nodes(const VectorStorage& storage,
                               const std::vector<std::uint32_t>& slots) {
  const std::size_t cap = max_links(0) + kRepairSlots;
  for (const std::uint32_t v : slots) {
    if (v == entry_ || storage.is_deleted(v)) continue;
    // Only v's own insertion linked to v so far (its back-links into its neighbours' lists),
    // so v has an in-link exactly when one of its out-neighbours kept v.
    const std::uint32_t* out = links_at(v, 0);
    bool linked = false;
    std::uint32_t from = kNone;
    float best_d = std::numeric_limits<float>::infinity();
    for (std::uint32_t i = 1; i <= out[0] && !linked; ++i) {
      const std::uint32_t u = out[i];
      const std::uint32_t* lu = links_at(u, 0);
      linked = std::find(lu + 1, lu + 1 + lu[0], v) != lu + 1 + lu[0];
      if (!linked && lu[0] < cap) {
        const float d = pair_keys(storage, v, u)[0];
        if (d < best_d) {
          best_d = d;
          from = u;
        }
      }
    }
    if (linked) continue;
    if (from == kNone) return false;
    add_before_refill(from, level0_with_room(from), v);
    // Kept as a repair link: a later re-selection of `from`'s list does not prune it.
    repair_source_.set(v, from);
  }
  return true;
}

GraphStats HnswGraph::check_integrity(const std::uint8_t* deleted, bool with_level0) const {
  GraphStats st;
  const std::size_t n = nodes();
  st.nodes = n;
  st.max_level = max_level_;
  if (n == 0) {
    if (entry_ != kNone || max_level_ != -1) throw FormatError("empty graph with an entry point");
    return st;
  }
  // No entry point: every node has left the graph (checked below: all above level -1).
  if (entry_ == kNone && max_level_ != -1) throw FormatError("a graph with levels has no entry");
  if (entry_ != kNone && entry_ >= n)
    throw FormatError("entry point " + std::to_string(entry_) + " out of range");
  if (entry_ != kNone && levels_[entry_] != max_level_)
    throw FormatError("entry point is not on the top level");
  std::vector<std::uint64_t> seen_mark(n, UINT64_MAX);
  std::size_t upper_words = 0;
  for (std::size_t s = 0; s < n; ++s) {
    const int lv = levels_[s];
    // A node above the top level is one that left the graph (its slot keeps its drawn level
    // for when it is reused): deleted, without links.
    const bool above = lv > max_level_;
    if (lv < 0 || lv > kMaxLevel || (above && (deleted == nullptr || !deleted[s])))
      throw FormatError("node " + std::to_string(s) + " has level " + std::to_string(lv) +
                        " outside [0, " + std::to_string(max_level_) + "]");
    // Lists are stored node after node: each node's start is the total before it.
    if (lv > 0 && upper_offset(static_cast<std::uint32_t>(s)) != upper_words)
      throw FormatError("node " + std::to_string(s) + " has a wrong number of upper link lists");
    upper_words += static_cast<std::size_t>(lv) * upper_stride();
    if (with_level0) st.relocated_lists += is_relocated(static_cast<std::uint32_t>(s));
    for (int l = with_level0 ? 0 : 1; l <= lv; ++l) {
      const std::uint32_t* links = links_at(static_cast<std::uint32_t>(s), l);
      const std::size_t capacity =
          l == 0 ? level0_capacity(static_cast<std::uint32_t>(s)) : max_links(l);
      if (links[0] > capacity)
        throw FormatError("node " + std::to_string(s) + " level " + std::to_string(l) + " has " +
                          std::to_string(links[0]) + " links, more than " +
                          std::to_string(capacity));
      if (above && links[0] != 0)
        throw FormatError("node " + std::to_string(s) + " is above the top level and has links");
      if (l == 0 && refill_start_[s] != kNoRefill && refill_start_[s] > links[0])
        throw FormatError("node " + std::to_string(s) + " has its refill start past its " +
                          std::to_string(links[0]) + " level-0 links");
      const std::uint64_t tag =
          static_cast<std::uint64_t>(s) * (kMaxLevel + 1) + static_cast<std::uint64_t>(l);
      for (std::uint32_t i = 1; i <= links[0]; ++i) {
        const std::uint32_t t = links[i];
        if (t >= n || t == s || levels_[t] < l || levels_[t] > max_level_)
          throw FormatError("node " + std::to_string(s) + " level " + std::to_string(l) +
                            " has an invalid link to " + std::to_string(t));
        if (seen_mark[t] == tag)
          throw FormatError("node " + std::to_string(s) + " links twice to " + std::to_string(t));
        seen_mark[t] = tag;
      }
      st.links += links[0];
    }
  }
  if (upper_words != upper_.size())
    throw FormatError("the upper link lists disagree with the levels in length");
  return st;
}

std::size_t HnswGraph::count_unreachable(const std::uint8_t* deleted) const {
  const std::size_t n = nodes();
  std::vector<std::uint8_t> reached(n, 0);
  std::vector<std::uint32_t> queue;
  if (entry_ != kNone) flood_level0(entry_, reached, queue);
  std::size_t unreachable = 0;
  for (std::size_t s = 0; s < n; ++s)
    unreachable += !reached[s] && (deleted == nullptr || !deleted[s]);
  return unreachable;
}

}  // namespace poincare
