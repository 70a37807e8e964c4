// HNSW graph (Malkov & Yashunin 2018) over a VectorStorage, in two orders (rank.h): the Poincaré
// rank delta = |u - v|^2 a(u) a(v) and, on level 0, the Euclidean order among points at one depth.
// Walks are the templates of beam.h; neighbour selection is hnsw_selection.cpp, the repair
// hnsw_connectivity.cpp, removal hnsw_deletion.cpp.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hnsw_links.h"
#include "huge_pages.h"
#include "mappable_array.h"
#include "repair_sources.h"
#include "scratch.h"
#include "spin_lock.h"
#include "storage.h"
#include "thread_pool.h"

namespace poincare {

struct HnswParams {
  int M = 16;                 // links per node on upper levels; 2*M on level 0
  int ef_construction = 200;  // beam width while inserting
  std::uint64_t seed = 0;     // level draws are a pure function of (seed, slot)

  void validate() const;  // throws InvalidArgument
};

// The graph's mechanisms, each of which can be turned off to measure what it buys (see
// docs/graph_walk.md). Not saved: a loaded graph runs with the defaults.
struct GraphSwitches {
  // Lists (every level) keep half their links chosen in Euclidean order, and level-0 walks keep
  // a second beam in that order (rank.h): the order among points at one depth, which the
  // Poincaré order hides behind shallower points.
  bool second_order = true;
  // The heuristic lets a kept neighbour stand in for a candidate only at about its depth
  // (kCoverRatio).
  bool cover_rule = true;
  // The repair's steps (repair_after_add, repair_after_removal):
  // every node reachable from the entry point on level 0 (repair_connectivity's rounds, and a
  // small add's new nodes' own in-links in between);
  bool reachability = true;
  // every node linked from a node at its depth or shallower (link_from_above);
  bool ways_down = true;
  // every node linked from where a search for its own coordinates ends (link_unfound).
  bool ways_in = true;
  // A link added back to a full level-0 list takes the place of the list's farthest refill
  // link (see HnswGraph::refill_start) instead of re-selecting the list; a list is re-selected
  // only once no refill is left.
  bool refill_yields = true;
};

// Which links a level-0 search reads: whole lists, with the second order's beam beside the
// first (the default), or only each list's first part (ahead of its refill, see
// HnswGraph::refill_start) with the Poincaré beam alone: the graph as sparse as the heuristic
// leaves it, which a recall table chooses where it finds as much there (poincare_index/recall.py).
enum class WalkLists { kWhole, kFirstPart };

// Counters of a structural check (see HnswGraph::check_integrity).
struct GraphStats {
  std::size_t nodes = 0;
  int max_level = -1;
  std::size_t links = 0;
  std::size_t unreachable = 0;  // nodes not reachable from the entry point on level 0
  // live nodes but the entry point with no level-0 in-link from a node at their depth or
  // shallower (see link_from_above)
  std::size_t without_way_down = 0;
  // level-0 lists the repair moved to make room beyond 2M links (see kRepairSlots)
  std::size_t relocated_lists = 0;
};

class HnswGraph {
 public:
  static constexpr std::uint32_t kNone = UINT32_MAX;
  static constexpr int kMaxLevel = 32;

  explicit HnswGraph(const HnswParams& params);

  const HnswParams& params() const { return params_; }
  std::size_t nodes() const { return levels_.size(); }
  int max_level() const { return max_level_; }
  std::uint32_t entry_point() const { return entry_; }
  int level(std::uint32_t slot) const { return levels_[slot]; }

  // Makes room for slots [nodes(), n) with their levels drawn; no concurrent calls.
  void grow(std::size_t n);
  // Allocates for up to n slots at once (the upper levels exactly: levels are a function of
  // the slot), so a large add grows no array by doubling; no concurrent calls.
  void reserve(std::size_t n);

  // Links `slot` (already grown, vector in storage) into the graph. Safe to call from several
  // threads at once for different slots; not concurrently with search(). Construction reads
  // link lists without locks (see hnsw_links.h).
  void insert(const VectorStorage& storage, std::uint32_t slot, SearchScratch& scratch);

