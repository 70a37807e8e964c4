// Per-search working memory (visited marks, heaps) recycled across searches and threads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace poincare {

// (rank quantity, slot)
using Candidate = std::pair<float, std::uint32_t>;

// A node in a walk's beam: its key in the beam's order, and its order-0 key (its rank).
struct BeamEntry {
  float key;
  std::uint32_t slot;
  float rank;
  bool operator<(const BeamEntry& o) const { return key < o.key; }
};

// Most orders a walk ranks nodes in (see rank.h).
constexpr int kMaxOrders = 2;

// Grows a per-slot mark array to n_slots with 1/16 slack: a run of single-row adds reallocates
// once per n/16 rows, and a built index keeps ~1 byte a slot per scratch, not a doubling's 2.
template <typename T>
void grow_marks(std::vector<T>& marks, std::size_t n_slots) {
  if (marks.size() >= n_slots) return;
  if (marks.capacity() < n_slots) marks.reserve(n_slots + n_slots / 16 + 64);
  marks.resize(marks.capacity(), 0);
}

struct SearchScratch {
  // visited[slot] == epoch marks slot as seen in the current walk, epoch + 1 as seen and
  // expanded; moving the epoch on by two clears all marks in O(1) (a full reset when the 8-bit
  // counter runs out: one memset per 126 walks, for a byte a slot where 16 bits took two).
  std::vector<std::uint8_t> visited;
  std::uint8_t epoch = 0;
  // Per order of a walk (see beam.h): the frontier, a min-heap by key (stored negated in a
  // max-heap), and the beam, a max-heap by key.
  std::vector<Candidate> frontiers[kMaxOrders];
  std::vector<BeamEntry> beams[kMaxOrders];
  std::vector<std::uint32_t> links;  // copy of a link list read under its lock
  std::vector<Candidate> selection;
  std::vector<Candidate> pruned;         // re-selection of a full neighbour list
  std::vector<std::uint32_t> old_links;  // that list before the re-selection
  // Unvisited neighbours of one node: a level-0 list holds at most 2M + 4 links, M <= 256.
  std::uint32_t fresh[2 * 256 + 4];

  void begin(std::size_t n_slots) {
    grow_marks(visited, n_slots);
    if (epoch == 0 || epoch >= 252) {
      std::fill(visited.begin(), visited.end(), 0);
      epoch = 1;
    } else {
      epoch += 2;
    }
    for (int o = 0; o < kMaxOrders; ++o) {
      frontiers[o].clear();
      beams[o].clear();
    }
  }
  bool seen(std::uint32_t slot) const {
    return static_cast<std::uint8_t>(visited[slot] - epoch) < 2;
  }
  // Marks an unseen slot seen.
  void mark(std::uint32_t slot) { visited[slot] = epoch; }
  // True the first time a seen slot is asked about in this walk (and marks it expanded).
  bool first_expansion(std::uint32_t slot) {
    if (visited[slot] != epoch) return false;
    visited[slot] = static_cast<std::uint8_t>(epoch + 1);
    return true;
  }

  // Slots scored in the current fused query, kept apart from the visited marks: one query may
  // walk the graph more than once (each walk starts with begin()) and scan time buckets, and a
  // slot must be offered to the top k at most once whichever part reaches it first.
  std::vector<std::uint8_t> scored;
  std::uint8_t scored_epoch = 0;
  void begin_scoring(std::size_t n_slots) {
    grow_marks(scored, n_slots);
    if (++scored_epoch == 0) {
      std::fill(scored.begin(), scored.end(), 0);
      scored_epoch = 1;
    }
  }
  // True the first time `slot` is asked about in this query (and marks it scored).
  bool first_score(std::uint32_t slot) {
    if (scored[slot] == scored_epoch) return false;
    scored[slot] = scored_epoch;
    return true;
  }
};

// A free list of SearchScratch shared by every thread that searches or inserts in one index.
class ScratchPool {
 public:
  std::unique_ptr<SearchScratch> acquire() {
    std::lock_guard<std::mutex> g(mutex_);
    if (free_.empty()) return std::make_unique<SearchScratch>();
    auto s = std::move(free_.back());
    free_.pop_back();
    return s;
  }
  void release(std::unique_ptr<SearchScratch> s) {
    std::lock_guard<std::mutex> g(mutex_);
    free_.push_back(std::move(s));
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<SearchScratch>> free_;
};

// Borrows a scratch for the lifetime of the guard.
class ScratchGuard {
 public:
  explicit ScratchGuard(ScratchPool& pool) : pool_(pool), scratch_(pool.acquire()) {}
  ~ScratchGuard() { pool_.release(std::move(scratch_)); }
  SearchScratch& operator*() { return *scratch_; }
  SearchScratch* operator->() { return scratch_.get(); }

 private:
  ScratchPool& pool_;
  std::unique_ptr<SearchScratch> scratch_;
};

}  // namespace poincare
