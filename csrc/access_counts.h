// The access_count column: searches with touch=True increment it while other searches read it,
// so every read and write of it, in the core and from Python, is an atomic operation on one
// uint32 (relaxed order: a count is a statistic, it orders nothing else).
#pragma once

#include <cstddef>
#include <cstdint>

namespace poincare {

// The count at `row`, read atomically.
inline std::uint32_t load_count(const std::uint32_t* counts, std::size_t row) {
  return __atomic_load_n(counts + row, __ATOMIC_RELAXED);
}

// Adds `by` to the count at `row` atomically, saturating at UINT32_MAX instead of wrapping.
void add_count(std::uint32_t* counts, std::size_t row, std::uint32_t by);

// out[i] = counts[rows[i]] (all rows 0..n-1 when rows is null), each read atomically.
// Throws InvalidArgument if a row is >= n_counts.
void copy_counts(const std::uint32_t* counts, std::size_t n_counts, const std::int64_t* rows,
                 std::size_t n_rows, std::uint32_t* out);

// add_count(counts, rows[i], 1) for each i (a row listed twice counts twice).
// Throws InvalidArgument if a row is >= n_counts, before changing anything.
void add_counts(std::uint32_t* counts, std::size_t n_counts, const std::int64_t* rows,
                std::size_t n_rows);

// counts[rows[i]] = values[i], each written atomically. Throws InvalidArgument if a row is
// >= n_counts, before changing anything.
void store_counts(std::uint32_t* counts, std::size_t n_counts, const std::int64_t* rows,
                  std::size_t n_rows, const std::uint32_t* values);

}  // namespace poincare
