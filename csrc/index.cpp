#include "index.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "errors.h"
#include "flat.h"
#include "format.h"
#include "metric.h"
#include "topk.h"

namespace poincare {

IndexCore::IndexCore(std::size_t dim, double curvature, int num_threads, codes::CodeKind code_kind)
    : storage_(dim, curvature, code_kind) {
  set_num_threads(num_threads);
}

std::size_t IndexCore::ntotal() const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  return storage_.live();
}
std::size_t IndexCore::slots() const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  return storage_.slots();
}
std::vector<std::pair<std::string, std::size_t>> IndexCore::memory() const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  std::vector<std::pair<std::string, std::size_t>> out;
  storage_.memory(out);
  structure_memory(out);
  return out;
}

std::vector<std::int64_t> IndexCore::slot_ids() const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  std::vector<std::int64_t> ids(storage_.slots());
  storage_.copy_ids(ids.data());
  return ids;
}
std::vector<std::uint8_t> IndexCore::live_slots() const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  std::vector<std::uint8_t> live(storage_.slots());
  for (std::size_t s = 0; s < live.size(); ++s) live[s] = storage_.is_deleted(s) ? 0 : 1;
  return live;
}
std::int64_t IndexCore::next_auto_id() const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  return std::max<std::int64_t>(static_cast<std::int64_t>(storage_.live()),
                                storage_.id_high_water());
}
int IndexCore::num_threads() const { return pool_->size(); }

namespace {

// A pool of n threads, n checked as an index's num_threads is.
std::unique_ptr<ThreadPool> checked_pool(int n) {
  if (n < 1) throw InvalidArgument("num_threads must be >= 1, got " + std::to_string(n));
  return std::make_unique<ThreadPool>(n);
}

}  // namespace

void IndexCore::set_num_threads(int n) {
  auto pool = checked_pool(n);
  std::lock_guard<std::mutex> g(pool_mutex_);
  pool_ = std::move(pool);
}

template <typename Fn>
void IndexCore::run_parallel(std::size_t n_tasks, const Fn& fn) {
  std::lock_guard<std::mutex> g(pool_mutex_);
  pool_->parallel_for(n_tasks, fn);
}

void IndexCore::validate_points(const float* x, std::size_t n, const char* what) const {
  metric::validate_points(x, n, storage_.dim(), storage_.curvature(), what);
}

void IndexCore::validate_new_ids(const std::int64_t* ids, std::size_t n) const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  storage_.check_new_ids(ids, n);
}

void IndexCore::reserve(std::size_t n_more) {
  auto g = write_lock();
  storage_.reserve(storage_.slots() + n_more);
  reserve_structure(storage_.slots() + n_more);
}

std::vector<std::uint32_t> IndexCore::plan_slots(std::size_t n, bool reuse) {
  auto g = write_lock();
  const std::size_t pending = storage_.pending_release();
  if (pending > 0) release_deleted(pending * kReleaseEvery >= storage_.slots());
  return storage_.plan(n, reuse);
}

void IndexCore::add(const float* x, std::size_t n, const std::int64_t* ids,
                    const std::uint32_t* slots) {
  validate_points(x, n, "x");
  auto g = write_lock();
  storage_.check_new_ids(ids, n);
  storage_.place(x, n, ids, slots);  // checks the slots first
  const std::vector<std::uint32_t> placed(slots, slots + n);
  insert_slots(placed);
  finish_batch(placed);
}

void IndexCore::search(const float* queries, std::size_t nq, std::size_t k, std::size_t ef,
                       float* D, std::int64_t* I, WalkLists lists) {
  if (k == 0) throw InvalidArgument("k must be >= 1");
  if (ef == 0) throw InvalidArgument("ef must be >= 1");
  validate_points(queries, nq, "query");
  std::shared_lock<WriterFirstMutex> g(rw_);
  search_validated(queries, nq, k, ef, D, I, lists);
}

