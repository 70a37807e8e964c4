// The two indexes the bindings expose: storage + search structure + thread pool + locking.
// Every entry point validates its input before changing anything (a failed call changes nothing).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "file_frame.h"
#include "flat.h"
#include "fused.h"
#include "hnsw.h"
#include "rw_lock.h"
#include "scratch.h"
#include "storage.h"
#include "thread_pool.h"

namespace poincare {

class IndexCore {
 public:
  IndexCore(std::size_t dim, double curvature, int num_threads,
            codes::CodeKind code_kind = codes::CodeKind::kNone);
  virtual ~IndexCore() = default;
  IndexCore(const IndexCore&) = delete;
  IndexCore& operator=(const IndexCore&) = delete;

  std::size_t dim() const { return storage_.dim(); }
  double curvature() const { return storage_.curvature(); }
  // What the graph walks rank by: kNone (the float32 coordinates) or a compressed copy.
  codes::CodeKind code_kind() const { return storage_.code_kind(); }
  // Codes every stored point as `kind` (see VectorStorage::recode); the search structure is
  // unchanged (it is built from the float32 coordinates whatever the kind). Exclusive.
  void set_code_kind(codes::CodeKind kind);
  std::size_t ntotal() const;
  std::size_t slots() const;
  // The id stored in each slot (removed points' slots included), in slot order.
  std::vector<std::int64_t> slot_ids() const;
  // 1 for each slot holding a live point, 0 for a removed one, in slot order.
  std::vector<std::uint8_t> live_slots() const;
  // The id add() would give the next row: max(ntotal, 1 + largest id ever stored).
  std::int64_t next_auto_id() const;
  int num_threads() const;
  void set_num_threads(int n);

  // Throws InvalidArgument naming the first bad row / id; changes nothing.
  void validate_points(const float* x, std::size_t n, const char* what) const;
  void validate_new_ids(const std::int64_t* ids, std::size_t n) const;
  // Pre-allocates room for n more points.
  void reserve(std::size_t n_more);
  // The slots the next add of n points will use, lowest first: deleted slots that have left
  // the search structure are reused before new ones are appended. Releases deleted slots first
  // when enough are pending (release_deleted), so slots stay bounded under add/remove churn.
  // With reuse false, only new slots (ids then stay equal to slots for a caller that relies
  // on it), but deleted slots still leave the search structure.
  std::vector<std::uint32_t> plan_slots(std::size_t n, bool reuse);
  // Validates, then adds n points with the given ids (all or nothing) into `slots` (released
  // slots, then the next new ones, as plan_slots gives them: the caller wrote its columns
  // there; InvalidArgument otherwise), then runs finish_batch() (for HNSW: the connectivity
  // repair). The repair runs after every chunk of a long add, not once at the end: nodes
  // re-linked early are found as neighbours by later insertions (docs/graph_walk.md).
  void add(const float* x, std::size_t n, const std::int64_t* ids, const std::uint32_t* slots);
  // k nearest per query (D float32 ascending, I ids; +inf / -1 padding). ef: beam width and
  // lists: the links walked (HNSW; see WalkLists).
  void search(const float* queries, std::size_t nq, std::size_t k, std::size_t ef, float* D,
              std::int64_t* I, WalkLists lists = WalkLists::kWhole);
  // Top-k by fused score per query (see fused.h). With allowed_slots, an exact scan of those
  // slots; otherwise the index's own strategy (HNSW: fused traversal when the bound exists). The
  // time columns must cover every slot when the decay is not empty or touch is set. Outputs are
  // nq x k, padded with id -1, score and log weight -inf, distance and depth +inf.
  struct ScoredQuery {
    FusedParams params;
    const std::uint32_t* allowed_slots = nullptr;
    std::size_t n_allowed_slots = 0;
    bool touch = false;
  };
  struct ScoredOutput {
    std::int64_t* ids;
    double* scores;
    double* distances;
    double* depths;
    double* log_weights;
    // Per query, the walk's reach (fused_graph_search); 0 where the answer is exact (a scan).
    // Null: not reported.
    std::uint32_t* reach = nullptr;
  };
  void search_scored(const float* queries, std::size_t nq, std::size_t k, std::size_t ef,
                     const ScoredQuery& query, const ScoredOutput& out);

  // Every live point within Poincaré distance < radius of each query, exactly (a flat scan, for
  // either index kind; see flat_range_search). InvalidArgument unless radius is finite and > 0.
  RangeHits exact_range_search(const float* queries, std::size_t nq, double radius);

  // Marks ids deleted; unknown ids are ignored. Returns how many were removed.
  std::size_t remove(const std::int64_t* ids, std::size_t n);
  // Copies the stored vector of `id` to out; KeyNotFound if unknown.
  void reconstruct(std::int64_t id, float* out) const;
  // Copies the stored vectors of `n` ids to out (n x dim), all or none: KeyNotFound names the
  // first unknown id before anything is written.
  void reconstruct_batch(const std::int64_t* ids, std::size_t n, float* out) const;
  bool contains(std::int64_t id) const;
  // Writes the slot of each of `n` ids to out, -1 for an id not in the index (one shared lock).
  void slots_of(const std::int64_t* ids, std::size_t n, std::int64_t* out) const;

  // Bytes held per structure (allocated capacities), under a shared lock.
  std::vector<std::pair<std::string, std::size_t>> memory() const;

  // Writes the vectors file (and the graph file for HNSW) under a shared lock.
  virtual void save(const std::string& vectors_path, const std::string& graph_path) const;

