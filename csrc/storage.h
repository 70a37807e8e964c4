// Vector storage: float32 coordinates, per-point cached factors, optional compressed codes of the
// coordinates (codes.h), the id <-> slot map, deletions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codes.h"
#include "mappable_array.h"
#include "metric.h"

namespace poincare {

class VectorStorage {
 public:
  // codes: the compressed copy graph walks rank by (kNone: they read the float32 coordinates).
  VectorStorage(std::size_t dim, double curvature,
                codes::CodeKind code_kind = codes::CodeKind::kNone);

  std::size_t dim() const { return dim_; }
  double curvature() const { return curvature_; }
  // Slots in use, deleted ones included; slot order is insertion order.
  std::size_t slots() const { return deleted_.size(); }
  // Points not deleted.
  std::size_t live() const { return live_; }
  // 1 + the largest id ever stored (0 when empty); add() assigns ids from max(live, this).
  std::int64_t id_high_water() const { return id_high_water_; }

  void reserve(std::size_t n_slots);

  // Throws InvalidArgument naming the first id that is -1 (reserved for "no result"), repeated
  // within `ids`, or already live in the storage.
  void check_new_ids(const std::int64_t* ids, std::size_t n) const;

  // Slots for n new rows: released slots, lowest first (when reuse), then new slots at the end.
  std::vector<std::uint32_t> plan(std::size_t n, bool reuse) const;
  // Throws InvalidArgument unless `where` (n slots) are distinct released slots followed by
  // the next new slots in order (as plan() gives them).
  void check_placement(const std::uint32_t* where, std::size_t n) const;
  // Writes n validated rows with fresh ids (see check_new_ids) into checked slots `where`.
  void place(const float* x, std::size_t n, const std::int64_t* ids, const std::uint32_t* where);
  // Deleted slots not released yet: still waypoints of a search structure.
  std::size_t pending_release() const { return slots() - live_ - released_.size(); }
  // The deleted slots not released yet, ascending.
  std::vector<std::uint32_t> unreleased_deleted() const;
  // Marks deleted slots as released: nothing links to them any more, and place() may reuse
  // them. Throws InvalidArgument for a slot that is live.
  void release(const std::vector<std::uint32_t>& slots);
  bool is_released(std::size_t slot) const { return (deleted_[slot] & kReleased) != 0; }

  const float* vector(std::size_t slot) const { return vectors_.data() + slot * dim_; }
  const float* vectors() const { return vectors_.data(); }
  // The kind of the compressed copy, the bytes of one code row (0 without codes), the code row
  // of a slot (see codes.h for its layout) and all rows.
  codes::CodeKind code_kind() const { return code_kind_; }
  std::size_t code_bytes() const { return code_bytes_; }
  const std::uint8_t* code(std::size_t slot) const { return codes_.data() + slot * code_bytes_; }
  const std::uint8_t* code_rows() const { return codes_.data(); }
  // Whether the coordinates are still a view of a mapped file (see MappableArray).
  bool mapped() const { return vectors_.mapped() || rank_factor_.mapped() || codes_.mapped(); }
  // a(x) = 1/(1 - c|x|^2) rounded to float32: the ranking factor.
  float rank_factor(std::size_t slot) const { return rank_factor_[slot]; }
  const float* rank_factors() const { return rank_factor_.data(); }
  // |x|^2 in float64 from the float32 coordinates (a serial loop: the one rounding every caller
  // shares, so the index kinds report bit-identical distances).
  double sq_norm(std::size_t slot) const { return metric::sq_norm_exact(vector(slot), dim_); }
  // a(x) in float64: the reporting factor, recomputed from the coordinates when a finalist is
  // re-scored (d multiply-adds beside the d of its distance) rather than held as 8 bytes a point.
  double factor(std::size_t slot) const {
    return metric::conformal_factor(sq_norm(slot), curvature_);
  }
  std::int64_t id(std::size_t slot) const {
    return identity_ids_ ? static_cast<std::int64_t>(slot) : ids_[slot];
  }
  // The id column, or null while identity_ids() (slot s holds id s and no column is kept).
  const std::int64_t* ids() const { return identity_ids_ ? nullptr : ids_.data(); }
  // Writes the ids of slots [0, slots()) to `out`.
  void copy_ids(std::int64_t* out) const;
  bool is_deleted(std::size_t slot) const { return deleted_[slot] != 0; }
  // Per slot, nonzero when deleted (kDeleted, with kReleased once released).
  const std::uint8_t* deleted_flags() const { return deleted_.data(); }