  // The (up to) ef best non-deleted slots for query q by rank quantity |q - x|^2 a(x), ascending,
  // written to `out`. ef >= 1. The keys come from the storage's codes when it keeps them
  // (rank.h: CodeRank), unless `coordinates` (the repair's probes: the graph is built from the
  // float32 coordinates whatever the storage, so every kind gets the same graph).
  // `lists`: which links level 0 is walked by (WalkLists).
  void search(const VectorStorage& storage, const float* q, std::size_t ef, SearchScratch& scratch,
              std::vector<Candidate>& out, bool coordinates = false,
              WalkLists lists = WalkLists::kWhole) const;

  // Greedy descent of the upper levels towards q (by |q - x|^2 a(x), keys as search()'s);
  // returns the level-0 entry node and its rank. The graph must not be empty.
  std::uint32_t descend(const VectorStorage& storage, const float* q, SearchScratch& scratch,
                        float* rank_out, bool coordinates = false) const;

  // The width of a level-0 walk's second beam (GraphSwitches::second_order) beside a first of
  // ef: the second order looks for the few points at the query's depth around it, not for ef
  // of them; at least 4, so a narrow search still holds some.
  static std::size_t second_beam(std::size_t ef) { return std::max<std::size_t>(4, ef / 4); }

  const GraphSwitches& switches() const { return switches_; }
  // Not concurrent with anything else on the graph.
  void set_switches(const GraphSwitches& switches) { switches_ = switches; }

  // ---- the repair: one unit with two entry points (hnsw_repair.cpp); each step a switch ----
  // After inserting `slots`: the full repair_connectivity once the rows added since the last
  // one reach 1/kRepairEvery of the graph (or a new node found no in-link), else only the new
  // nodes' own in-links (link_new_nodes); then link_unfound(slots). Returns the links added.
  // Not concurrent with insert() or search().
  std::size_t repair_after_add(const VectorStorage& storage,
                               const std::vector<std::uint32_t>& slots, ScratchPool& scratch,
                               ThreadPool& pool);
  // After remove_nodes(): repair_connectivity, then link_unfound over every live node (most
  // lost an in-link). Returns the links added. Not concurrent with insert() or search().
  std::size_t repair_after_removal(const VectorStorage& storage, ScratchPool& scratch,
                                   ThreadPool& pool);
  // The full repair walks every level-0 list (O(n M)): after an add it runs once the rows added
  // since the last one reach 1/kRepairEvery of the graph (every bulk chunk does).
  static constexpr std::size_t kRepairEvery = 64;

  // Makes every node reachable from the entry point on level 0: each unreachable node gets an
  // in-link from its nearest reachable node (its own nearest out-neighbour that is reachable,
  // else the nearest a beam search finds), replacing that node's most redundant link when its
  // list is full. Near the boundary of the ball, points far from everything are pruned from
  // every full list and would otherwise never be found. Returns the links added. Not
  // concurrent with insert() or search().
  std::size_t repair_connectivity(const VectorStorage& storage, ScratchPool& scratch,
                                  ThreadPool& pool);

  // Gives every live node u that no node at its depth or shallower (a(s) <= a(u)) links to on
  // level 0, the entry point aside, an in-link from the nearest such node among its neighbours
  // and theirs with a free reserved slot: a way down to it. Hash shards of a tree lose about half
  // of every node's ancestors, and a subtree whose top lost its parent was otherwise entered only
  // from its own deep nodes, which a beam from above never reaches. Returns the links added. Part
  // of repair_connectivity; not concurrent with insert() or search().
  std::size_t link_from_above(const VectorStorage& storage, ThreadPool& pool);
  // The live nodes, the entry point aside, without such a way down, ascending.
  std::vector<std::uint32_t> without_way_down(const VectorStorage& storage) const;

