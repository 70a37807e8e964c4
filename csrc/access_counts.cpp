#include "access_counts.h"

#include <string>

#include "errors.h"

namespace poincare {

namespace {

void check_rows(std::size_t n_counts, const std::int64_t* rows, std::size_t n_rows) {
  for (std::size_t i = 0; i < n_rows; ++i)
    if (rows[i] < 0 || static_cast<std::uint64_t>(rows[i]) >= n_counts)
      throw InvalidArgument("access-count row " + std::to_string(rows[i]) + " out of range [0, " +
                            std::to_string(n_counts) + ")");
}

}  // namespace

void add_count(std::uint32_t* counts, std::size_t row, std::uint32_t by) {
  // A compare-exchange loop rather than fetch_add: a count pinned at the maximum must not wrap
  // to 0 (Ebbinghaus decay would then forget the most used memory first).
  std::uint32_t seen = __atomic_load_n(counts + row, __ATOMIC_RELAXED);
  for (;;) {
    const std::uint32_t next = seen > UINT32_MAX - by ? UINT32_MAX : seen + by;
    if (next == seen || __atomic_compare_exchange_n(counts + row, &seen, next, true,
                                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      return;
  }
}

void copy_counts(const std::uint32_t* counts, std::size_t n_counts, const std::int64_t* rows,
                 std::size_t n_rows, std::uint32_t* out) {
  if (rows == nullptr) {
    for (std::size_t i = 0; i < n_counts; ++i) out[i] = load_count(counts, i);
    return;
  }
  check_rows(n_counts, rows, n_rows);
  for (std::size_t i = 0; i < n_rows; ++i)
    out[i] = load_count(counts, static_cast<std::size_t>(rows[i]));
}

void add_counts(std::uint32_t* counts, std::size_t n_counts, const std::int64_t* rows,
                std::size_t n_rows) {
  check_rows(n_counts, rows, n_rows);
  for (std::size_t i = 0; i < n_rows; ++i) add_count(counts, static_cast<std::size_t>(rows[i]), 1);
}

void store_counts(std::uint32_t* counts, std::size_t n_counts, const std::int64_t* rows,
                  std::size_t n_rows, const std::uint32_t* values) {
  check_rows(n_counts, rows, n_rows);
  for (std::size_t i = 0; i < n_rows; ++i)
    __atomic_store_n(counts + rows[i], values[i], __ATOMIC_RELAXED);
}

}  // namespace poincare
