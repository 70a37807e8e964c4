#include "storage.h"

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

void VectorStorage::reserve(std::size_t n_slots) {
  vectors_.reserve(n_slots * dim_);
  rank_factor_.reserve(n_slots);
  factor_.reserve(n_slots);
  sq_norm_.reserve(n_slots);
  ids_.reserve(n_slots);
  deleted_.reserve(n_slots);
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

std::size_t VectorStorage::append(const float* x, std::size_t n, const std::int64_t* ids) {
  if (slots() + n > UINT32_MAX) throw InvalidArgument("index is full (2^32 - 1 slots)");
  const std::size_t first = slots();
  vectors_.insert(vectors_.end(), x, x + n * dim_);
  ids_.insert(ids_.end(), ids, ids + n);
  deleted_.resize(first + n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    slot_of_id_.emplace(ids[i], static_cast<std::uint32_t>(first + i));
    if (ids[i] >= id_high_water_) id_high_water_ = ids[i] == INT64_MAX ? INT64_MAX : ids[i] + 1;
  }
  live_ += n;
  compute_factors(first);
  return first;
}

void VectorStorage::compute_factors(std::size_t first_slot) {
  const std::size_t n = slots();
  rank_factor_.resize(n);
  factor_.resize(n);
  sq_norm_.resize(n);
  for (std::size_t s = first_slot; s < n; ++s) {
    const double sq = metric::sq_norm_exact(vector(s), dim_);
    const double a = metric::conformal_factor(sq, curvature_);
    sq_norm_[s] = sq;
    factor_[s] = a;
    rank_factor_[s] = static_cast<float>(a);
  }
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
    if (!s.slot_of_id_.emplace(s.ids_[i], static_cast<std::uint32_t>(i)).second)
      throw FormatError("stored id " + std::to_string(s.ids_[i]) + " is live twice");
    ++s.live_;
  }
  s.id_high_water_ = id_high_water;
  s.compute_factors(0);
  return s;
}

}  // namespace poincare