  // Gives each live node of `slots` that a search for its own coordinates (beam kProbeEf) does
  // not return an in-link from the nearest node that search did return with room, kept as a
  // repair link: a way in from where beams towards it end. Reachable is not findable: a hash
  // shard of a tree loses whole chains of ancestors (on two shards, every ancestor of one subtree
  // in 2^depth), and a beam from the root then stops at shallow nodes of the neighbouring
  // subtrees, every path on to the lost one passing nodes farther from it. Nodes are taken
  // shallowest first and probed again just before linking, so one link into the top of a lost
  // subtree serves the rest of it. Returns the links added. Not concurrent with insert() or
  // search().
  std::size_t link_unfound(const VectorStorage& storage, const std::vector<std::uint32_t>& slots,
                           ScratchPool& scratch, ThreadPool& pool);

  // Gives each node of `slots` (just inserted) that no node links to on level 0 an in-link from
  // its nearest out-neighbour with room, kept there as a repair link. O(M^2) per node. Returns
  // false when some node found no neighbour with room (then a full repair is needed). Nodes
  // that the insertions' pruning left without an in-link are not looked for: that needs the
  // full repair's walk. Not concurrent with insert() or search().
  bool link_new_nodes(const VectorStorage& storage, const std::vector<std::uint32_t>& slots);

  // Takes the given deleted nodes out of the graph (see hnsw_deletion.cpp): every node that
  // links to one re-selects its list among its other links and theirs, the leaving nodes lose
  // their links, and the entry point moves when it leaves. Afterwards nothing links to them
  // and their slots may be inserted again. Returns the lists re-selected. Not concurrent with
  // insert() or search().
  std::size_t remove_nodes(const VectorStorage& storage, const std::vector<std::uint32_t>& gone,
                           ThreadPool& pool);

  // Throws FormatError if a link or level is out of range, a list overflows, a node links to
  // itself or twice to one node, a node above the top level is live or linked, or the entry
  // point is wrong; returns counters otherwise (all but unreachable and without_way_down, which
  // a load does not need: count_unreachable). deleted: per node, nonzero when deleted (null:
  // every node live).
  // with_level0 false: the upper levels and the entry point only (a fast open, whose level-0
  // lists are left in the mapped file until verify()).
  GraphStats check_integrity(const std::uint8_t* deleted = nullptr, bool with_level0 = true) const;
  // The live nodes (deleted as above) a level-0 walk from the entry point cannot reach.
  std::size_t count_unreachable(const std::uint8_t* deleted = nullptr) const;

  // Bytes held per structure (capacities), for memory_usage().
  void memory(std::vector<std::pair<std::string, std::size_t>>& out) const;