  // Whether the big arrays are still views of the saved files (a fast open), and whether every
  // byte of them has been checked (always true unless a fast open skipped it).
  bool mapped() const;
  bool verified() const;
  // Checks what a fast open left unchecked: every block's checksum, then the contents as a
  // full load does (points in the ball, rank factors, every graph link). FormatError names the
  // first problem. A no-op when verified(). The first write to an unverified index runs it.
  void verify();

 protected:
  virtual void insert_slots(const std::vector<std::uint32_t>& slots) = 0;
  virtual void finish_batch(const std::vector<std::uint32_t>& /*slots*/) {}
  // Takes the deleted slots pending release out of the search structure and releases them;
  // `due` says whether enough are pending to pay for it (the flat index releases at once).
  virtual void release_deleted(bool due) = 0;
  // Lets the search structure allocate for n_slots slots (see reserve()).
  virtual void reserve_structure(std::size_t /*n_slots*/) {}
  // The search structure's share of memory() (none for the flat index).
  virtual void structure_memory(std::vector<std::pair<std::string, std::size_t>>& /*out*/) const {}
  // Release once this share of the slots is deleted and pending: a consolidation walks every
  // list once, so it runs per 5 % of churn, and slots stay within ~5 % of the live points.
  static constexpr std::size_t kReleaseEvery = 20;
  virtual void search_validated(const float* queries, std::size_t nq, std::size_t k, std::size_t ef,
                                float* D, std::int64_t* I, WalkLists lists) = 0;
  // Fused top-k for one query with no slot list (the flat index scans; HNSW traverses).
  // Returns the walk's reach (see fused_graph_search), 0 for an exact scan.
  virtual std::size_t fused_search_one(const FusedScorer& scorer, const FusedParams& params,
                                       const float* q, std::size_t k, std::size_t ef,
                                       std::vector<ScoredHit>& out) = 0;
  template <typename Fn>
  void run_parallel(std::size_t n_tasks, const Fn& fn);
  // The content checks of verify() beyond the storage's (the graph's links); rw_ held.
  virtual void verify_structure() const {}
  // Whether the search structure still reads a mapped file; rw_ held.
  virtual bool structure_mapped() const { return false; }
  // verify() with rw_ held (either way).
  void verify_locked();
  // Takes rw_ exclusively for a write, verifying a fast-opened index first: nothing is written
  // on top of bytes no check has read.
  std::unique_lock<WriterFirstMutex> write_lock();
  // Block checksums of the mapped files of a fast open, until verify() has used them.
  std::vector<format::BlockCheck> pending_checks_;
  std::atomic<bool> verified_{true};

  VectorStorage storage_;
  mutable WriterFirstMutex rw_;  // adds/removes exclusive, searches shared; adds go first
  std::mutex pool_mutex_;        // one parallel_for at a time on the pool
  std::unique_ptr<ThreadPool> pool_;
};

class FlatIndexCore final : public IndexCore {
 public:
  FlatIndexCore(std::size_t dim, double curvature, int num_threads);
  // mapped: a fast open (see verify()). FormatError for a vectors file with codes (the flat
  // index scans the float32 coordinates and keeps none).
  static std::unique_ptr<FlatIndexCore> load(const std::string& vectors_path, int num_threads,
                                             bool mapped = false);

 protected:
  void insert_slots(const std::vector<std::uint32_t>&) override {}
  void release_deleted(bool) override;
  void search_validated(const float* queries, std::size_t nq, std::size_t k, std::size_t ef,
                        float* D, std::int64_t* I, WalkLists lists) override;
  std::size_t fused_search_one(const FusedScorer& scorer, const FusedParams& params,
                               const float* q, std::size_t k, std::size_t ef,
                               std::vector<ScoredHit>& out) override;
};

class HnswIndexCore final : public IndexCore {
 public:
  HnswIndexCore(std::size_t dim, double curvature, const HnswParams& params, int num_threads,
                codes::CodeKind code_kind = codes::CodeKind::kNone);
  static std::unique_ptr<HnswIndexCore> load(const std::string& vectors_path,
                                             const std::string& graph_path, int num_threads,
                                             bool mapped = false);
  const HnswParams& params() const { return graph_->params(); }
  GraphStats check_integrity() const;
  GraphSwitches graph_switches() const;
  // Takes effect for later adds and searches; waits for running ones.
  void set_graph_switches(const GraphSwitches& switches);
  // Ids linked from `id` on `level` (empty above the node's level), on level 0 with `first_part`
  // only those ahead of the list's refill (HnswGraph::refill_start); KeyNotFound if unknown.
  std::vector<std::int64_t> neighbors(std::int64_t id, int level, bool first_part = false) const;
  void save(const std::string& vectors_path, const std::string& graph_path) const override;

 protected:
  void insert_slots(const std::vector<std::uint32_t>& slots) override;
  void finish_batch(const std::vector<std::uint32_t>& slots) override;
  void release_deleted(bool due) override;
  void reserve_structure(std::size_t n_slots) override { graph_->reserve(n_slots); }
  void verify_structure() const override;
  bool structure_mapped() const override { return graph_->level0_links().mapped(); }
  void structure_memory(std::vector<std::pair<std::string, std::size_t>>& out) const override {
    graph_->memory(out);
  }
  void search_validated(const float* queries, std::size_t nq, std::size_t k, std::size_t ef,
                        float* D, std::int64_t* I, WalkLists lists) override;
  std::size_t fused_search_one(const FusedScorer& scorer, const FusedParams& params,
                               const float* q, std::size_t k, std::size_t ef,
                               std::vector<ScoredHit>& out) override;

 private:
  std::unique_ptr<HnswGraph> graph_;
  ScratchPool scratch_;
};

}  // namespace poincare
