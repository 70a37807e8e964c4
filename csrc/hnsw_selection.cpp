// Neighbour selection: which candidates a node keeps in its list (HnswGraph::select_neighbors).
#include <algorithm>
#include <array>
#include <vector>

#include "hnsw.h"
#include "rank.h"

namespace poincare {

namespace {

// A candidate: its key in the order being selected in, its slot, and delta to the base.
struct Pick {
  float key;
  std::uint32_t slot;
  float delta;
  bool operator<(const Pick& o) const { return key < o.key; }
};

// Whether kept neighbour r covers candidate e in order O: e is nearer to r than to the base
// (keys_re: the pair's keys; key_e: e's key to the base), so a walk reaching the base finds e
// through r. In the Poincaré order only a node at about e's depth stands in for it (kCoverRatio):
// a hub much nearer the origin is near everything deeper and its list cannot hold the crowd
// beneath it; a node much deeper than e is a poor way up to it.
template <int O>
bool covers(const VectorStorage& storage, std::uint32_t r, float a_e, const RankKeys<2>& keys_re,
            float key_e, bool cover_rule) {
  if (!(keys_re[O] < key_e)) return false;
  if (O != 0 || !cover_rule) return true;
  const float a_r = storage.rank_factor(r);
  return a_r * HnswGraph::kCoverRatio >= a_e && a_e * HnswGraph::kCoverRatio >= a_r;
}

// The heuristic of the HNSW paper (Alg. 4 without extension) in order O: walks `by_key`
// (ascending) and appends a candidate to `kept` unless a node already kept covers it, which
// spreads links over directions instead of clustering them, until `kept` holds max_keep; the
// candidates passed over go to `pruned`, in order.
template <int O>
void keep_uncovered(const VectorStorage& storage, const std::vector<Pick>& by_key,
                    std::size_t max_keep, bool cover_rule, std::vector<std::uint32_t>& kept,
                    std::vector<Pick>& pruned) {
  for (std::size_t i = 0; i < by_key.size() && kept.size() < max_keep; ++i) {
    const Pick& e = by_key[i];
    const float a_e = storage.rank_factor(e.slot);
    bool covered = false;
    std::size_t r = 0;
    std::array<RankKeys<2>, 4> keys;
    for (; !covered && r + 4 <= kept.size(); r += 4) {  // four at a time; the decision is the same
      pair_keys4(storage, e.slot, kept.data() + r, keys.data());
      for (int j = 0; j < 4; ++j)
        covered |= covers<O>(storage, kept[r + j], a_e, keys[j], e.key, cover_rule);
    }
    for (; !covered && r < kept.size(); ++r)
      covered = covers<O>(storage, kept[r], a_e, pair_keys(storage, e.slot, kept[r]), e.key,
                          cover_rule);
    if (covered)
      pruned.push_back(e);
    else
      kept.push_back(e.slot);
  }
}

bool contains(const std::vector<std::uint32_t>& v, std::uint32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::size_t HnswGraph::select_neighbors(const VectorStorage& storage, std::uint32_t base,
                                        std::vector<Candidate>& candidates, std::size_t max_count,
                                        std::uint32_t* passed_over,
                                        std::size_t n_passed_over) const {
  std::sort(candidates.begin(), candidates.end());
  if (candidates.size() <= max_count) return candidates.size();
  thread_local std::vector<Pick> by_key, pruned;
  thread_local std::vector<std::uint32_t> kept, chosen;
  kept.clear();
  pruned.clear();
  const std::size_t n_second = switches_.second_order ? max_count / 2 : 0;
  const std::size_t n_first = max_count - n_second;
  by_key.clear();
  for (const Candidate& c : candidates) by_key.push_back({c.first, c.second, c.first});
  keep_uncovered<0>(storage, by_key, n_first, switches_.cover_rule, kept, pruned);
  chosen.assign(kept.begin(), kept.end());
  // Keep pruned connections (the paper's keepPrunedConnections) up to the part's share: in a
  // tree-like (hyperbolic) metric the heuristic alone leaves many nodes with one or two links.
  for (std::size_t j = 0; j < pruned.size() && kept.size() < n_first; ++j)
    kept.push_back(pruned[j].slot);
  if (n_second > 0) {
    by_key.clear();
    for (const Candidate& c : candidates)
      if (!contains(kept, c.second))
        by_key.push_back({l2_from_delta(storage, base, c.second, c.first), c.second, c.first});
    std::sort(by_key.begin(), by_key.end());
    pruned.clear();
    const std::size_t before = kept.size();
    keep_uncovered<1>(storage, by_key, max_count, switches_.cover_rule, kept, pruned);
    chosen.insert(chosen.end(), kept.begin() + static_cast<std::ptrdiff_t>(before), kept.end());
    for (std::size_t j = 0; j < pruned.size() && kept.size() < max_count; ++j)
      kept.push_back(pruned[j].slot);
  }
  // The nearest candidates not kept, nearest first (candidates are in delta order).
  std::size_t o = 0;
  for (std::size_t j = 0; passed_over != nullptr && j < candidates.size() && o < n_passed_over;
       ++j)
    if (!contains(kept, candidates[j].second)) passed_over[o++] = candidates[j].second;
  // The kept ones with their deltas as the list lays them out: the heuristic's choices, then
  // the refill, each in delta order.
  thread_local std::vector<Candidate> refill;
  refill.clear();
  std::size_t w = 0;
  for (std::size_t j = 0; j < candidates.size(); ++j) {
    if (contains(chosen, candidates[j].second))
      candidates[w++] = candidates[j];
    else if (contains(kept, candidates[j].second))
      refill.push_back(candidates[j]);
  }
  const std::size_t n_chosen = w;
  for (const Candidate& c : refill) candidates[w++] = c;
  candidates.resize(w);
  return n_chosen;
}

}  // namespace poincare