  // ---- raw access for the file format ----
  // Room for repair links beyond 2M (see repair_connectivity): a level-0 list holds up to 2M
  // links in place; the repair moves a full list that must take one more to a relocated list
  // of 2M + kRepairSlots. Few nodes ever need one (docs/graph_walk.md), so the slots are not
  // reserved in every list.
  static constexpr std::size_t kRepairSlots = 4;
  // The head word of a relocated level-0 list: this bit, and the list's number in relocated_.
  static constexpr std::uint32_t kRelocated = 0x80000000u;
  static constexpr std::uint32_t kNoLinks[1] = {0};
  // The heuristic drops a candidate e that a kept neighbour r is nearer to than the base is,
  // trusting r to lead on to e. A node much nearer the origin (a(r) < a(e) / kCoverRatio) is
  // near everything deeper and its list cannot hold the crowd beneath it, so it never stands in
  // for e: on trees crowded at the boundary such hubs otherwise fill every list and the leaves
  // lose every in-link a beam can reach. Nor does a node much deeper (a(r) > a(e) * kCoverRatio)
  // stand in for a shallower e: the way up from a leaf to its ancestors is then kept
  // (GraphSwitches::cover_rule; docs/graph_walk.md).
  static constexpr float kCoverRatio = 2.0f;
  static constexpr std::size_t kRepairBackups = 8;
  // The beam link_unfound probes with: the k of a top-10 search, the narrowest beam such a
  // search runs (FAISS's default ef is 16, ours 64).
  static constexpr std::size_t kProbeEf = 10;
  // Whether s may give u its way down (see link_from_above): s lies at u's depth or shallower
  // (a deeper source's few links point at its own crowd; docs/graph_walk.md).
  static bool from_above(const VectorStorage& storage, std::uint32_t s, std::uint32_t u) {
    return storage.rank_factor(s) <= storage.rank_factor(u);
  }
  static std::size_t level0_stride_for(int M) { return 1 + 2 * static_cast<std::size_t>(M); }
  static std::size_t relocated_stride_for(int M) { return level0_stride_for(M) + kRepairSlots; }
  std::size_t level0_stride() const { return level0_stride_for(params_.M); }
  std::size_t relocated_stride() const { return relocated_stride_for(params_.M); }
  std::size_t upper_stride() const { return 1 + static_cast<std::size_t>(params_.M); }
  const MappableArray<std::uint32_t>& level0_links() const { return level0_; }
  // [count, links...] of `slot` on level 0, in place or relocated (inline: read once per hop
  // by the searches; the branch is all but never taken).
  const std::uint32_t* level0_list(std::uint32_t slot) const {
    const std::uint32_t* l = level0_.data() + static_cast<std::size_t>(slot) * level0_stride();
    const std::uint32_t head = *l;
    if (__builtin_expect((head & kRelocated) != 0, 0)) {
      const std::size_t index = head & ~kRelocated;
      // Checked by validate_heads() on every load but a fast open's: an unverified file's
      // head naming no list reads as an empty list, not past the array.
      if (__builtin_expect(index * relocated_stride() >= relocated_.size(), 0)) return kNoLinks;
      return relocated_.data() + index * relocated_stride();
    }
    return l;
  }
  // The number of links to read from `slot`'s level-0 list `l`: its count, never past its
  // capacity (an unverified mapped file may hold any count).
  std::size_t level0_count(std::uint32_t slot, const std::uint32_t* l) const {
    return std::min<std::size_t>(l[0], level0_capacity(slot));
  }
  // Starts fetching `slot`'s list on `level` without waiting for any of it: on level 0 the
  // in-place words (reading the head to follow a relocation would stall on the very miss the
  // prefetch is for; a relocated list, rare, is fetched when read).
  void prefetch_list(std::uint32_t slot, int level) const {
    if (level == 0)
      hnsw_detail::prefetch_row(level0_.data() + static_cast<std::size_t>(slot) * level0_stride(),
                                level0_stride() * sizeof(std::uint32_t));
    else
      hnsw_detail::prefetch_row(links_at(slot, level), upper_stride() * sizeof(std::uint32_t));
  }
  // Where the refill of `slot`'s level-0 list `l` begins: a list holds the links the heuristic
  // chose, the links added back and the repair's links first, then its refill (the nearest
  // candidates the heuristic passed over, which fill a re-selected list up to its size),
  // nearest first. A list of a graph loaded from a file that did not record it has no refill.
  std::size_t refill_start(std::uint32_t slot, const std::uint32_t* l) const {
    const std::size_t start = slot < refill_start_.size() ? refill_start_[slot] : kNoRefill;
    return std::min<std::size_t>(start, level0_count(slot, l));
  }
  // Whether `slot`'s level-0 list was relocated (it may hold 2M + kRepairSlots links).
  bool is_relocated(std::uint32_t slot) const {
    return (level0_[static_cast<std::size_t>(slot) * level0_stride()] & kRelocated) != 0;
  }
  // Relocated level-0 lists, one after another (relocated_stride() words each).
  const std::vector<std::uint32_t>& relocated_links() const { return relocated_; }
  // [count, links...] of `slot` on `level` (level <= level(slot)).
  const std::uint32_t* links(std::uint32_t slot, int level) const { return links_at(slot, level); }
  // All upper-level lists, node after node (node s holds level(s) lists of upper_stride()).
  const std::vector<std::uint32_t>& upper_links() const { return upper_; }
  const std::vector<std::int8_t>& levels() const { return levels_; }
  // Rebuilds a graph from saved arrays; call check_integrity() before trusting it.
  // With check_heads, validate_heads() runs first; a fast open (level0 mapped, unread) leaves
  // it to verify().
  static std::unique_ptr<HnswGraph> restore(const HnswParams& params,
                                            std::vector<std::int8_t> levels,
                                            MappableArray<std::uint32_t> level0,
                                            std::vector<std::uint32_t> relocated,
                                            std::vector<std::uint32_t> upper, std::uint32_t entry,
                                            int max_level, bool check_heads);
  // Throws FormatError unless every level-0 head is a count that fits in place or names a
  // relocated list no other node names, and every relocated list's count fits it
  // (links_at() follows them unchecked).
  void validate_heads() const;
  // Where each node's level-0 refill begins (refill_start), for the file format.
  std::vector<std::uint16_t> refill_starts() const;
  // Sets them after restore() (a graph restored without them has no refill); FormatError unless
  // there is one per node. check_integrity() checks each against its list.
  void restore_refill_starts(std::vector<std::uint16_t> starts);
  // The repair's sources as (slot, source) pairs in slot order, for the file format.
  std::vector<std::uint32_t> repair_source_pairs() const;
  // Sets them from such pairs after restore(); FormatError for a slot or source out of range,
  // a node its own source, or a slot given twice.
  void restore_repair_sources(const std::vector<std::uint32_t>& pairs);

