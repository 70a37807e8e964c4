// Deleted nodes leave the HNSW graph: their in-neighbours are re-linked around them (as in
// FreshDiskANN's delete consolidation), then their slots are empty and can be reused.
#include <algorithm>
#include <string>

#include "errors.h"
#include "hnsw.h"
#include "rank.h"

namespace poincare {

std::size_t HnswGraph::remove_nodes(const VectorStorage& storage,
                                    const std::vector<std::uint32_t>& gone_slots,
                                    ThreadPool& pool) {
  const std::size_t n = nodes();
  if (gone_slots.empty() || n == 0) return 0;
  std::vector<std::uint8_t> gone(n, 0);
  for (const std::uint32_t s : gone_slots) {
    if (s >= n || !storage.is_deleted(s))
      throw InvalidArgument("only deleted nodes can leave the graph (slot " + std::to_string(s) +
                            ")");
    gone[s] = 1;
  }
  // Every remaining node that links to a leaving one re-selects its list, with the heuristic,
  // among its other links and the leaving nodes' links: what it reached through them it now
  // reaches directly, so the graph around a deleted node stays as navigable as a fresh build
  // (a waypoint kept forever instead fills lists with links no result can come from, and
  // under churn the untouched points lose their in-links). Each node writes only its own
  // lists and reads only the leaving nodes' lists, which do not change here.
  std::vector<std::size_t> relinked(static_cast<std::size_t>(pool.size()), 0);
  pool.parallel_for(n, [&](std::size_t si, int worker) {
    const auto s = static_cast<std::uint32_t>(si);
    if (gone[s]) return;
    thread_local std::vector<std::uint32_t> ids;
    thread_local std::vector<Candidate> candidates;
    thread_local std::vector<RankKeys<1>> keys;
    for (int lv = 0; lv <= levels_[s]; ++lv) {
      std::uint32_t* l = links_at(s, lv);
      const std::uint32_t count = l[0];
      if (std::none_of(l + 1, l + 1 + count, [&](std::uint32_t t) { return gone[t] != 0; }))
        continue;
      ids.clear();
      for (std::uint32_t i = 1; i <= count; ++i) {
        const std::uint32_t t = l[i];
        if (!gone[t]) {
          ids.push_back(t);
          continue;
        }
        const std::uint32_t* via = links_at(t, lv);
        for (std::uint32_t j = 1; j <= via[0]; ++j)
          if (!gone[via[j]] && via[j] != s) ids.push_back(via[j]);
      }
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      keys.resize(ids.size());
      PoincareRank<1>(storage, storage.vector(s), storage.rank_factor(s))
          .score(ids.data(), ids.size(), keys.data());
      candidates.clear();
      for (std::size_t i = 0; i < ids.size(); ++i) candidates.push_back({keys[i][0], ids[i]});
      const std::size_t chosen = select_neighbors(storage, s, candidates, max_links(lv));
      for (std::size_t i = 0; i < candidates.size(); ++i) l[1 + i] = candidates[i].second;
      l[0] = static_cast<std::uint32_t>(candidates.size());
      if (lv == 0) set_refill_start(s, chosen);
      ++relinked[static_cast<std::size_t>(worker)];
    }
  });
  // The leaving nodes keep no links and nothing the repair keeps refers to them.
  for (const std::uint32_t d : gone_slots) {
    for (int lv = 0; lv <= levels_[d]; ++lv) links_at(d, lv)[0] = 0;
    set_refill_start(d, 0);
  }
  std::vector<std::uint32_t> cleared;
  repair_source_.for_each([&](std::uint32_t s, std::uint32_t source) {
    if (gone[s] || gone[source]) cleared.push_back(s);
  });
  for (const std::uint32_t s : cleared) repair_source_.set(s, kNone);
  for (std::uint32_t& b : repair_backups_)
    if (b != kNone && gone[b]) b = kNone;
  for (const std::uint32_t d : gone_slots)
    if (std::uint32_t* b = backups_of(d)) std::fill_n(b, kRepairBackups, kNone);
  if (entry_ != kNone && gone[entry_]) {
    // The new entry point: a remaining node on the highest level (the lowest slot among them).
    entry_ = kNone;
    max_level_ = -1;
    for (std::size_t s = 0; s < n; ++s)
      if (!gone[s] && !storage.is_deleted(s) && levels_[s] > max_level_) {
        entry_ = static_cast<std::uint32_t>(s);
        max_level_ = levels_[s];
      }
  }
  std::size_t total = 0;
  for (const std::size_t r : relinked) total += r;
  return total;
}

}  // namespace poincare
