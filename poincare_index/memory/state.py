"""The in-memory state changes of a Memory: what each logged operation does to the index, the
ids, the texts and the keyword index (applied by the writer's calls and by the log replay), and
compaction."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .. import _time
from .._interrupts import deferred_interrupts
from ..index import PoincareIndex
from .keyword import KeywordIndex
from .result import Result
from .rows import Batch, metadata_columns, times_as_datetime64

__all__ = ["MemoryState"]


class MemoryState:
    """Mixed into Memory; uses its _index, _mids, _texts, _row_of, _keyword, _config, _ns and
    the journal's logging and snapshot methods."""

    _index: Any
    _mids: list[str | None]
    _texts: list[str | None]
    _row_of: dict[str, int]
    _keyword: Any
    _config: Any
    _ns: Any
    _version: int
    _touches: int
    _log_lock: Any
    _compact_min_rows: int
    _progress: bool
    _unlogged_voids: list[int]
    _retaining: bool
    _epoch: int

    def _apply_add(
        self, batch: Batch, vecs: Any, access: Sequence[int] | None = None, progress: bool = False
    ) -> list[int]:
        first = len(self._mids)
        rows = list(range(first, first + len(batch)))
        self._index.add_with_ids(
            vecs, np.asarray(rows, dtype=np.int64), t=batch.t.astype("datetime64[us]"),
            valid_from=times_as_datetime64(batch.valid_from, _time.OPEN_START),
            valid_until=times_as_datetime64(batch.valid_until, _time.OPEN_END),
            metadata=metadata_columns(batch.metadata), progress=progress,
        )  # fmt: skip
        self._mids.extend(batch.ids)
        self._texts.extend(batch.texts)
        for row, mid in zip(rows, batch.ids):
            self._row_of[mid] = row
        if access is not None:
            self._index._columns.set_access(np.asarray(rows, dtype=np.int64), np.asarray(access))
        self._keyword.add(rows, batch.texts)
        self._version += 1
        return rows

    def _roll_back_add(self, first: int, ids: Sequence[str], meta_before: pa.Table | None) -> None:
        """Undoes an add that was not acknowledged, from what the state shows, wherever it
        stopped: the rows the index took for it (``first`` up to its slots: whole chunks) become
        deleted rows, as if added and deleted (a row's number is its slot: the index cannot give
        slots back), holding what a replay of their ``void`` record builds (time 0, no metadata:
        ``meta_before``, the metadata before the add, with null rows). They are logged as void
        before the next record (``_unlogged_voids``), so a reopened store numbers its rows as
        this one does. The ids go first, so no read sees them meanwhile. Idempotent."""
        with self._index._write_lock:  # the index's own cut-off chunk first: its columns
            self._index._settle()  # follow its core before rows are counted
        end = int(self._index._core.slots)
        rows = list(range(first, end))
        for mid in ids:
            if self._row_of.get(mid, -1) >= first:
                del self._row_of[mid]
        self._mids[first:] = [None] * len(rows)
        self._texts[first:] = [None] * len(rows)
        if rows:
            self._index.remove_ids(np.asarray(rows, dtype=np.int64))
            self._index._columns.void_rows(first, meta_before)
        self._keyword.remove(rows)
        if self._ns is not None:
            with self._log_lock:  # a search's touch may be logging (and flushing voids)
                self._unlogged_voids = sorted(set(self._unlogged_voids).union(rows))
        self._version += 1

    def _apply_void(self, rows: list[int]) -> None:
        """Replays rows voided by a rolled-back add (see _roll_back_add): deleted rows, which
        hold the origin (the points the writer's index held there never reached the log)."""
        n = len(rows)
        self._index.add_with_ids(
            np.zeros((n, self._config.embedder.dim), dtype=np.float32), np.asarray(rows, dtype=np.int64),
            t=np.zeros(n, dtype="datetime64[us]"),
        )  # fmt: skip
        self._index.remove_ids(np.asarray(rows, dtype=np.int64))
        self._mids.extend([None] * n)
        self._texts.extend([None] * n)
        self._version += 1

    def _apply_delete(self, rows: list[int], forget_id: bool = True) -> None:
        self._index.remove_ids(np.asarray(rows, dtype=np.int64))
        for row in rows:
            mid = self._mids[row]
            if forget_id and mid is not None and self._row_of.get(mid) == row:
                del self._row_of[mid]
            self._mids[row] = None
            self._texts[row] = None
        self._keyword.remove(rows)
        self._version += 1

    def _row_metadata(self, row: int, batch: Batch) -> pa.Table | None:
        return self._index._columns.metadata_with_row(row, metadata_columns(batch.metadata))

    def _apply_set(self, row: int, batch: Batch, metadata: pa.Table | None) -> None:
        self._index._columns.set_row(
            row, int(batch.t[0]), int(batch.valid_from[0]), int(batch.valid_until[0]), metadata
        )
        self._version += 1

    def _apply_invalidate(self, row: int, until_us: int) -> None:
        self._index._columns.set_valid_until(row, until_us)

    def _apply_touch(self, rows: list[int]) -> None:
        self._index._columns.add_access(np.asarray(rows, dtype=np.int64))
        self._touches += 1

    def _touch(self, results: list[Result]) -> list[Result]:
        rows = [self._row_of[r.id] for r in results]
        with self._log_lock, deferred_interrupts():  # logged and counted, or neither
            self._log_locked({"op": "touch", "rows": rows})
            self._apply_touch(rows)
            access = self._index._columns.access_counts(np.asarray(rows, dtype=np.int64))
        # The results were built by this call and nobody holds them yet: their counts are set in
        # place (a dataclasses.replace per result cost ~0.25 ms of a 10-result search).
        for r, c in zip(results, access.tolist()):
            object.__setattr__(r, "access_count", c)
        return results

    def _maybe_compact(self) -> None:
        """When more than half of a large store's rows are deleted memories, rebuild the index
        from the live rows (deleted rows keep their slots in the graph otherwise). A persistent
        store writes the compacted snapshot first and switches to it only once that succeeded,
        so the log after it always speaks of the rows on disk."""
        rows = len(self._mids)
        if rows < self._compact_min_rows or len(self._row_of) * 2 >= rows:  # O(1) per write
            return
        if self._retaining:  # a retention run names rows between its deletes: not renumbered
            return
        live = [r for r, m in enumerate(self._mids) if m is not None]
        index, mids, texts = self._compacted(live)
        if self._ns is not None:
            with self._log_lock:
                epoch = self._epoch
                try:
                    self._write_snapshot_and_rotate(index, mids, texts, renumbered=True)
                except BaseException as exc:
                    # Decided by the state: once CURRENT names the compacted snapshot (the epoch
                    # moved), the log follows its rows and so must this Memory.
                    switched = self._epoch != epoch
                    if switched:
                        self._adopt_compacted(index, mids, texts)
                    if not isinstance(exc, Exception):
                        raise
                    what = "compacted, but cleaning up after it failed" if switched else "compaction skipped"
                    warnings.warn(
                        f"memory store {self._ns.dir}: {what} ({exc})", RuntimeWarning, stacklevel=3
                    )
                    return
        self._adopt_compacted(index, mids, texts)

    def _adopt_compacted(self, index: PoincareIndex, mids: list[str | None], texts: list[str | None]) -> None:
        """Switches to the compacted rows, every part at once (what can fail is built first)."""
        row_of = {m: r for r, m in enumerate(mids) if m is not None}
        keyword = KeywordIndex()  # rows renumbered: rebuilt on the next keyword search
        version = self._version + 1
        with deferred_interrupts():
            old_keyword = self._keyword
            self._index, self._mids, self._texts, self._row_of = index, mids, texts, row_of
            self._keyword, self._version = keyword, version
        old_keyword.close()

    def _compacted(self, live: list[int]) -> tuple[PoincareIndex, list[str | None], list[str | None]]:
        cols = self._index._columns
        idx = np.asarray(live, dtype=np.int64)
        fresh = PoincareIndex(
            self._config.embedder.dim, M=self._config.M, ef_construction=self._config.ef_construction,
            seed=0, num_threads=self._index.num_threads,
        )  # fmt: skip
        fresh.ef_search = self._index.ef_search
        fresh.filter_scan_fraction = self._index.filter_scan_fraction
        fresh.reuse_slots = self._index.reuse_slots
        if live:
            vecs = np.stack([self._index.reconstruct(r) for r in live])
            meta = cols.metadata.take(pa.array(idx)) if cols.metadata is not None else None
            fresh.add_with_ids(
                vecs, np.arange(len(live), dtype=np.int64), t=cols._t[idx].astype("datetime64[us]"),
                valid_from=times_as_datetime64(cols.valid_from_of(idx), _time.OPEN_START),
                valid_until=times_as_datetime64(cols.valid_until_of(idx), _time.OPEN_END),
                metadata=meta, progress=self._progress,
            )  # fmt: skip
            fresh._columns.set_access(np.arange(len(live), dtype=np.int64), cols.access_counts(idx))
        return fresh, [self._mids[r] for r in live], [self._texts[r] for r in live]

    def _tune_index(self, ef_search: int) -> None:
        self._index.ef_search = ef_search
        # Text embeddings sit at one depth, where a walk with a sparse mask (a window, a session)
        # is slow: on 100k changelog items an exact scan of the allowed rows was faster up to a
        # quarter of the rows (benchmarks/BENCHMARKS.md, "Memory"); hierarchies cross at 5 %.
        self._index.filter_scan_fraction = 0.25
        # A memory's row is its index id and its slot (the log names rows): removed memories
        # leave the graph, and compaction, not slot reuse, bounds the rows.
        self._index.reuse_slots = False
