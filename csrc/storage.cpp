#include "storage.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "errors.h"
#include "metric.h"
#include "reserve.h"

namespace poincare {

VectorStorage::VectorStorage(std::size_t dim, double curvature, codes::CodeKind code_kind)
    : dim_(dim),
      curvature_(curvature),
      code_kind_(code_kind),
      code_bytes_(codes::row_bytes(code_kind, dim)) {
  if (dim == 0) throw InvalidArgument("dim must be >= 1");
  if (!(curvature > 0.0) || !std::isfinite(curvature))
    throw InvalidArgument("curvature must be a finite number > 0");
  if (code_kind == codes::CodeKind::kSq8 && dim > codes::kMaxSq8Dim)
    throw InvalidArgument("sq8 storage codes at most " + std::to_string(codes::kMaxSq8Dim) +
                          " dimensions, got " + std::to_string(dim));
}

void VectorStorage::reserve(std::size_t n_slots) {
  reserve_amortised(vectors_, n_slots * dim_);
  reserve_amortised(rank_factor_, n_slots);
  reserve_amortised(codes_, n_slots * code_bytes_);
  if (!identity_ids_) reserve_amortised(ids_, n_slots);
  reserve_amortised(deleted_, n_slots);
}

void VectorStorage::check_new_ids(const std::int64_t* ids, std::size_t n) const {
  std::unordered_set<std::int64_t> seen;
  seen.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] == -1)
      throw InvalidArgument("ids row " + std::to_string(i) +
                            ": id -1 is reserved for 'no result' in search output");
    if (!seen.insert(ids[i]).second)
      throw InvalidArgument("ids row " + std::to_string(i) + ": id " + std::to_string(ids[i]) +
                            " appears more than once in this batch");
    if (find(ids[i]) >= 0)
      throw InvalidArgument("ids row " + std::to_string(i) + ": id " + std::to_string(ids[i]) +
                            " is already in the index (remove it first)");
  }
}

std::vector<std::uint32_t> VectorStorage::plan(std::size_t n, bool reuse) const {
  const std::size_t reused = reuse ? std::min(n, released_.size()) : 0;
  if (slots() + (n - reused) > UINT32_MAX) throw InvalidArgument("index is full (2^32 - 1 slots)");
  std::vector<std::uint32_t> out(released_.begin(), released_.begin() + reused);
  for (std::size_t i = 0; i < n - reused; ++i)
    out.push_back(static_cast<std::uint32_t>(slots() + i));
  return out;
}

void VectorStorage::check_placement(const std::uint32_t* where, std::size_t n) const {
  std::size_t next_new = slots();
  std::unordered_set<std::uint32_t> seen;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t s = where[i];
    const bool released = s < slots() && (deleted_[s] & kReleased) != 0 && next_new == slots();
    if (!(released || s == next_new) || !seen.insert(s).second)
      throw InvalidArgument("slot " + std::to_string(s) + " (row " + std::to_string(i) +
                            ") is neither a released slot nor the next new one");
    if (s == next_new) {
      if (next_new >= UINT32_MAX) throw InvalidArgument("index is full (2^32 - 1 slots)");
      ++next_new;
    }
  }
}

void VectorStorage::place(const float* x, std::size_t n, const std::int64_t* ids,
                          const std::uint32_t* where) {
  check_placement(where, n);
  // Before the columns grow: the map is built from the slots in use now.
  for (std::size_t i = 0; i < n && identity_ids_; ++i)
    if (ids[i] != static_cast<std::int64_t>(where[i])) leave_identity_ids();
  std::size_t total = slots();
  for (std::size_t i = 0; i < n; ++i)
    total = std::max<std::size_t>(total, where[i] + std::size_t{1});
  vectors_.resize(total * dim_);
  if (!identity_ids_) ids_.resize(total);
  deleted_.resize(total, 0);
  rank_factor_.resize(total);
  codes_.resize(total * code_bytes_);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t slot = where[i];
    std::copy(x + i * dim_, x + (i + 1) * dim_, vectors_.data() + slot * dim_);
    if (!identity_ids_) ids_[slot] = ids[i];
    deleted_[slot] = 0;
    compute_derived(slot);
    if (!identity_ids_) slot_of_id_.emplace(ids[i], slot);
    if (ids[i] >= id_high_water_) id_high_water_ = ids[i] == INT64_MAX ? INT64_MAX : ids[i] + 1;
  }
  released_.erase(std::remove_if(released_.begin(), released_.end(),
                                 [&](std::uint32_t s) { return (deleted_[s] & kReleased) == 0; }),
                  released_.end());
  live_ += n;
}

