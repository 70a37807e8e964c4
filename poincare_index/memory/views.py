"""Read-side helpers of Memory: the columns as a table with ids and texts, masks from filter
dicts and windows, Result objects for rows, exact terms for keyword/hybrid results."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from .. import _core, _time
from ..filters import compile_filter
from ..geometry import depth as _depth
from ..geometry import distance as _distance
from ..scoring import ScoringSpec
from .result import Result

__all__ = ["MemoryViews"]


class MemoryViews:
    """Mixed into Memory; uses its _index, _mids, _texts, _config, _version, _keyword."""

    _index: Any
    _mids: list[str | None]
    _texts: list[str | None]
    _config: Any
    _version: int
    _view_cache: Any
    _keyword: Any
    _log_lock: Any

    def vectors(self, ids: Sequence[str]) -> NDArray[np.float32]:
        """The stored points (ball coordinates, float32) of the memories ``ids``, (len(ids),
        dim), in that order, read at one moment; KeyError naming the first unknown id."""
        if isinstance(ids, str):
            raise TypeError("ids must be a sequence of str; use vectors([id]) for one")
        self.refresh()  # type: ignore[attr-defined]
        with self._lock.reading():  # type: ignore[attr-defined]
            rows = [self._row(i) for i in ids]  # type: ignore[attr-defined]
            if not rows:
                return np.zeros((0, self._config.embedder.dim), dtype=np.float32)
            return self._index.reconstruct_batch(rows)  # type: ignore[no-any-return]

    def _has_column(self, name: str) -> bool:
        meta = self._index._columns.metadata
        return meta is not None and name in meta.column_names

    def _view_arrays(self) -> tuple[pa.Array, pa.Array]:
        cached = self._view_cache
        if cached is None or cached[0] != self._version:
            cached = (self._version, pa.array(self._mids, pa.string()), pa.array(self._texts, pa.string()))
            self._view_cache = cached
        return cached[1], cached[2]

    def _view(self) -> pa.Table:
        """The index's columns with the memory id and text: one row per index row."""
        table = self._index.columns
        mids, texts = self._view_arrays()
        return table.set_column(0, "id", mids).add_column(1, "text", texts)

    def _table(self, rows: list[int]) -> pa.Table:
        return self._view().take(pa.array(rows, pa.int64()))

    def _table_in_chunks(self, rows: list[int], chunk_rows: int = 8192) -> pa.Table:
        """The rows' table (as _table) built a chunk at a time from the rows' own ids and texts,
        not from a view of the whole store: converting a million Python strings to Arrow holds
        the interpreter for ~0.3 s, and a search thread waits on it (a retention run's archive)."""
        columns = self._index.columns
        parts = []
        for start in range(0, len(rows), chunk_rows):
            chunk = rows[start : start + chunk_rows]
            part = columns.take(pa.array(chunk, pa.int64()))
            ids = pa.array([self._mids[r] for r in chunk], pa.string())
            texts = pa.array([self._texts[r] for r in chunk], pa.string())
            parts.append(part.set_column(0, "id", ids).add_column(1, "text", texts))
        if not parts:
            return self._table([])
        return pa.concat_tables(parts)

    def _mask(self, filters: Mapping[str, Any] | None, window_start: int | None) -> NDArray[np.bool_] | None:
        """Rows allowed by a filter dict and a window start (None: no restriction)."""
        mask = None
        if filters is not None:
            mask = compile_filter(dict(filters), self._view())
        if window_start is not None:
            n = len(self._mids)
            in_window = self._index._columns._t[:n] >= window_start
            mask = in_window if mask is None else mask & in_window
        return mask

    def _matching_rows(self, filters: Any, limit: int | None) -> list[int]:
        if filters is None or isinstance(filters, Mapping):
            mask = self._mask(filters, None)
            live = np.array([m is not None for m in self._mids], dtype=bool)
            rows = np.flatnonzero(live if mask is None else live & mask).tolist()
            return rows[:limit] if limit is not None else rows
        if not callable(filters):
            raise TypeError(f"filters must be a dict or a callable on Result, got {type(filters).__name__}")
        out = []
        for row, mid in enumerate(self._mids):
            if mid is not None and filters(self._result_rows([row])[0]):
                out.append(row)
                if limit is not None and len(out) >= limit:
                    break
        return out

    def _result_rows(
        self, rows: list[int], scored: Sequence[dict[str, Any]] | None = None, config: Any = None
    ) -> list[Result]:
        """Results for rows; ``scored`` gives each one's score fields (NaN when absent), computed
        with ``config``'s depth_bias and time_coef (a ScoringSpec; default the store's)."""
        config = config or self._config
        hidden = self._unlogged_from
        if hidden is not None or any(self._mids[r] is None for r in rows):
            # Only after a roll-back that was cut off itself (a search that waited for the lock
            # meanwhile): rows of an add that was not logged are no memories, never returned
            # nor touched.
            keep = [
                i for i, r in enumerate(rows) if self._mids[r] is not None and (hidden is None or r < hidden)
            ]
            rows = [rows[i] for i in keep]
            scored = [scored[i] for i in keep] if scored is not None else None
        if not rows:
            return []
        cols = self._index._columns
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
                id=self._mids[row], text=self._texts[row],
                t=_time.micros_to_datetime(ts[i]),
                valid_from=None if vf == _time.OPEN_START else _time.micros_to_datetime(vf),
                valid_until=None if vu == _time.OPEN_END else _time.micros_to_datetime(vu),
                access_count=counts[i],
                metadata={k: v for k, v in metas[i].items() if v is not None},
                depth_bias=config.depth_bias, time_coef=config.time_coef,
            )  # fmt: skip
            extra = scored[i] if scored is not None else {}
            for name in ("score", "distance", "depth", "time_weight"):
                fields[name] = extra.get(name, math.nan)
            for name in ("mode", "relevance", "vector_rank", "keyword_rank"):
                if name in extra:
                    fields[name] = extra[name]
            out.append(Result(**fields))
        return out

    def _exact_terms(self, rows: list[int], query_vec: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any]]:
        """float64 (distance to the query, depth) of rows, for keyword/hybrid results."""
        pts = self._index.reconstruct_batch(rows).astype(np.float64)
        return _distance(query_vec.astype(np.float64), pts), _depth(pts)

    def _log_weights(self, rows: Any, spec: ScoringSpec) -> NDArray[np.float64]:
        """log time weight of ``rows`` (a list or an int array) by ``spec``'s decay at its time:
        the index's own evaluation of the policy (the C++ program search_scored runs, tested
        against the numpy reference in tests/test_decay.py), on the stored microseconds. No
        decay still weighs rows stamped after the query time ``future_weight``."""
        if len(rows) == 0:
            return np.zeros(0)
        idx = np.ascontiguousarray(rows, dtype=np.int64)
        with self._index._columns.buffers() as time_columns:
            return _core.decay_log_weights_of_rows(spec.core(), time_columns, idx)  # type: ignore[no-any-return]

    def _ranked_with_time(
        self, rows: NDArray[np.int64], relevance: NDArray[np.float64], spec: ScoringSpec, k: int
    ) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """(keys, top): keys = relevance + time_coef x log time weight of each row (the same
        program as :meth:`_log_weights`), top the positions of the ``k`` best keys, best first,
        ties by row; one pass in the core over every row (all keyword matches)."""
        with self._index._columns.buffers() as time_columns:
            return _core.rank_with_time_term(  # type: ignore[no-any-return]
                spec.core(), time_columns, np.ascontiguousarray(rows, dtype=np.int64),
                np.ascontiguousarray(relevance, dtype=np.float64), int(k),
            )  # fmt: skip

    def _keyword_matches(self, query: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(rows ascending, BM25) of the live rows matching ``query``; builds the keyword index on
        first use and starts a background merge when its delta is due (under the writer's lock:
        one list of live rows)."""
        kw = self._keyword
        if not kw.built or kw.merge_due():
            with self._log_lock:
                if not kw.built or kw.merge_due():
                    live = [r for r, m in enumerate(self._mids) if m is not None]
                    texts = [self._texts[r] or "" for r in live]
                    (kw.merge if kw.built else kw.build)(live, texts)
        return kw.matches(query)