RangeHits IndexCore::exact_range_search(const float* queries, std::size_t nq, double radius) {
  if (!std::isfinite(radius) || !(radius > 0))
    throw InvalidArgument("radius must be finite and > 0, got " + std::to_string(radius));
  validate_points(queries, nq, "query");
  std::shared_lock<WriterFirstMutex> g(rw_);
  std::lock_guard<std::mutex> p(pool_mutex_);
  return flat_range_search(storage_, queries, nq, radius, *pool_);
}

void IndexCore::search_scored(const float* queries, std::size_t nq, std::size_t k, std::size_t ef,
                              const ScoredQuery& query, const ScoredOutput& out) {
  if (k == 0) throw InvalidArgument("k must be >= 1");
  if (ef == 0) throw InvalidArgument("ef must be >= 1");
  validate_points(queries, nq, "query");
  std::shared_lock<WriterFirstMutex> g(rw_);
  FusedParams params = query.params;
  const std::size_t n = storage_.slots();
  params.eligible_slots = std::min(params.eligible_slots, n);
  const TimeBuckets& b = params.buckets;
  for (std::size_t i = 0; i < b.n_buckets; ++i)
    if (b.starts[i] < 0 || b.starts[i] > b.starts[i + 1] ||
        static_cast<std::size_t>(b.starts[i + 1]) > params.columns.rows)
      throw InvalidArgument("time buckets out of range");
  for (std::size_t i = 0; b.n_buckets && i < static_cast<std::size_t>(b.starts[b.n_buckets]); ++i)
    if (b.order[i] >= params.columns.rows) throw InvalidArgument("time bucket slot out of range");
  // Rows past the columns' length were added after the caller took its views (a concurrent
  // add): they are never returned, so their column values are never read.
  const bool reads_columns = !params.score.decay.empty() || query.touch;
  if (reads_columns && query.params.eligible_slots > params.columns.rows)
    throw InvalidArgument("a decay policy or touch needs time columns covering every slot");
  // A touch into a column that was never allocated would be lost without a trace.
  if (query.touch && params.columns.access_count == nullptr)
    throw InvalidArgument("touch needs the access_count column allocated");
  // Allowed slots at or past the core's slots belong to an add still in progress (its column
  // rows go in first) or one that was rolled back: they are not points yet, so they are dropped,
  // as the mask's rows past the slots are (eligible_slots).
  const std::uint32_t* allowed_slots = query.allowed_slots;
  std::size_t n_allowed = query.n_allowed_slots;
  std::vector<std::uint32_t> in_range;
  if (std::any_of(allowed_slots, allowed_slots + n_allowed,
                  [n](std::uint32_t s) { return s >= n; })) {
    std::copy_if(allowed_slots, allowed_slots + n_allowed, std::back_inserter(in_range),
                 [n](std::uint32_t s) { return s < n; });
    allowed_slots = in_range.data();
    n_allowed = in_range.size();
  }
  const std::size_t dim = storage_.dim();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  auto one = [&](std::size_t qi) {
    thread_local std::vector<ScoredHit> hits;
    const float* q = queries + qi * dim;
    const FusedScorer scorer(storage_, params, q);
    std::size_t reach = 0;
    if (query.allowed_slots != nullptr)
      fused_scan(scorer, storage_, q, n_allowed, allowed_slots, k, hits);
    else
      reach = fused_search_one(scorer, params, q, k, ef, hits);
    if (out.reach != nullptr)
      out.reach[qi] = static_cast<std::uint32_t>(
          std::min<std::size_t>(reach, std::numeric_limits<std::uint32_t>::max()));
    if (query.touch) touch_hits(params.columns, hits);
    for (std::size_t j = 0; j < k; ++j) {
      const std::size_t o = qi * k + j;
      if (j < hits.size()) {
        const ScoredHit& h = hits[j];
        out.ids[o] = storage_.id(h.slot);
        out.scores[o] = h.score;
        out.distances[o] = h.distance;
        out.depths[o] = h.depth;
        out.log_weights[o] = h.log_weight;
      } else {
        out.ids[o] = -1;
        out.scores[o] = -kInf;
        out.distances[o] = kInf;
        out.depths[o] = kInf;
        out.log_weights[o] = -kInf;
      }
    }
  };
  if (nq == 1) {
    one(0);
    return;
  }
  run_parallel(nq, [&](std::size_t qi, int) { one(qi); });
}

