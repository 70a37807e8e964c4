#include "storage.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "errors.h"
#include "metric.h"

namespace poincare {

VectorStorage::VectorStorage(std::size_t dim, double curvature) : dim_(dim), curvature_(curvature) {
  if (dim == 0) throw InvalidArgument("dim must be >= 1");
  if (!(curvature > 0.0) || !std::isfinite(curvature))
    throw InvalidArgument("curvature must be a finite number > 0");
}

namespace {
// Grows geometrically: reserving exactly what one more add needs would copy every column on
// each single-row add (a chat loop's), O(n) per add; 1.5x keeps appends amortised O(1).
template <class Column>
void reserve_amortised(Column& column, std::size_t n) {
  if (n > column.capacity()) column.reserve(std::max(n, column.capacity() + column.capacity() / 2));
}
}  // namespace

void VectorStorage::reserve(std::size_t n_slots) {
  reserve_amortised(vectors_, n_slots * dim_);
  reserve_amortised(rank_factor_, n_slots);
  reserve_amortised(factor_, n_slots);
  reserve_amortised(sq_norm_, n_slots);
  reserve_amortised(ids_, n_slots);
  reserve_amortised(deleted_, n_slots);
  reserve_amortised(released_flag_, n_slots);
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
    if (slot_of_id_.count(ids[i]))
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
    const bool released = s < slots() && released_flag_[s] && next_new == slots();
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
  std::size_t total = slots();
  for (std::size_t i = 0; i < n; ++i)
    total = std::max<std::size_t>(total, where[i] + std::size_t{1});
  vectors_.resize(total * dim_);
  ids_.resize(total);
  deleted_.resize(total, 0);
  released_flag_.resize(total, 0);
  rank_factor_.resize(total);
  factor_.resize(total);
  sq_norm_.resize(total);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t slot = where[i];
    std::copy(x + i * dim_, x + (i + 1) * dim_, vectors_.data() + slot * dim_);
    ids_[slot] = ids[i];
    deleted_[slot] = 0;
    released_flag_[slot] = 0;
    compute_factors(slot);
    slot_of_id_.emplace(ids[i], slot);
    if (ids[i] >= id_high_water_) id_high_water_ = ids[i] == INT64_MAX ? INT64_MAX : ids[i] + 1;
  }
  released_.erase(std::remove_if(released_.begin(), released_.end(),
                                 [&](std::uint32_t s) { return !released_flag_[s]; }),
                  released_.end());
  live_ += n;
}

std::vector<std::uint32_t> VectorStorage::unreleased_deleted() const {
  std::vector<std::uint32_t> out;
  for (std::size_t s = 0; s < slots(); ++s)
    if (deleted_[s] && !released_flag_[s]) out.push_back(static_cast<std::uint32_t>(s));
  return out;
}

void VectorStorage::release(const std::vector<std::uint32_t>& slots_to_release) {
  for (const std::uint32_t s : slots_to_release)
    if (s >= slots() || !deleted_[s])
      throw InvalidArgument("slot " + std::to_string(s) + " is live or out of range");
  for (const std::uint32_t s : slots_to_release) {
    if (released_flag_[s]) continue;
    released_flag_[s] = 1;
    released_.push_back(s);
  }
  std::sort(released_.begin(), released_.end());
}

void VectorStorage::compute_factors(std::size_t slot) {
  const double sq = metric::sq_norm_exact(vector(slot), dim_);
  const double a = metric::conformal_factor(sq, curvature_);
  sq_norm_[slot] = sq;
  factor_[slot] = a;
  rank_factor_[slot] = static_cast<float>(a);
}

std::int64_t VectorStorage::find(std::int64_t id) const {
  const auto it = slot_of_id_.find(id);
  return it == slot_of_id_.end() ? -1 : static_cast<std::int64_t>(it->second);
}

bool VectorStorage::remove(std::int64_t id) {
  const auto it = slot_of_id_.find(id);
  if (it == slot_of_id_.end()) return false;
  deleted_[it->second] = 1;
  slot_of_id_.erase(it);
  --live_;
  return true;
}

VectorStorage VectorStorage::restore(std::size_t dim, double curvature, std::vector<float> vectors,
                                     std::vector<std::int64_t> ids,
                                     std::vector<std::uint8_t> deleted,
                                     std::int64_t id_high_water) {
  VectorStorage s(dim, curvature);
  const std::size_t n = ids.size();
  if (vectors.size() != n * dim || deleted.size() != n)
    throw FormatError("vector, id and deletion columns disagree in length");
  metric::validate_points(vectors.data(), n, dim, curvature, "stored vector");
  s.vectors_.assign(vectors.begin(), vectors.end());
  s.ids_ = std::move(ids);
  s.deleted_ = std::move(deleted);
  for (std::size_t i = 0; i < n; ++i) {
    if (s.deleted_[i] > 1) throw FormatError("deletion flag is neither 0 nor 1");
    if (s.ids_[i] > id_high_water || (s.ids_[i] == id_high_water && id_high_water != INT64_MAX))
      throw FormatError("stored id " + std::to_string(s.ids_[i]) +
                        " exceeds the id high-water mark");
    if (s.deleted_[i]) continue;
    if (s.ids_[i] == -1) throw FormatError("a stored point has the id -1 (the padding id)");
    if (!s.slot_of_id_.emplace(s.ids_[i], static_cast<std::uint32_t>(i)).second)
      throw FormatError("stored id " + std::to_string(s.ids_[i]) + " is live twice");
    ++s.live_;
  }
  s.id_high_water_ = id_high_water;
  s.released_flag_.assign(n, 0);  // deleted slots are released again by the next consolidation
  s.rank_factor_.resize(n);
  s.factor_.resize(n);
  s.sq_norm_.resize(n);
  for (std::size_t i = 0; i < n; ++i) s.compute_factors(i);
  return s;
}

}  // namespace poincare
