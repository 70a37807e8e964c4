"""Per-point columns beside the graph, one row per slot (insertion order, removed rows included).

``id`` int64, ``t``/``valid_from``/``valid_until`` timestamp[us, UTC] (the window ends nullable:
an open end), ``access_count`` uint32, then the user's metadata columns. The time columns live in
numpy arrays the index owns; :meth:`ColumnStore.table` wraps their memory as Arrow data buffers
without a copy, and the C++ core reads the same buffers during a search (open window ends are
stored as the int64 extremes under Arrow's nulls). ``access_count`` is the one mutable column:
``touch=True`` increments it in place, atomically, under concurrent searches.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from numpy.typing import NDArray

from . import _core, _time
from ._durable import file_crc32
from ._lazy_column import ROW_NUMBER, LazyColumn
from ._metadata import RESERVED_COLUMNS, check_metadata_times, concat_metadata, merge_small_chunks, null_table
from ._rwlock import ReadWriteLock

__all__ = ["ColumnStore", "RESERVED_COLUMNS", "TIME_TYPE"]

TIME_TYPE = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class _Rows:
    """How many rows the columns hold and their metadata (exactly ``n`` rows, or None): one value,
    replaced whole by each write, so a reader that takes it once sees a length and a metadata
    table that belong together, whatever a concurrent add does meanwhile."""

    n: int
    meta: pa.Table | None


class ColumnStore:
    """The columns of one index; rows are appended in the order the core assigns slots.

    Writes (one at a time: the index's write lock) publish a new :class:`_Rows`; readers take
    :attr:`_rows` once and read the arrays up to its ``n`` (rows below it never move: growing
    copies them, under the read-write lock). ``access_count`` is read and written only through
    the atomic helpers (:meth:`access_counts`, :meth:`add_access`, :meth:`set_access`), because
    searches with ``touch=True`` increment it concurrently."""

    def __init__(self) -> None:
        self._rows = _Rows(0, None)
        self._t = np.zeros(0, dtype=np.int64)  # always set: its length is the capacity
        # Allocated only once a row differs from the default (see _lazy_column).
        self._ids = LazyColumn("id", np.int64, ROW_NUMBER)
        self._valid_from = LazyColumn("valid_from", np.int64, _time.OPEN_START)
        self._valid_until = LazyColumn("valid_until", np.int64, _time.OPEN_END)
        self._access = LazyColumn("access_count", np.uint32, 0)
        self._lock = ReadWriteLock()
        # (rows sorted, their buckets, rows in the view, the view with the newer rows in front)
        self._buckets: tuple[int, tuple[NDArray[Any], ...], int, tuple[NDArray[Any], ...]] | None = None

    def __len__(self) -> int:
        return self._rows.n

    @property
    def _n(self) -> int:
        return self._rows.n

    @property
    def _meta(self) -> pa.Table | None:
        return self._rows.meta

    # ---- appending ----------------------------------------------------------------------
    def _grow(self, need: int) -> None:
        cap = self._t.shape[0]
        if need <= cap:
            return
        new_cap = max(need, cap + cap // 2, 1024)  # as the core's arrays: exact after reserve()

        def grown(a: NDArray[Any]) -> NDArray[Any]:
            out = np.zeros(new_cap, dtype=a.dtype)
            out[: self._n] = a[: self._n]
            return out

        with self._lock.writing():  # no search holds the old access counts while they move
            self._t = grown(self._t)
            for col in self._lazy():
                col.grow(new_cap, self._n)

    def _lazy(self) -> tuple[LazyColumn, ...]:
        return (self._ids, self._valid_from, self._valid_until, self._access)

    def _write(self, col: LazyColumn, rows: NDArray[np.int64], values: NDArray[Any]) -> None:
        """Writes ``values`` at ``rows`` (within the capacity), allocating the column first when
        a value is not its default; a column that stays unallocated already holds them."""
        if not col.allocated:
            if not col.needs_array(values, rows):
                return
            with self._lock.writing():  # no search reads the column while it appears
                col.allocate(self._t.shape[0])
        assert col.data is not None
        col.data[rows] = values

    def reserve(self, n_more: int) -> None:
        """Allocates for ``n_more`` more rows at once, so a large add grows no column twice."""
        self._grow(self._n + n_more)

    def append(
        self,
        ids: NDArray[np.int64],
        t: NDArray[np.int64],
        valid_from: NDArray[np.int64],
        valid_until: NDArray[np.int64],
        metadata: pa.Table | None,
    ) -> None:
        """Appends validated rows (see check_window); metadata has len(ids) rows or is None."""
        m = ids.shape[0]
        meta = self._merged_metadata(metadata, m)
        self._grow(self._n + m)
        end = self._n + m
        rows = np.arange(self._n, end, dtype=np.int64)
        self._t[self._n : end] = t
        for col, values in zip(self._lazy()[:3], (ids, valid_from, valid_until)):
            self._write(col, rows, values)
        if self._access.data is not None:
            self._access.data[self._n : end] = 0  # rows past n: no search reads them yet
        self._rows = _Rows(end, meta)

    def place(
        self,
        slots: NDArray[np.uint32],
        ids: NDArray[np.int64],
        t: NDArray[np.int64],
        valid_from: NDArray[np.int64],
        valid_until: NDArray[np.int64],
        metadata: pa.Table | None,
    ) -> tuple[Any, ...]:
        """Writes validated rows at ``slots``: rows of removed points (< len) are overwritten, the
        rest must be the next rows in order and are appended. Returns what :meth:`undo` needs
        to put everything back (the core may still refuse the rows); a caller that must be able
        to undo a place interrupted part-way takes that token first, from :meth:`undo_token`."""
        m = ids.shape[0]
        if slots.shape[0] != m:
            raise ValueError(f"{slots.shape[0]} slots for {m} rows")
        token = self.undo_token(slots)
        n_before = self._n
        reused = np.flatnonzero(slots < n_before)
        fresh = np.flatnonzero(slots >= n_before)
        if not np.array_equal(slots[fresh], np.arange(n_before, n_before + fresh.shape[0])):
            raise ValueError("new rows must follow the existing ones in order")
        at = slots[reused].astype(np.int64)
        sub = metadata.take(pa.array(fresh)) if metadata is not None else None
        self.append(ids[fresh], t[fresh], valid_from[fresh], valid_until[fresh], sub)
        if reused.shape[0]:
            try:
                meta = self._meta
                if metadata is not None or meta is not None:
                    meta = self._overwritten_metadata(at, reused, metadata, m)  # may refuse
            except BaseException:
                self.undo(token)
                raise
            self._write_rows(at, (ids[reused], t[reused], valid_from[reused], valid_until[reused]))
            self.set_access(at, np.zeros(at.shape[0], dtype=np.uint32))
            self._rows = _Rows(self._n, meta)
            self._buckets = None  # times changed in place: the time order is rebuilt
        return token

    def metadata_with_row(self, row: int, metadata: pa.Table | None) -> pa.Table | None:
        """The metadata with row ``row`` replaced by ``metadata`` (one row; None: all null),
        without changing anything; ValueError when the types do not match."""
        if metadata is None and self._meta is None:
            return None
        return self._overwritten_metadata(
            np.array([row], dtype=np.int64), np.zeros(1, dtype=np.int64), metadata, 1
        )

    def set_row(self, row: int, t: int, valid_from: int, valid_until: int, metadata: pa.Table | None) -> None:
        """Replaces one row's times in place and the metadata by ``metadata`` (from
        :meth:`metadata_with_row`); the row's id and access count stay."""
        at = np.array([row], dtype=np.int64)
        self._t[row] = t
        self._write(self._valid_from, at, np.array([valid_from], dtype=np.int64))
        self._write(self._valid_until, at, np.array([valid_until], dtype=np.int64))
        self._rows = _Rows(self._n, metadata)
        self._buckets = None

    def void_rows(self, start: int, meta_before: pa.Table | None) -> None:
        """Rows ``start`` .. len hold points that were rolled back (removed from the core): they
        are set to what adding a point with no time or metadata gives (t = 0, open window, access
        0), and the metadata goes back to ``meta_before`` (its first ``start`` rows, before those
        points came) with null rows, so columns the rolled-back rows brought go with them."""
        n = self._n
        if start >= n:
            return
        at = np.arange(start, n, dtype=np.int64)
        m = at.shape[0]
        self._write_rows(
            at,
            (
                self._ids.take(at),
                np.zeros(m, dtype=np.int64),
                np.full(m, _time.OPEN_START, dtype=np.int64),
                np.full(m, _time.OPEN_END, dtype=np.int64),
            ),
        )
        self.set_access(at, np.zeros(m, dtype=np.uint32))
        meta = None
        if meta_before is not None:
            kept = meta_before.slice(0, start)
            meta = pa.concat_tables([kept, null_table(kept.schema, m)]).combine_chunks()
        self._rows = _Rows(n, meta)
        self._buckets = None

    def undo_token(self, slots: NDArray[np.uint32]) -> tuple[Any, ...]:
        """What :meth:`undo` needs to put the columns back as they are now, after a
        :meth:`place` at ``slots`` that completed, failed or was interrupted anywhere (changes
        nothing: the length, the metadata, and copies of the rows ``slots`` overwrite)."""
        n_before, meta_before = self._n, self._meta
        at = slots[slots < n_before].astype(np.int64)
        return (n_before, meta_before, at, self._rows_at(at) + (self.access_counts(at),))

    def undo(self, token: tuple[Any, ...]) -> None:
        """Puts back what :meth:`place` changed (idempotent: running it twice is running it once)."""
        n_before, meta_before, at, saved = token
        self._write_rows(at, saved[:4])
        self.set_access(at, saved[4])
        self._rows = _Rows(min(self._n, n_before), meta_before)
        self._buckets = None

    def _rows_at(self, at: NDArray[np.int64]) -> tuple[NDArray[Any], ...]:
        """Copies of (id, t, valid_from, valid_until) at rows ``at``."""
        return (self._ids.take(at), self._t[at].copy(), self._valid_from.take(at), self._valid_until.take(at))

    def _write_rows(self, at: NDArray[np.int64], values: tuple[NDArray[Any], ...]) -> None:
        """Writes (id, t, valid_from, valid_until) at rows ``at`` (existing rows)."""
        ids, t, valid_from, valid_until = values
        self._t[at] = t
        for col, v in zip(self._lazy()[:3], (ids, valid_from, valid_until)):
            self._write(col, at, v)

    # ---- reading single columns (copies) --------------------------------------------------
    def valid_from_of(self, rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """valid_from of ``rows`` (int64 microseconds; OPEN_START for an open start)."""
        return self._valid_from.take(rows)

    def valid_until_of(self, rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """valid_until of ``rows`` (int64 microseconds; OPEN_END for an open end)."""
        return self._valid_until.take(rows)

    def set_valid_until(self, row: int, until_us: int) -> None:
        """Closes (or moves) the validity window of one existing row."""
        self._write(self._valid_until, np.array([row], dtype=np.int64), np.array([until_us], dtype=np.int64))

    def _overwritten_metadata(
        self, at: NDArray[np.int64], reused: NDArray[np.int64], metadata: pa.Table | None, m: int
    ) -> pa.Table:
        """The metadata with rows ``at`` replaced by rows ``reused`` of the batch's metadata."""
        base = self._meta if self._meta is not None else null_table(metadata.schema, self._n)
        batch = metadata if metadata is not None else null_table(base.schema, m)
        both = concat_metadata(base, batch.take(pa.array(reused)))
        order = np.arange(self._n, dtype=np.int64)
        order[at] = self._n + np.arange(at.shape[0])
        return both.take(pa.array(order))

    def _merged_metadata(self, metadata: pa.Table | None, m: int) -> pa.Table | None:
        """The metadata after appending m rows: columns missing on either side are null there."""
        if metadata is None and self._meta is None:
            return None
        if self._meta is None and self._n == 0:
            return metadata
        old = self._meta if self._meta is not None else null_table(metadata.schema, self._n)
        new = metadata if metadata is not None else null_table(old.schema, m)
        return merge_small_chunks(concat_metadata(old, new))

    # ---- reading ------------------------------------------------------------------------
    @contextmanager
    def buffers(self) -> Iterator[tuple[NDArray[Any] | None, ...]]:
        """(t, valid_from, valid_until, access_count) views of the live rows, held for a search;
        None for a column not allocated (every row holds the default: the core reads null)."""
        with self._lock.reading():
            n = self._n
            yield self._t[:n], self._valid_from.view(n), self._valid_until.view(n), self._access.view(n)

    def time_buckets(self, bucket_rows: int = 1024) -> tuple[NDArray[Any], ...]:
        """(order, starts, t_min, t_max): the rows cut into buckets with each bucket's time range,
        newest first. Rows added since the last full sort form one extra bucket in front (newest
        added first) until there are ``bucket_rows`` of them; then they are merged into the
        sorted order. So an add-then-search loop pays O(new rows) per search plus one merge per
        ``bucket_rows`` adds, not an O(n) merge per add (1.8 ms at 100,000 rows). The fused
        search bounds each bucket by its own time range, so the extra bucket needs no order
        with the others."""
        cached = self._buckets
        n = self._rows.n
        if cached is not None and cached[2] == n:
            return cached[3]
        t = self._t[:n]
        if cached is None or n < cached[2] or n - cached[0] > bucket_rows:
            previous = None if cached is None or n < cached[2] else (cached[0], cached[1][0][bucket_rows:])
            order, starts, t_min, t_max = self._sorted_buckets(t, previous, bucket_rows)
            # The order sits behind room for bucket_rows new rows, so the front bucket is
            # written in place and the order passed on is a view: no O(n) copy per search.
            room = np.empty(bucket_rows + order.shape[0], dtype=np.uint32)
            room[bucket_rows:] = order
            sorted_part = (room, starts, t_min, t_max)
            cached = (n, sorted_part, n, (room[bucket_rows:], starts, t_min, t_max))
        else:
            n_sorted, sorted_part, n_written = cached[0], cached[1], cached[2]
            room, starts, t_min, t_max = sorted_part
            # The front bucket holds the rows past the sort, newest-added first; each call
            # writes only the rows added since the last one, in front of those: a search still
            # reading an earlier view reads nothing this overwrites.
            front = bucket_rows - (n - n_sorted)
            room[front : bucket_rows - (n_written - n_sorted)] = np.arange(
                n - 1, n_written - 1, -1, dtype=np.uint32
            )
            tail_t = t[n_sorted:n]
            view = (
                room[front:],
                np.concatenate([[0], starts + (n - n_sorted)]).astype(np.int64),
                np.concatenate([[tail_t.min()], t_min]).astype(np.int64),
                np.concatenate([[tail_t.max()], t_max]).astype(np.int64),
            )
            cached = (n_sorted, sorted_part, n, view)
        self._buckets = cached
        return cached[3]

    @staticmethod
    def _sorted_buckets(
        t: NDArray[np.int64], previous: tuple[int, NDArray[np.uint32]] | None, bucket_rows: int
    ) -> tuple[NDArray[Any], ...]:
        """Every row newest first in buckets of ``bucket_rows``; ``previous``: (rows, order) of
        the last sort, the rows past it merged in."""
        n = t.shape[0]
        if previous is not None and previous[0] < n:
            n_old, old_order = previous
            new_rows = np.arange(n_old, n, dtype=np.uint32)
            new_rows = new_rows[np.argsort(-t[new_rows], kind="stable")]
            at = np.searchsorted(-t[old_order], -t[new_rows], side="right")
            order = np.insert(old_order, at, new_rows)
        else:
            order = np.argsort(-t, kind="stable").astype(np.uint32)
        starts = np.unique(np.append(np.arange(0, n, bucket_rows, dtype=np.int64), n))
        sorted_t = t[order]
        t_max = np.ascontiguousarray(sorted_t[starts[:-1]])
        t_min = np.ascontiguousarray(sorted_t[starts[1:] - 1])
        return (np.ascontiguousarray(order, dtype=np.uint32), starts, t_min, t_max)

    def bucket_max_access(self, order: NDArray[np.uint32], starts: NDArray[np.int64]) -> NDArray[np.uint32]:
        """The largest access_count per bucket, now (touch changes it)."""
        if starts.shape[0] <= 1:
            return np.zeros(0, dtype=np.uint32)
        counts = self.access_counts(order.astype(np.int64))
        return np.maximum.reduceat(counts, starts[:-1]).astype(np.uint32)

    def access_counts(self, rows: NDArray[np.int64] | None = None) -> NDArray[np.uint32]:
        """A copy of the access counts of ``rows`` (default: every row), read atomically."""
        n = self._rows.n
        counts = self._access.view(n)
        if counts is None:
            at = np.ascontiguousarray(rows, dtype=np.int64) if rows is not None else None
            if at is not None and at.size and (at.min() < 0 or at.max() >= n):
                raise IndexError(f"row outside the {n} rows of the access counts")
            return np.zeros(n if at is None else at.shape[0], dtype=np.uint32)
        if rows is None:
            return _core.copy_counts(counts)
        return _core.copy_counts(counts, np.ascontiguousarray(rows, dtype=np.int64))

    def _access_snapshot(self, n: int) -> NDArray[np.uint32]:
        """A copy of the first ``n`` access counts, read atomically."""
        counts = self._access.view(n)
        return np.zeros(n, dtype=np.uint32) if counts is None else _core.copy_counts(counts)

    def allocate_access(self) -> None:
        """Allocates the access counts (before a search that touches: the core refuses to touch
        a column that does not exist)."""
        if not self._access.allocated:
            with self._lock.writing():
                self._access.allocate(self._t.shape[0])

    def add_access(self, rows: NDArray[np.int64]) -> None:
        """Adds 1 to the access count of each of ``rows`` (a row listed twice gets 2), atomically
        against concurrent touches; counts saturate at 2**32 - 1."""
        self.allocate_access()
        with self._lock.reading():  # the array does not move meanwhile
            _core.add_counts(self._access.data[: self._n], np.ascontiguousarray(rows, dtype=np.int64))

    def set_access(self, rows: NDArray[np.int64], values: NDArray[Any]) -> None:
        """Sets the access counts of ``rows`` (values in [0, 2**32 - 1])."""
        if not np.all((np.asarray(values) >= 0) & (np.asarray(values) <= np.iinfo(np.uint32).max)):
            raise ValueError("access counts must be in [0, 2**32 - 1]")
        at = np.ascontiguousarray(rows, dtype=np.int64)
        if not self._access.needs_array(np.asarray(values), at):
            if at.size and (at.min() < 0 or at.max() >= self._n):
                raise IndexError(f"row outside the {self._n} rows of the access counts")
            return  # zeros into counts that are all zero
        self.allocate_access()
        with self._lock.reading():
            _core.store_counts(
                self._access.data[: self._n],
                np.ascontiguousarray(rows, dtype=np.int64),
                np.ascontiguousarray(values, dtype=np.uint32),
            )

    def table(self) -> pa.Table:
        """The columns as a pyarrow Table (time columns share memory with the index; access
        counts are a snapshot): the rows there were when the call began, whatever an add does
        meanwhile."""
        rows = self._rows
        return self._table(rows, self._ids.read(rows.n))

    def filter_snapshot(self) -> tuple[NDArray[np.int64], pa.Table]:
        """(a copy of the id per row, the table with that copy as its id column), of one moment:
        what a filter is evaluated on, so the ids it was computed for are known."""
        rows = self._rows
        ids = self._ids.read(rows.n).copy()
        return ids, self._table(rows, ids)

    def _table(self, rows: _Rows, ids: NDArray[np.int64]) -> pa.Table:
        n = rows.n
        cols: dict[str, pa.Array] = {
            "id": pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(ids)]),
            "t": pa.Array.from_buffers(TIME_TYPE, n, [None, pa.py_buffer(self._t[:n])]),
            "valid_from": _nullable_time(self._valid_from.read(n), _time.OPEN_START),
            "valid_until": _nullable_time(self._valid_until.read(n), _time.OPEN_END),
            "access_count": pa.array(self._access_snapshot(n), type=pa.uint32()),
        }
        table = pa.table(cols)
        if rows.meta is not None:
            for name in rows.meta.column_names:
                table = table.append_column(name, rows.meta.column(name))
        return table

    @property
    def metadata(self) -> pa.Table | None:
        return self._meta

    def memory(self) -> dict[str, int]:
        """Bytes allocated per column (capacity, not rows in use), and the metadata table's."""
        out = {
            f"column_{name}": getattr(self, f"_{name}").nbytes
            for name in ("ids", "valid_from", "valid_until", "access")
        }
        out["column_t"] = int(self._t.nbytes)
        meta = self._meta
        out["metadata"] = int(meta.nbytes) if meta is not None else 0
        return out

    # ---- persistence --------------------------------------------------------------------
    def write(self, path: Path) -> tuple[int, int]:
        """Writes the table as an Arrow IPC file and fsyncs it; returns (size, crc32)."""
        table = self.table()
        with pa.OSFile(str(path), "wb") as sink:
            with ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
        with open(path, "rb+") as fh:
            os.fsync(fh.fileno())
        return path.stat().st_size, file_crc32(path)

    @classmethod
    def read(cls, path: Path, expected_ids: NDArray[np.int64]) -> ColumnStore:
        """Loads a file written by :meth:`write` (metadata memory-mapped; the checksum is checked
        by the caller first) for an index whose slots hold ``expected_ids``. Every array is
        validated in full before anything reads it; IndexFormatError names what is wrong."""
        from ._checked import checked_table
        from ._core import IndexFormatError

        try:
            source = pa.memory_map(str(path), "r")
            table = ipc.open_file(source).read_all()
        except (pa.ArrowException, OSError) as exc:
            raise IndexFormatError(f"{path} is not a readable Arrow IPC file: {exc}") from None
        checked_table(table, str(path))
        expected = {
            "id": pa.int64(),
            "t": TIME_TYPE,
            "valid_from": TIME_TYPE,
            "valid_until": TIME_TYPE,
            "access_count": pa.uint32(),
        }
        for i, (name, typ) in enumerate(expected.items()):
            if i >= table.num_columns or table.column_names[i] != name or table.schema.field(i).type != typ:
                raise IndexFormatError(f"{path}: column {i} is not {name} ({typ})")
        names = table.column_names
        if len(set(names)) != len(names) or any(n in RESERVED_COLUMNS for n in names[len(expected) :]):
            raise IndexFormatError(f"{path}: duplicate or reserved column names {names}")
        n = table.num_rows
        if n != expected_ids.shape[0]:
            raise IndexFormatError(f"{path} has {n} rows, the index has {expected_ids.shape[0]} slots")
        for name in ("id", "t", "access_count"):
            if table.column(name).null_count:
                raise IndexFormatError(f"{path}: column {name} has missing values")

        store = cls()
        store._grow(n)
        ids = _int_column(table, "id", 0)
        if not np.array_equal(ids, expected_ids):
            raise IndexFormatError(f"{path}: the id column disagrees with the vectors file")
        store._t[:n] = _int_column(table, "t", 0)
        rows = np.arange(n, dtype=np.int64)
        store._write(store._ids, rows, ids)
        del ids
        try:
            _time._check_range(store._t[:n], np.zeros(n, dtype=bool), "t")
            for name, col, open_value in (
                ("valid_from", store._valid_from, _time.OPEN_START),
                ("valid_until", store._valid_until, _time.OPEN_END),
            ):
                if table.column(name).null_count == n:  # every end open: nothing to hold
                    continue
                arr = _int_column(table, name, open_value)
                _time._check_range(arr, arr == open_value, name)
                store._write(col, rows, arr)
            if store._valid_from.allocated or store._valid_until.allocated:
                check_window(store._valid_from.read(n), store._valid_until.read(n))
        except ValueError as exc:
            raise IndexFormatError(f"{path}: {exc}") from None
        access = np.asarray(
            table.column("access_count").combine_chunks().to_numpy(zero_copy_only=False), dtype=np.uint32
        )
        store._write(store._access, rows, access)
        meta_names = names[len(expected) :]
        meta = table.select(meta_names) if meta_names else None
        if meta is not None:
            try:
                check_metadata_times(meta)
            except ValueError as exc:
                raise IndexFormatError(f"{path}: {exc}") from None
        store._rows = _Rows(n, meta)
        # The casts above went through Arrow's allocator, whose pool keeps freed blocks (~25 B
        # a row at 1M rows, measured): handed back, a loaded index holds what memory() says.
        del table, access, rows
        pa.default_memory_pool().release_unused()
        return store


def _nullable_time(values: NDArray[np.int64], open_value: int) -> pa.Array:
    n = values.shape[0]
    is_open = values == open_value
    if not is_open.any():
        return pa.Array.from_buffers(TIME_TYPE, n, [None, pa.py_buffer(values)])
    validity = np.packbits(~is_open, bitorder="little")
    return pa.Array.from_buffers(
        TIME_TYPE, n, [pa.py_buffer(validity), pa.py_buffer(values)], null_count=int(is_open.sum())
    )


def check_window(valid_from: NDArray[np.int64], valid_until: NDArray[np.int64]) -> None:
    """ValueError naming the first row whose window ends before it starts (or is empty)."""
    bad = valid_until <= valid_from
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"row {row}: valid_until ({_time.micros_to_datetime(int(valid_until[row]))}) is not after "
            f"valid_from ({_time.micros_to_datetime(int(valid_from[row]))})"
        )


def _int_column(table: Any, name: str, missing: int) -> NDArray[np.int64]:
    """A column of a loaded table as int64, ``missing`` for its nulls."""
    col = table.column(name).combine_chunks().cast(pa.int64())
    return np.asarray(col.fill_null(missing).to_numpy(zero_copy_only=False), dtype=np.int64)