std::size_t IndexCore::remove(const std::int64_t* ids, std::size_t n) {
  auto g = write_lock();
  std::size_t removed = 0;
  for (std::size_t i = 0; i < n; ++i) removed += storage_.remove(ids[i]) ? 1 : 0;
  return removed;
}

void IndexCore::reconstruct(std::int64_t id, float* out) const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  const std::int64_t slot = storage_.find(id);
  if (slot < 0) throw KeyNotFound("id " + std::to_string(id) + " is not in the index");
  const float* v = storage_.vector(static_cast<std::size_t>(slot));
  std::copy(v, v + storage_.dim(), out);
}

void IndexCore::reconstruct_batch(const std::int64_t* ids, std::size_t n, float* out) const {
  std::shared_lock<WriterFirstMutex> g(rw_);  // one lock: the rows of one moment
  thread_local std::vector<std::int64_t> slots;
  slots.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    slots[i] = storage_.find(ids[i]);
    if (slots[i] < 0) throw KeyNotFound("id " + std::to_string(ids[i]) + " is not in the index");
  }
  const std::size_t dim = storage_.dim();
  for (std::size_t i = 0; i < n; ++i) {
    const float* v = storage_.vector(static_cast<std::size_t>(slots[i]));
    std::copy(v, v + dim, out + i * dim);
  }
}

bool IndexCore::contains(std::int64_t id) const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  return storage_.find(id) >= 0;
}

void IndexCore::slots_of(const std::int64_t* ids, std::size_t n, std::int64_t* out) const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  for (std::size_t i = 0; i < n; ++i) out[i] = storage_.find(ids[i]);
}

void IndexCore::save(const std::string& vectors_path, const std::string&) const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  format::write_vectors(vectors_path, storage_);
}

bool IndexCore::mapped() const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  return storage_.mapped() || structure_mapped();
}

bool IndexCore::verified() const { return verified_; }

void IndexCore::verify() {
  if (verified_) return;
  std::shared_lock<WriterFirstMutex> g(rw_);
  verify_locked();
}

void IndexCore::set_code_kind(codes::CodeKind kind) {
  auto g = write_lock();
  storage_.recode(kind);
}

void IndexCore::verify_locked() {
  if (verified_) return;
  // Concurrent verify() calls may both check: harmless, and both see the same bytes.
  for (const format::BlockCheck& c : pending_checks_) c.verify_all();
  // Each error names the file it came from: the vectors file is checked first (the storage),
  // the graph file last (the structure).
  auto in_file = [&](bool graph, const FormatError& e) {
    if (pending_checks_.empty()) return FormatError(e.what());
    const auto& check = graph ? pending_checks_.back() : pending_checks_.front();
    return FormatError(check.file->path() + ": " + e.what());
  };
  try {
    storage_.verify_contents();
  } catch (const FormatError& e) {
    throw in_file(false, e);
  }
  try {
    verify_structure();
  } catch (const FormatError& e) {
    throw in_file(true, e);
  }
  // The checks read every byte of the mapped files; searches need far fewer (with codes, not
  // the coordinates but their finalists' rows), so the pages are let go and come back from the
  // page cache as they are read. Nothing was written yet: writes verify first.
  for (const format::BlockCheck& c : pending_checks_)
    c.file->release(c.file->data(), c.file->size());
  verified_ = true;
}

std::unique_lock<WriterFirstMutex> IndexCore::write_lock() {
  std::unique_lock<WriterFirstMutex> g(rw_);
  verify_locked();
  return g;
}

// ---- flat -------------------------------------------------------------------------------------

FlatIndexCore::FlatIndexCore(std::size_t dim, double curvature, int num_threads)
    : IndexCore(dim, curvature, num_threads) {}

