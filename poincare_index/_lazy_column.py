"""A per-row column that holds no array while every row has its default value.

Most indexes never set a validity window, never count an access and add without ids, so three of
the five system columns would be 20 bytes a point of constants, and the ids 8 bytes a point of
row numbers the core already holds implicitly. A :class:`LazyColumn` allocates its array (at the
store's capacity) on the first write of a value other than the default, and reads give the
defaults until then. The owner (:class:`poincare_index.columns.ColumnStore`) serialises writes
and allocation against searches with its read-write lock.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["LazyColumn", "ROW_NUMBER"]

ROW_NUMBER = None  # the default of a column whose row r holds r (the ids of an add without ids)


class LazyColumn:
    """One column of ``dtype``; ``default`` is a constant, or :data:`ROW_NUMBER`."""

    __slots__ = ("name", "dtype", "default", "data")

    def __init__(self, name: str, dtype: Any, default: int | None) -> None:
        self.name = name
        self.dtype = np.dtype(dtype)
        self.default = default
        self.data: NDArray[Any] | None = None

    @property
    def allocated(self) -> bool:
        return self.data is not None

    @property
    def nbytes(self) -> int:
        return 0 if self.data is None else int(self.data.nbytes)

    def defaults_at(self, rows: NDArray[np.int64]) -> NDArray[Any]:
        """The default values of ``rows`` (a new array)."""
        if self.default is ROW_NUMBER:
            return np.asarray(rows, dtype=self.dtype).copy()
        return np.full(np.shape(rows), self.default, dtype=self.dtype)

    def _defaults(self, start: int, stop: int) -> NDArray[Any]:
        if self.default is ROW_NUMBER:
            return np.arange(start, stop, dtype=self.dtype)
        return np.full(stop - start, self.default, dtype=self.dtype)

    def view(self, n: int) -> NDArray[Any] | None:
        """The first ``n`` rows without a copy, or None while nothing is allocated."""
        return None if self.data is None else self.data[:n]

    def read(self, n: int) -> NDArray[Any]:
        """The first ``n`` rows (a view when allocated, else a new array of defaults)."""
        return self._defaults(0, n) if self.data is None else self.data[:n]

    def take(self, rows: NDArray[np.int64]) -> NDArray[Any]:
        """The values of ``rows`` (a new array)."""
        rows = np.asarray(rows, dtype=np.int64)
        return self.defaults_at(rows) if self.data is None else self.data[rows]

    def grow(self, capacity: int, n: int) -> None:
        """Moves an allocated array to ``capacity`` rows, keeping the first ``n``."""
        if self.data is None or self.data.shape[0] >= capacity:
            return
        out = self._defaults(0, capacity)
        out[:n] = self.data[:n]
        self.data = out

    def allocate(self, capacity: int) -> None:
        """Allocates the array, every row holding its default; the caller excludes readers."""
        if self.data is None:
            self.data = self._defaults(0, capacity)

    def needs_array(self, values: NDArray[Any], rows: NDArray[np.int64]) -> bool:
        """Whether writing ``values`` at ``rows`` needs the array (some value is not the default)."""
        if self.data is not None:
            return True
        if self.default is ROW_NUMBER:
            return not np.array_equal(np.asarray(values, dtype=np.int64), np.asarray(rows, dtype=np.int64))
        return bool(np.any(np.asarray(values) != self.default))
