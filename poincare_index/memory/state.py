"""The rows of a Memory: its configuration, the index (a row is an index id and slot), the memory
ids and texts, and the keyword index; what each logged operation does to them (applied by the
writer's calls and by the log replay alike), compaction's rebuild, and every read of them
(results, tables, masks, time terms). Locking and logging are the caller's (memory.py,
journal.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from .. import _core, _time
from .._core import IndexFormatError
from .._interrupts import deferred_interrupts
from ..filters import compile_filter
from ..geometry import depth as _depth
from ..geometry import distance as _distance
from ..index import PoincareIndex
from ..scoring import ScoringSpec
from .keyword import KeywordIndex
from .opening import Config
from .result import Result
from .rows import Batch, metadata_columns, times_as_datetime64

__all__ = ["MemoryRows"]


class MemoryRows:
    """Row ``r`` of the index is one memory (``mids[r]``, ``texts[r]``; None once deleted);
    ``row_of`` maps a live memory id to its row. ``version`` moves with every structural change,
    ``touches`` with every access counted (what a view's cache keys on)."""

    def __init__(
        self, config: Config, num_threads: int | None, ef_search: int | None, progress: bool
    ) -> None:
        self.config = config
        self.progress = progress  # a bar (tqdm) for compactions
        self.index = PoincareIndex(
            config.embedder.dim, M=config.M, ef_construction=config.ef_construction, seed=0,
            num_threads=num_threads, storage=config.storage,
        )  # fmt: skip
        self.tune_index(ef_search)
        self.mids: list[str | None] = []
        self.texts: list[str | None] = []
        self.row_of: dict[str, int] = {}
        self.keyword = KeywordIndex()  # built on the first keyword or hybrid search
        self.version = 0
        self.touches = 0
        # Rows from here on belong to an add that is not (yet) logged: never read nor touched.
        self.unlogged_from: int | None = None
        self._view_cache: tuple[int, pa.Array, pa.Array] | None = None

    def tune_index(self, ef_search: int | None) -> None:
        self.index.ef_search = ef_search
        # Text embeddings sit at one depth, where a walk with a sparse mask (a window, a session)
        # is slow: on 100k changelog items an exact scan of the allowed rows was faster up to a
        # quarter of the rows (benchmarks/BENCHMARKS.md, "Memory"); hierarchies cross at 5 %.
        self.index.filter_scan_fraction = 0.25
        # A memory's row is its index id and its slot (the log names rows): removed memories
        # leave the graph, and compaction, not slot reuse, bounds the rows.
        self.index.reuse_slots = False

    def take_over(self, other: MemoryRows) -> None:
        """Becomes ``other`` (a freshly opened reader's state of the same store)."""
        old_keyword = self.keyword
        with deferred_interrupts():
            self.config, self.index, self.mids, self.texts = (
                other.config,
                other.index,
                other.mids,
                other.texts,
            )
            self.row_of, self.keyword = other.row_of, other.keyword
            self.version += 1
        old_keyword.close()

    def loaded(
        self, index: PoincareIndex, mids: list[str | None], texts: list[str | None], ef_search: int | None
    ) -> None:
        """The rows of a snapshot just read (its index stores the points as the config says)."""
        if index.storage != self.config.storage:
            raise IndexFormatError(
                f"a snapshot's index has storage {index.storage!r}, but the store's config.json "
                f"says {self.config.storage!r}"
            )
        self.index, self.mids, self.texts = index, mids, texts
        self.tune_index(ef_search)
        self.row_of = {m: r for r, m in enumerate(mids) if m is not None}

    # ---- what each operation does -----------------------------------------------------------
    def row(self, id: Any) -> int:
        """The row of the live memory ``id``; TypeError for a non-str, KeyError when unknown."""
        if not isinstance(id, str):
            raise TypeError(f"id must be a str, got {type(id).__name__}")
        row = self.row_of.get(id)
        if row is None:
            raise KeyError(f"no memory with id {id!r}")
        return row

    def live_rows(self) -> list[int]:
        return [r for r, m in enumerate(self.mids) if m is not None]

    def apply_add(
        self, batch: Batch, vecs: Any, access: Sequence[int] | None = None, progress: bool = False
    ) -> list[int]:
        first = len(self.mids)
        rows = list(range(first, first + len(batch)))
        self.index.add_with_ids(
            vecs, np.asarray(rows, dtype=np.int64), t=batch.t.astype("datetime64[us]"),
            valid_from=times_as_datetime64(batch.valid_from, _time.OPEN_START),
            valid_until=times_as_datetime64(batch.valid_until, _time.OPEN_END),
            metadata=metadata_columns(batch.metadata), progress=progress,
        )  # fmt: skip
        self.mids.extend(batch.ids)
        self.texts.extend(batch.texts)
        for row, mid in zip(rows, batch.ids):
            self.row_of[mid] = row
        if access is not None:
            self.index._columns.set_access(np.asarray(rows, dtype=np.int64), np.asarray(access))
        self.keyword.add(rows, batch.texts)
        self.version += 1
        return rows

    def roll_back_add(self, first: int, ids: Sequence[str], meta_before: pa.Table | None) -> list[int]:
        """Undoes an add that was not acknowledged, from what the state shows, wherever it
        stopped: the rows the index took for it (``first`` up to its slots: whole chunks) become
        deleted rows, as if added and deleted (a row's number is its slot: the index cannot give
        slots back), holding what a replay of their ``void`` record builds (time 0, no metadata:
        ``meta_before``, the metadata before the add, with null rows). Returns those rows: the
        caller logs them as void before the next record, so a reopened store numbers its rows as
        this one does. The ids go first, so no read sees them meanwhile. Idempotent."""
        with self.index._write_lock:  # the index's own cut-off chunk first: its columns
            self.index._settle()  # follow its core before rows are counted
        end = int(self.index._core.slots)
        rows = list(range(first, end))
        for mid in ids:
            if self.row_of.get(mid, -1) >= first:
                del self.row_of[mid]
        self.mids[first:] = [None] * len(rows)
        self.texts[first:] = [None] * len(rows)
        if rows:
            self.index.remove_ids(np.asarray(rows, dtype=np.int64))
            self.index._columns.void_rows(first, meta_before)
        self.keyword.remove(rows)
        self.version += 1
        return rows

    def apply_void(self, rows: list[int]) -> None:
        """Replays rows voided by a rolled-back add (see roll_back_add): deleted rows, which
        hold the origin (the points the writer's index held there never reached the log)."""
        n = len(rows)
        self.index.add_with_ids(
            np.zeros((n, self.config.embedder.dim), dtype=np.float32), np.asarray(rows, dtype=np.int64),
            t=np.zeros(n, dtype="datetime64[us]"),
        )  # fmt: skip
        self.index.remove_ids(np.asarray(rows, dtype=np.int64))
        self.mids.extend([None] * n)
        self.texts.extend([None] * n)
        self.version += 1

    def apply_delete(self, rows: list[int], forget_id: bool = True) -> None:
        self.index.remove_ids(np.asarray(rows, dtype=np.int64))
        for row in rows:
            mid = self.mids[row]
            if forget_id and mid is not None and self.row_of.get(mid) == row:
                del self.row_of[mid]
            self.mids[row] = None
            self.texts[row] = None
        self.keyword.remove(rows)
        self.version += 1

    def row_metadata(self, row: int, batch: Batch) -> pa.Table | None:
        return self.index._columns.metadata_with_row(row, metadata_columns(batch.metadata))

    def apply_set(self, row: int, batch: Batch, metadata: pa.Table | None) -> None:
        self.index._columns.set_row(
            row, int(batch.t[0]), int(batch.valid_from[0]), int(batch.valid_until[0]), metadata
        )
        self.version += 1

    def apply_invalidate(self, row: int, until_us: int) -> None:
        self.index._columns.set_valid_until(row, until_us)

    def apply_touch(self, rows: list[int]) -> None:
        self.index._columns.add_access(np.asarray(rows, dtype=np.int64))
        self.touches += 1

    def valid_from_of(self, row: int) -> int:
        return int(self.index._columns.valid_from_of(np.array([row]))[0])

    # ---- compaction ----------------------------------------------------------------------
    def compaction_due(self, min_rows: int) -> bool:
        """More than half of at least ``min_rows`` rows are deleted memories (O(1))."""
        rows = len(self.mids)
        return rows >= min_rows and len(self.row_of) * 2 < rows

    def compacted(self) -> tuple[PoincareIndex, list[str | None], list[str | None]]:
        """A new index of the live rows only, renumbered from 0 (this state unchanged)."""
        live = self.live_rows()
        cols = self.index._columns
        idx = np.asarray(live, dtype=np.int64)
        fresh = PoincareIndex(
            self.config.embedder.dim, M=self.config.M, ef_construction=self.config.ef_construction,
            seed=0, num_threads=self.index.num_threads, storage=self.config.storage,
        )  # fmt: skip
        fresh.ef_search = self.index.ef_search
        fresh.recall_target = self.index.recall_target
        fresh.filter_scan_fraction = self.index.filter_scan_fraction
        fresh.reuse_slots = self.index.reuse_slots
        if live:
            vecs = np.stack([self.index.reconstruct(r) for r in live])
            meta = cols.metadata.take(pa.array(idx)) if cols.metadata is not None else None
            fresh.add_with_ids(
                vecs, np.arange(len(live), dtype=np.int64), t=cols._t[idx].astype("datetime64[us]"),
                valid_from=times_as_datetime64(cols.valid_from_of(idx), _time.OPEN_START),
                valid_until=times_as_datetime64(cols.valid_until_of(idx), _time.OPEN_END),
                metadata=meta, progress=self.progress,
            )  # fmt: skip
            fresh._columns.set_access(np.arange(len(live), dtype=np.int64), cols.access_counts(idx))
        return fresh, [self.mids[r] for r in live], [self.texts[r] for r in live]

    def adopt_compacted(self, index: PoincareIndex, mids: list[str | None], texts: list[str | None]) -> None:
        """Switches to the compacted rows, every part at once (what can fail is built first)."""
        row_of = {m: r for r, m in enumerate(mids) if m is not None}
        keyword = KeywordIndex()  # rows renumbered: rebuilt on the next keyword search
        version = self.version + 1
        with deferred_interrupts():
            old_keyword = self.keyword
            self.index, self.mids, self.texts, self.row_of = index, mids, texts, row_of
            self.keyword, self.version = keyword, version
        old_keyword.close()

    # ---- reads -----------------------------------------------------------------------------
    def has_column(self, name: str) -> bool:
        """Whether some memory was added with the metadata key ``name``."""
        if not isinstance(name, str):
            raise TypeError(f"a metadata key is a str, got {type(name).__name__}")
        meta = self.index._columns.metadata
        return meta is not None and name in meta.column_names

    def vectors(self, ids: Sequence[str]) -> NDArray[np.float32]:
        rows = [self.row(i) for i in ids]
        if not rows:
            return np.zeros((0, self.config.embedder.dim), dtype=np.float32)
        return self.index.reconstruct_batch(rows)

    def _view_arrays(self) -> tuple[pa.Array, pa.Array]:
        cached = self._view_cache
        if cached is None or cached[0] != self.version:
            cached = (self.version, pa.array(self.mids, pa.string()), pa.array(self.texts, pa.string()))
            self._view_cache = cached
        return cached[1], cached[2]

    def view(self) -> pa.Table:
        """The index's columns with the memory id and text: one row per index row."""
        table = self.index.columns
        mids, texts = self._view_arrays()
        return table.set_column(0, "id", mids).add_column(1, "text", texts)

    def table(self, rows: list[int]) -> pa.Table:
        return self.view().take(pa.array(rows, pa.int64()))

    def live_table(self, vectors: bool = False) -> pa.Table:
        """The live rows' table (as table()); ``vectors``: with a ``vector`` column of their stored
        points (fixed-size lists of float32)."""
        rows = self.live_rows()
        table = self.table(rows)
        if vectors:
            dim = self.config.embedder.dim
            points = self.index.reconstruct_batch(rows) if rows else np.zeros((0, dim), dtype=np.float32)
            flat = pa.array(np.ascontiguousarray(points, dtype=np.float32).reshape(-1))
            table = table.append_column("vector", pa.FixedSizeListArray.from_arrays(flat, dim))
        return table

    def table_in_chunks(self, rows: list[int], chunk_rows: int = 8192) -> pa.Table:
        """The rows' table (as table()) built a chunk at a time from the rows' own ids and texts,
        not from a view of the whole store: converting a million Python strings to Arrow holds
        the interpreter for ~0.3 s, and a search thread waits on it (a retention run's archive)."""
        columns = self.index.columns
        parts = []
        for start in range(0, len(rows), chunk_rows):
            chunk = rows[start : start + chunk_rows]
            part = columns.take(pa.array(chunk, pa.int64()))
            ids = pa.array([self.mids[r] for r in chunk], pa.string())
            texts = pa.array([self.texts[r] for r in chunk], pa.string())
            parts.append(part.set_column(0, "id", ids).add_column(1, "text", texts))
        if not parts:
            return self.table([])
        return pa.concat_tables(parts)

    def mask(
        self, filters: Mapping[str, Any] | None, window: tuple[int, int] | None
    ) -> NDArray[np.bool_] | None:
        """Rows allowed by a filter dict and a window of t, [first, last] microseconds (None: no
        restriction)."""
        mask = None
        if filters is not None:
            mask = compile_filter(dict(filters), self.view())
        if window is not None:
            n = len(self.mids)
            t = self.index._columns._t[:n]
            in_window = (t >= window[0]) & (t <= window[1])
            mask = in_window if mask is None else mask & in_window
        return mask

    def matching_rows(self, filters: Any, limit: int | None) -> list[int]:
        """Live rows matching a filter dict or a callable on Result (None: all), in row order."""
        if filters is None or isinstance(filters, Mapping):
            mask = self.mask(filters, None)
            live = np.array([m is not None for m in self.mids], dtype=bool)
            rows = np.flatnonzero(live if mask is None else live & mask).tolist()
            return rows[:limit] if limit is not None else rows
        if not callable(filters):
            raise TypeError(f"filters must be a dict or a callable on Result, got {type(filters).__name__}")
        out = []
        for row, mid in enumerate(self.mids):
            if mid is not None and filters(self.results([row])[0]):
                out.append(row)
                if limit is not None and len(out) >= limit:
                    break
        return out

    def results(
        self, rows: list[int], scored: Sequence[dict[str, Any]] | None = None, spec: Any = None
    ) -> list[Result]:
        """Results for rows; ``scored`` gives each one's score fields (NaN when absent), computed
        with ``spec``'s depth_bias and time_coef (a ScoringSpec; default the store's)."""
        spec = spec or self.config
        hidden = self.unlogged_from
        if hidden is not None or any(self.mids[r] is None for r in rows):
            # Only after a roll-back that was cut off itself (a search that waited for the lock
            # meanwhile): rows of an add that was not logged are no memories, never returned
            # nor touched.
            keep = [
                i for i, r in enumerate(rows) if self.mids[r] is not None and (hidden is None or r < hidden)
            ]
            rows = [rows[i] for i in keep]
            scored = [scored[i] for i in keep] if scored is not None else None
        if not rows:
            return []
        cols = self.index._columns
        meta_table = cols.metadata
        metas = (
            meta_table.take(pa.array(rows, pa.int64())).to_pylist()
            if meta_table is not None
            else [{} for _ in rows]
        )
        at = np.asarray(rows, dtype=np.int64)
        counts = cols.access_counts(at).tolist()
        # Python ints in one step per column (a numpy scalar per row and field cost more).
        ts, vfs, vus = cols._t[at].tolist(), cols.valid_from_of(at).tolist(), cols.valid_until_of(at).tolist()
        out = []
        for i, row in enumerate(rows):
            vf, vu = vfs[i], vus[i]
            fields = dict(
                id=self.mids[row], text=self.texts[row],
                t=_time.micros_to_datetime(ts[i]),
                valid_from=None if vf == _time.OPEN_START else _time.micros_to_datetime(vf),
                valid_until=None if vu == _time.OPEN_END else _time.micros_to_datetime(vu),
                access_count=counts[i],
                metadata={k: v for k, v in metas[i].items() if v is not None},
                depth_bias=spec.depth_bias, time_coef=spec.time_coef,
            )  # fmt: skip
            extra = scored[i] if scored is not None else {}
            for name in ("score", "distance", "depth", "time_weight"):
                fields[name] = extra.get(name, math.nan)
            for name in ("mode", "relevance", "vector_rank", "keyword_rank"):
                if name in extra:
                    fields[name] = extra[name]
            out.append(Result(**fields))
        return out

    def exact_terms(self, rows: list[int], query_vec: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any]]:
        """float64 (distance to the query, depth) of rows, for keyword/hybrid results."""
        pts = self.index.reconstruct_batch(rows).astype(np.float64)
        return _distance(query_vec.astype(np.float64), pts), _depth(pts)

    def log_weights(self, rows: Any, spec: ScoringSpec) -> NDArray[np.float64]:
        """log time weight of ``rows`` (a list or an int array) by ``spec``'s decay at its time:
        the index's own evaluation of the policy (the C++ program search_scored runs, tested
        against the numpy reference in tests/test_decay.py), on the stored microseconds. No
        decay still weighs rows stamped after the query time ``future_weight``."""
        if len(rows) == 0:
            return np.zeros(0)
        idx = np.ascontiguousarray(rows, dtype=np.int64)
        with self.index._columns.buffers() as time_columns:
            return _core.decay_log_weights_of_rows(spec.core(), time_columns, idx)  # type: ignore[no-any-return]

    def ranked_with_time(
        self, rows: NDArray[np.int64], relevance: NDArray[np.float64], spec: ScoringSpec, k: int
    ) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """(keys, top): keys = relevance + time_coef x log time weight of each row (the same
        program as :meth:`log_weights`), top the positions of the ``k`` best keys, best first,
        ties by row; one pass in the core over every row (all keyword matches)."""
        with self.index._columns.buffers() as time_columns:
            return _core.rank_with_time_term(  # type: ignore[no-any-return]
                spec.core(), time_columns, np.ascontiguousarray(rows, dtype=np.int64),
                np.ascontiguousarray(relevance, dtype=np.float64), int(k),
            )  # fmt: skip

    def keyword_matches(self, query: str, build_lock: Any) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(rows ascending, BM25) of the live rows matching ``query``; builds the keyword index on
        first use and starts a background merge when its delta is due (under ``build_lock``, the
        writer's log lock: one list of live rows)."""
        kw = self.keyword
        if not kw.built or kw.merge_due():
            with build_lock:
                if not kw.built or kw.merge_due():
                    live = self.live_rows()
                    texts = [self.texts[r] or "" for r in live]
                    (kw.merge if kw.built else kw.build)(live, texts)
        return kw.matches(query)