std::unique_ptr<FlatIndexCore> FlatIndexCore::load(const std::string& vectors_path, int num_threads,
                                                   bool mapped) {
  const auto pool = checked_pool(num_threads);  // the read's; the index makes its own after it
  format::LoadedVectors v = format::read_vectors(vectors_path, mapped, pool.get());
  if (v.storage.code_kind() != codes::CodeKind::kNone)
    throw FormatError(vectors_path + ": the vectors file holds " +
                      codes::kind_name(v.storage.code_kind()) +
                      " codes, which only an HNSW index keeps");
  auto idx = std::make_unique<FlatIndexCore>(v.storage.dim(), v.storage.curvature(), num_threads);
  idx->storage_ = std::move(v.storage);
  if (v.check.file) {
    idx->pending_checks_.push_back(std::move(v.check));
    idx->verified_ = false;
  }
  return idx;
}

void FlatIndexCore::release_deleted(bool) { storage_.release(storage_.unreleased_deleted()); }

void FlatIndexCore::search_validated(const float* queries, std::size_t nq, std::size_t k,
                                     std::size_t, float* D, std::int64_t* I, WalkLists) {
  std::lock_guard<std::mutex> g(pool_mutex_);
  flat_search(storage_, queries, nq, k, *pool_, D, I);
}

std::size_t FlatIndexCore::fused_search_one(const FusedScorer& scorer, const FusedParams&,
                                            const float* q, std::size_t k, std::size_t,
                                            std::vector<ScoredHit>& out) {
  fused_scan(scorer, storage_, q, storage_.slots(), nullptr, k, out);
  return 0;
}

// ---- HNSW -------------------------------------------------------------------------------------

HnswIndexCore::HnswIndexCore(std::size_t dim, double curvature, const HnswParams& params,
                             int num_threads, codes::CodeKind code_kind)
    : IndexCore(dim, curvature, num_threads, code_kind),
      graph_(std::make_unique<HnswGraph>(params)) {}

std::unique_ptr<HnswIndexCore> HnswIndexCore::load(const std::string& vectors_path,
                                                   const std::string& graph_path, int num_threads,
                                                   bool mapped) {
  const auto pool = checked_pool(num_threads);  // the read's; the index makes its own after it
  format::LoadedVectors v = format::read_vectors(vectors_path, mapped, pool.get());
  format::LoadedGraph g = format::read_graph(graph_path, v.storage.slots(),
                                             v.storage.deleted_flags(), mapped, pool.get());
  auto idx = std::make_unique<HnswIndexCore>(v.storage.dim(), v.storage.curvature(),
                                             g.graph->params(), num_threads, v.storage.code_kind());
  idx->storage_ = std::move(v.storage);
  idx->graph_ = std::move(g.graph);
  for (format::BlockCheck* c : {&v.check, &g.check})
    if (c->file) idx->pending_checks_.push_back(std::move(*c));
  idx->verified_ = idx->pending_checks_.empty();
  return idx;
}

void HnswIndexCore::verify_structure() const {
  if (graph_->nodes() != storage_.slots())
    throw FormatError("graph and storage disagree on the number of points");
  graph_->validate_heads();
  graph_->check_integrity(storage_.deleted_flags());
}

GraphSwitches HnswIndexCore::graph_switches() const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  return graph_->switches();
}

void HnswIndexCore::set_graph_switches(const GraphSwitches& switches) {
  std::unique_lock<WriterFirstMutex> g(rw_);
  graph_->set_switches(switches);
}

GraphStats HnswIndexCore::check_integrity() const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  if (graph_->nodes() != storage_.slots())
    throw FormatError("graph and storage disagree on the number of points");
  GraphStats st = graph_->check_integrity(storage_.deleted_flags());
  st.unreachable = graph_->count_unreachable(storage_.deleted_flags());
  st.without_way_down = graph_->without_way_down(storage_).size();
  return st;
}

std::vector<std::int64_t> HnswIndexCore::neighbors(std::int64_t id, int level,
                                                   bool first_part) const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  const std::int64_t slot = storage_.find(id);
  if (slot < 0) throw KeyNotFound("id " + std::to_string(id) + " is not in the index");
  std::vector<std::int64_t> out;
  if (level < 0 || level > graph_->level(static_cast<std::uint32_t>(slot))) return out;
  const auto u = static_cast<std::uint32_t>(slot);
  const std::uint32_t* l = graph_->links(u, level);
  // Bounded as a search reads them: an unverified mapped file may hold any count or link.
  const std::size_t count = level != 0   ? l[0]
                            : first_part ? graph_->refill_start(u, l)
                                         : graph_->level0_count(u, l);
  for (std::size_t i = 1; i <= count; ++i)
    if (l[i] < storage_.slots()) out.push_back(storage_.id(l[i]));
  return out;
}

