// Geometric growth for the index's per-point arrays.
#pragma once

#include <algorithm>
#include <cstddef>

namespace poincare {

// Reserves room for n elements, growing geometrically past what is asked: exact for one large
// add (the caller reserves the whole batch), amortised O(1) for many small ones (reserving
// exactly what one more row needs would copy the array on every single-row add).
template <class Column>
void reserve_amortised(Column& column, std::size_t n) {
  if (n > column.capacity()) column.reserve(std::max(n, column.capacity() + column.capacity() / 2));
}

}  // namespace poincare