std::vector<std::uint32_t> VectorStorage::unreleased_deleted() const {
  std::vector<std::uint32_t> out;
  for (std::size_t s = 0; s < slots(); ++s)
    if (deleted_[s] == kDeleted) out.push_back(static_cast<std::uint32_t>(s));
  return out;
}

void VectorStorage::release(const std::vector<std::uint32_t>& slots_to_release) {
  for (const std::uint32_t s : slots_to_release)
    if (s >= slots() || !deleted_[s])
      throw InvalidArgument("slot " + std::to_string(s) + " is live or out of range");
  for (const std::uint32_t s : slots_to_release) {
    if (deleted_[s] & kReleased) continue;
    deleted_[s] |= kReleased;
    released_.push_back(s);
  }
  std::sort(released_.begin(), released_.end());
}

void VectorStorage::compute_derived(std::size_t slot) {
  rank_factor_[slot] = static_cast<float>(factor(slot));
  codes::encode_row(code_kind_, vector(slot), dim_, codes_.data() + slot * code_bytes_);
}

void VectorStorage::leave_identity_ids() {
  if (!identity_ids_) return;
  // Until now slot s held id s: the column and the map are written out once.
  const std::size_t n = slots();
  ids_.reserve(std::max(n, deleted_.capacity()));
  ids_.resize(n);
  for (std::size_t s = 0; s < n; ++s) ids_[s] = static_cast<std::int64_t>(s);
  identity_ids_ = false;
  slot_of_id_.reserve(live_);
  for (std::size_t s = 0; s < n; ++s)
    if (!deleted_[s]) slot_of_id_.emplace(ids_[s], static_cast<std::uint32_t>(s));
}

void VectorStorage::copy_ids(std::int64_t* out) const {
  const std::size_t n = slots();
  if (identity_ids_)
    for (std::size_t s = 0; s < n; ++s) out[s] = static_cast<std::int64_t>(s);
  else
    std::copy(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(n), out);
}

std::int64_t VectorStorage::find(std::int64_t id) const {
  if (identity_ids_)
    return id >= 0 && static_cast<std::uint64_t>(id) < slots() && !deleted_[id] ? id : -1;
  const auto it = slot_of_id_.find(id);
  return it == slot_of_id_.end() ? -1 : static_cast<std::int64_t>(it->second);
}

bool VectorStorage::remove(std::int64_t id) {
  const std::int64_t slot = find(id);
  if (slot < 0) return false;
  deleted_[slot] = kDeleted;
  if (!identity_ids_) slot_of_id_.erase(id);
  --live_;
  return true;
}

void VectorStorage::memory(std::vector<std::pair<std::string, std::size_t>>& out) const {
  out.emplace_back("vectors", vectors_.capacity() * sizeof(float));
  out.emplace_back("rank_factors", rank_factor_.capacity() * sizeof(float));
  if (code_kind_ != codes::CodeKind::kNone) out.emplace_back("codes", codes_.capacity());
  out.emplace_back("ids", ids_.capacity() * sizeof(std::int64_t));
  out.emplace_back("flags", deleted_.capacity() + released_.capacity() * sizeof(std::uint32_t));
  // libstdc++: a bucket is a pointer; a node holds the next pointer and the pair, rounded up
  // by malloc to 32 bytes.
  // (An empty map points at one static bucket: nothing allocated.)
  out.emplace_back("id_map", slot_of_id_.empty() ? 0
                                                 : slot_of_id_.bucket_count() * sizeof(void*) +
                                                       slot_of_id_.size() * 32);
}

VectorStorage VectorStorage::restore(std::size_t dim, double curvature,
                                     codes::CodeKind code_kind, MappableArray<float> vectors,
                                     std::vector<std::int64_t> ids,
                                     std::vector<std::uint8_t> deleted,
                                     std::int64_t id_high_water) {
  VectorStorage s(dim, curvature, code_kind);
  const std::size_t n = ids.size();
  if (vectors.size() != n * dim || deleted.size() != n)
    throw FormatError("vector, id and deletion columns disagree in length");
  metric::validate_points(vectors.data(), n, dim, curvature, "stored vector");
  s.vectors_ = std::move(vectors);
  s.restore_columns(std::move(ids), std::move(deleted), id_high_water);
  s.rank_factor_.resize(n);
  s.codes_.resize(n * s.code_bytes_);
  for (std::size_t i = 0; i < n; ++i) s.compute_derived(i);
  return s;
}