void HnswIndexCore::save(const std::string& vectors_path, const std::string& graph_path) const {
  std::shared_lock<WriterFirstMutex> g(rw_);
  format::write_vectors(vectors_path, storage_);
  format::write_graph(graph_path, *graph_);
}

void HnswIndexCore::insert_slots(const std::vector<std::uint32_t>& slots) {
  graph_->grow(storage_.slots());
  run_parallel(slots.size(), [&](std::size_t i, int) {
    ScratchGuard scratch(scratch_);
    graph_->insert(storage_, slots[i], *scratch);
  });
}

void HnswIndexCore::release_deleted(bool due) {
  if (!due) return;
  const std::vector<std::uint32_t> gone = storage_.unreleased_deleted();
  {
    std::lock_guard<std::mutex> g(pool_mutex_);
    graph_->remove_nodes(storage_, gone, *pool_);
    graph_->repair_after_removal(storage_, scratch_, *pool_);
  }
  storage_.release(gone);
}

void HnswIndexCore::finish_batch(const std::vector<std::uint32_t>& slots) {
  std::lock_guard<std::mutex> g(pool_mutex_);
  graph_->repair_after_add(storage_, slots, scratch_, *pool_);
}

std::size_t HnswIndexCore::fused_search_one(const FusedScorer& scorer, const FusedParams& params,
                                            const float* q, std::size_t k, std::size_t ef,
                                            std::vector<ScoredHit>& out) {
  if (!params.score.has_bound()) {  // no sound stopping rule: exact scan
    fused_scan(scorer, storage_, q, storage_.slots(), nullptr, k, out);
    return 0;
  }
  ScratchGuard scratch(scratch_);
  return fused_graph_search(*graph_, storage_, scorer, q, k, std::max(ef, k), *scratch, out);
}

void HnswIndexCore::search_validated(const float* queries, std::size_t nq, std::size_t k,
                                     std::size_t ef, float* D, std::int64_t* I, WalkLists lists) {
  const std::size_t dim = storage_.dim();
  const double c = storage_.curvature();
  // Finalists: the k best by the float32 rank plus any within its rounding of the k-th, so
  // the exact float64 pass decides near-ties. Keys from codes err by far more than rounding
  // (and by no bound known per pair): then every candidate the walk kept is a finalist, ef
  // exact distances from the float32 rows.
  const double tol = storage_.code_kind() != codes::CodeKind::kNone
                         ? std::numeric_limits<double>::infinity()
                         : 2.0 * ((static_cast<double>(dim) + 8.0) * 0x1.0p-24 + 0x1.0p-21);
  auto one = [&](std::size_t qi) {
    ScratchGuard scratch(scratch_);
    thread_local std::vector<Candidate> found;
    thread_local std::vector<std::uint32_t> finalists;
    const float* q = queries + qi * dim;
    graph_->search(storage_, q, std::max(ef, k), *scratch, found, false, lists);
    finalists.clear();
    const double limit = found.size() > k ? found[k - 1].first * (1.0 + tol) : 0.0;
    // (A negative k-th key, possible with codes, times infinity is -inf: hence the check.)
    for (std::size_t i = 0; i < found.size(); ++i) {
      if (i >= k && !std::isinf(tol) && found[i].first > limit) break;
      finalists.push_back(found[i].second);
    }
    const double a_q = metric::conformal_factor(metric::sq_norm_exact(q, dim), c);
    write_exact_topk(storage_, q, a_q, finalists, k, D + qi * k, I + qi * k);
  };
  if (nq == 1) {
    one(0);  // single queries run on the caller's thread: concurrent callers don't serialise
    return;
  }
  run_parallel(nq, [&](std::size_t qi, int) { one(qi); });
}

}  // namespace poincare