 private:
  std::uint32_t* links_at(std::uint32_t slot, int level);
  const std::uint32_t* links_at(std::uint32_t slot, int level) const;
  // The level-0 list of `slot` with room for one more link (count < 2M + kRepairSlots on
  // entry), relocating a full in-place list first: pointers to relocated lists taken before
  // are invalid afterwards. Only the repair calls it (not concurrent with insert() or search()).
  std::uint32_t* level0_with_room(std::uint32_t slot);
  // Whether `slot`'s level-0 list can take one more repair link (fewer than 2M + kRepairSlots;
  // a full list in place is relocated when it takes one).
  bool has_repair_room(std::uint32_t slot) const {
    return level0_list(slot)[0] < max_links(0) + kRepairSlots;
  }
  // Appends the level-0 link from -> to as a repair link (re-selections of from's list keep
  // it), relocating from's list if it is full in place; false, changing nothing, when from
  // already links to `to` or holds 2M + kRepairSlots links.
  bool append_repair_link(std::uint32_t from, std::uint32_t to);
  // Links a level-0 list of `slot` may hold now: 2M in place, 2M + kRepairSlots relocated.
  std::size_t level0_capacity(std::uint32_t slot) const {
    return max_links(0) + (is_relocated(slot) ? kRepairSlots : 0);
  }
  std::size_t max_links(int level) const {
    return level == 0 ? 2 * static_cast<std::size_t>(params_.M)
                      : static_cast<std::size_t>(params_.M);
  }
  int draw_level(std::uint32_t slot) const;
  // Keeps at most max_count of `candidates` ((delta to `base`, slot)) for base's list: up to
  // max_count - n2 by the heuristic in the Poincaré order, then n2 = max_count / 2 (with the
  // second order; else 0) among the rest by the heuristic in Euclidean order, each part refilled
  // with its nearest pruned candidates. When `passed_over` is given, writes there up to
  // n_passed_over of the nearest candidates not kept (the rest stays as it was). See
  // hnsw_selection.cpp.
  // The kept candidates are left in `candidates` as the list is laid out: the heuristic's
  // choices, nearest first, then the refill, nearest first; the return value is the number of
  // the heuristic's choices (where the refill begins).
  std::size_t select_neighbors(const VectorStorage& storage, std::uint32_t base,
                               std::vector<Candidate>& candidates, std::size_t max_count,
                               std::uint32_t* passed_over = nullptr,
                               std::size_t n_passed_over = 0) const;
  // Adds `to` to `from`'s level-0 list `l` (count below its capacity) ahead of the refill.
  // Safe beside construction readers (relaxed stores, see hnsw_links.h); the caller holds
  // from's lock or runs alone.
  void add_before_refill(std::uint32_t from, std::uint32_t* l, std::uint32_t to);
  // Puts `to` in `from`'s full level-0 list `l` in place of its farthest refill link; false,
  // changing nothing, when the list has no refill. Same safety as add_before_refill.
  bool replace_refill(std::uint32_t from, std::uint32_t* l, std::uint32_t to);
  // Moves the link at `position` (1-based) of `from`'s level-0 list `l` ahead of the refill if
  // it lies in it (a link the repair placed there).
  void move_before_refill(std::uint32_t from, std::uint32_t* l, std::size_t position);
  void set_refill_start(std::uint32_t slot, std::size_t start) {
    refill_start_[slot] = static_cast<std::uint16_t>(start);
  }
  // Links `slot` on `level` to the neighbours chosen among scratch.selection (candidates) and
  // adds the links back, re-selecting full lists; returns the nearest neighbour or kNone.
  std::uint32_t connect(const VectorStorage& storage, std::uint32_t slot, int level,
                        SearchScratch& scratch);
  // Walk of level 0 from `start`, marking the nodes it reaches nonzero in `reached`; returns how
  // many it newly reached. `queue` is its working buffer, bounded by max(4096, nodes / 16).
  std::size_t flood_level0(std::uint32_t start, std::vector<std::uint8_t>& reached,
                           std::vector<std::uint32_t>& queue) const;
  // One pass of the repair: links every unreachable node; returns the links added and sets
  // `replaced` to how many of them replaced an existing link (only those can orphan a node).
  std::size_t repair_round(const VectorStorage& storage, ScratchPool& scratch, ThreadPool& pool,
                           std::size_t& replaced);