  // The live slot holding `id`, or -1.
  std::int64_t find(std::int64_t id) const;
  // Whether every slot holds the id equal to its number (then no id map is kept: see
  // identity_ids_).
  bool identity_ids() const { return identity_ids_; }
  // Bytes held per structure (capacities, not sizes), for memory_usage().
  void memory(std::vector<std::pair<std::string, std::size_t>>& out) const;
  // Marks the point deleted; returns false if `id` was not live.
  bool remove(std::int64_t id);

  // Rebuilds a storage from saved columns (ids, deletion flags, vectors); rank factors and codes
  // are recomputed from the float32 coordinates, so they are bit-identical to the ones before
  // saving.
  static VectorStorage restore(std::size_t dim, double curvature, codes::CodeKind code_kind,
                               MappableArray<float> vectors, std::vector<std::int64_t> ids,
                               std::vector<std::uint8_t> deleted, std::int64_t id_high_water);
  // The same over coordinates, rank factors and codes left in a mapped file (a fast open): ids
  // and flags are checked, the mapped arrays are not read (verify_contents() reads them).
  static VectorStorage restore_mapped(std::size_t dim, double curvature,
                                      codes::CodeKind code_kind, MappableArray<float> vectors,
                                      MappableArray<float> rank_factors,
                                      MappableArray<std::uint8_t> code_rows,
                                      std::vector<std::int64_t> ids,
                                      std::vector<std::uint8_t> deleted,
                                      std::int64_t id_high_water);
  // Codes every slot again as `kind` (kNone: drops the codes); one pass over the coordinates.
  void recode(codes::CodeKind kind);
  // Throws FormatError unless every point lies inside the ball and every rank factor and code
  // row is the one its coordinates give (what restore() computes).
  void verify_contents() const;
  // With codes, lets the pages of coordinates still mapped from a file go (a verify read them
  // all; searches read only their finalists' rows again). Mapped coordinates are never written
  // in place (a write owns the array first), so nothing is lost.
  void release_mapped_coordinates() const;

 private:
  // a(x) and the code row of a slot, from its float32 coordinates.
  void compute_derived(std::size_t slot);
  // Checks and adopts saved ids and deletion flags (n slots); part of both restores.
  void restore_columns(std::vector<std::int64_t> ids, std::vector<std::uint8_t> deleted,
                       std::int64_t id_high_water);

  std::size_t dim_;
  double curvature_;
  MappableArray<float> vectors_;
  MappableArray<float> rank_factor_;
  codes::CodeKind code_kind_;
  std::size_t code_bytes_;
  MappableArray<std::uint8_t> codes_;  // slots() * code_bytes_ bytes
  std::vector<std::int64_t> ids_;  // empty while identity_ids_
  // Per slot: kDeleted, plus kReleased when released (reusable); one byte for both flags.
  static constexpr std::uint8_t kDeleted = 1, kReleased = 2;
  std::vector<std::uint8_t> deleted_;
  std::vector<std::uint32_t> released_;  // the released slots, ascending
  // Live ids only, and only once some slot holds an id other than its own number: add()
  // without ids numbers points by slot, and a map entry costs ~40 bytes a point (node,
  // bucket, allocator), more than the graph's upper levels and the factors together.
  std::unordered_map<std::int64_t, std::uint32_t> slot_of_id_;
  bool identity_ids_ = true;
  void leave_identity_ids();
  std::size_t live_ = 0;
  std::int64_t id_high_water_ = 0;
};

}  // namespace poincare