VectorStorage VectorStorage::restore_mapped(std::size_t dim, double curvature,
                                            codes::CodeKind code_kind,
                                            MappableArray<float> vectors,
                                            MappableArray<float> rank_factors,
                                            MappableArray<std::uint8_t> code_rows,
                                            std::vector<std::int64_t> ids,
                                            std::vector<std::uint8_t> deleted,
                                            std::int64_t id_high_water) {
  VectorStorage s(dim, curvature, code_kind);
  const std::size_t n = ids.size();
  if (vectors.size() != n * dim || deleted.size() != n || rank_factors.size() != n ||
      code_rows.size() != n * s.code_bytes_)
    throw FormatError("vector, factor, code, id and deletion columns disagree in length");
  s.vectors_ = std::move(vectors);
  s.rank_factor_ = std::move(rank_factors);
  s.codes_ = std::move(code_rows);
  s.restore_columns(std::move(ids), std::move(deleted), id_high_water);
  return s;
}

void VectorStorage::verify_contents() const {
  const std::size_t n = slots();
  try {
    metric::validate_points(vectors_.data(), n, dim_, curvature_, "stored vector");
  } catch (const InvalidArgument& e) {
    throw FormatError(e.what());
  }
  for (std::size_t i = 0; i < n; ++i)
    if (rank_factor_[i] != static_cast<float>(factor(i)))
      throw FormatError("stored rank factor of slot " + std::to_string(i) +
                        " disagrees with its coordinates");
  std::vector<std::uint8_t> expected(code_bytes_);
  for (std::size_t i = 0; i < n && code_bytes_ > 0; ++i) {
    codes::encode_row(code_kind_, vector(i), dim_, expected.data());
    if (!std::equal(expected.begin(), expected.end(), code(i)))
      throw FormatError("stored code of slot " + std::to_string(i) +
                        " disagrees with its coordinates");
  }
}

void VectorStorage::recode(codes::CodeKind kind) {
  // Everything that can throw (the kind's limits, the allocation) comes before the first change.
  const VectorStorage check(dim_, curvature_, kind);
  const std::size_t bytes = check.code_bytes_;
  MappableArray<std::uint8_t> rows;
  rows.resize(slots() * bytes);
  for (std::size_t s = 0; s < slots(); ++s)
    codes::encode_row(kind, vector(s), dim_, rows.data() + s * bytes);
  code_kind_ = kind;
  code_bytes_ = bytes;
  codes_ = std::move(rows);
  release_mapped_coordinates();
}

void VectorStorage::release_mapped_coordinates() const {
  if (code_kind_ != codes::CodeKind::kNone) vectors_.release_pages();
}

void VectorStorage::restore_columns(std::vector<std::int64_t> ids,
                                    std::vector<std::uint8_t> deleted, std::int64_t id_high_water) {
  const std::size_t n = ids.size();
  deleted_ = std::move(deleted);
  for (std::size_t i = 0; i < n && identity_ids_; ++i)
    identity_ids_ = ids[i] == static_cast<std::int64_t>(i);
  for (std::size_t i = 0; i < n; ++i) {
    if (deleted_[i] > 1) throw FormatError("deletion flag is neither 0 nor 1");
    if (ids[i] > id_high_water || (ids[i] == id_high_water && id_high_water != INT64_MAX))
      throw FormatError("stored id " + std::to_string(ids[i]) + " exceeds the id high-water mark");
    if (deleted_[i]) continue;
    if (ids[i] == -1) throw FormatError("a stored point has the id -1 (the padding id)");
    if (!identity_ids_ && !slot_of_id_.emplace(ids[i], static_cast<std::uint32_t>(i)).second)
      throw FormatError("stored id " + std::to_string(ids[i]) + " is live twice");
    ++live_;
  }
  if (!identity_ids_) ids_ = std::move(ids);
  id_high_water_ = id_high_water;
  // Deleted slots are not released: the next consolidation releases them again.
}

}  // namespace poincare