  HnswParams params_;
  GraphSwitches switches_;
  std::size_t rows_since_repair_ = 0;  // rows added since the last full repair
  double level_mult_;
  std::vector<std::int8_t> levels_;
  MappableArray<std::uint32_t> level0_;   // per slot: [count, 2M links], or a relocated head
  std::vector<std::uint32_t> relocated_;  // [count, 2M + kRepairSlots links] per relocated list
  std::vector<std::uint32_t> upper_;      // node after node: levels x [count, M links]
  // Where node s's lists start in upper_, without 4 bytes a slot: the offsets of the slots with
  // upper levels (1 in M), in slot order, found by rank: per block of 64 slots, which of them
  // have upper levels and how many such slots precede the block (see upper_offset()).
  std::vector<std::uint32_t> upper_node_offset_;
  std::vector<std::uint32_t> upper_rank_start_;
  std::vector<std::uint64_t> upper_mask_;
  // Offset in upper_ of node `slot`'s first list; `slot` must have upper levels.
  std::size_t upper_offset(std::uint32_t slot) const;
  // Records the upper lists of a slot appended in order (grow()).
  void note_upper_lists(std::size_t slot, int level);
  // Per slot, up to kRepairBackups nodes that were near it when it was inserted but not chosen
  // as its neighbours (kNone-padded): where the repair looks for an in-link before searching.
  // A build aid only: not saved (a loaded index searches when it repairs).
  std::vector<std::uint32_t> repair_backups_;
  // The first slot repair_backups_ covers: every full repair drops the backups it has used
  // (32 bytes a point, else kept for the index's life) and later ones cover new slots only.
  std::size_t backups_base_ = 0;
  // Node `slot`'s backups, or null when it has none.
  std::uint32_t* backups_of(std::size_t slot) {
    if (kRepairBackups == 0 || slot < backups_base_ ||
        slot - backups_base_ >= repair_backups_.size() / kRepairBackups)
      return nullptr;
    return repair_backups_.data() + (slot - backups_base_) * kRepairBackups;
  }
  // Per slot, the node holding the in-link the repair gave it (kNone: none). Re-selecting that
  // node's full list keeps the link, so later insertions do not orphan the slot again. Not saved.
  RepairSources repair_source_;
  // Per slot, where its level-0 refill begins (see refill_start()); kNoRefill: none known.
  static constexpr std::uint16_t kNoRefill = 0xFFFF;
  std::vector<std::uint16_t> refill_start_;
  // Writers of a node's lists hold the lock of its stripe, one at a time (never two: no order to
  // keep), so a fixed table does what a lock per node did, without a byte a point.
  static constexpr std::size_t kLockStripes = 1 << 16;
  std::unique_ptr<SpinLock[]> node_locks_;
  SpinLock& lock_of(std::uint32_t slot) { return node_locks_[slot & (kLockStripes - 1)]; }
  std::mutex entry_mutex_;
  std::uint32_t entry_ = kNone;
  int max_level_ = -1;
};

}  // namespace poincare
