"""What both index kinds share: ids, the per-point columns, adds and removals that all-or-nothing
commit, the scored search, reconstruction and files (the FAISS-style surface is faiss_surface.py)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, ClassVar, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _time
from ._closing import Released, refuse_when_closed
from ._core import IndexFormatError
from ._index_files import PathLike, read_index, write_index
from ._interrupts import InconsistentStateError, deferred_interrupts, fault_point
from ._metadata import metadata_table
from ._progress import progress_bar
from ._sources import iter_chunks, source_rows
from ._validation import (
    MAX_RESULT_ENTRIES,
    as_id,
    as_ids,
    as_matrix,
    as_num_threads,
    as_positive_int,
    check_result_size,
)
from .columns import ColumnStore, check_window
from .decay import DEFAULT_FUTURE_TOLERANCE, DEFAULT_FUTURE_WEIGHT, DecayPolicy
from .faiss_surface import FaissSurface
from .recall import Beam
from .scored import ScoredResults, run_scored
from .scoring import ScoringSpec

__all__ = ["IndexBase", "as_dim"]

_FLOAT32 = np.dtype(np.float32)
_T = TypeVar("_T", bound="IndexBase")
# A filtered plain search is a scored one that ranks by distance alone: no decay, no time term,
# every point weighing 1 whenever stamped (so the query time is never read).
_DISTANCE_ONLY = ScoringSpec(0, decay=None, depth_bias=0.0, time_coef=0.0, future_weight=1.0)


def as_dim(value: Any) -> int:
    return as_positive_int(value, "dim")


@refuse_when_closed("index")
class IndexBase(FaissSurface):
    """What both indexes share. Ids are int64; ``add`` assigns ntotal, ntotal+1, ... as FAISS does.

    :meth:`close` (or leaving a ``with`` block) lets go of the core and the columns; every call
    after it raises ClosedError (a ValueError), the index kinds included (see _closing.py)."""

    kind: ClassVar[str]
    # How the index kind searches, decided by the class: by an exact scan of the eligible points
    # (flat), or by a graph walk that a scored search may also cut short by time buckets (HNSW).
    _exact_scan: ClassVar[bool]
    _prunes_by_time: ClassVar[bool]
    # Rows per call into the core during add: between chunks Python gets the chance to raise
    # KeyboardInterrupt, so Ctrl-C during a long add is honoured within a fraction of a second.
    _add_chunk: ClassVar[int]

    _core: Any
    # Filters allowing at most this fraction of the rows are answered by an exact scan of the
    # allowed rows instead of a graph walk (see BENCHMARKS.md, filtered search).
    filter_scan_fraction: float = 0.05
    # search_scored's time pass scans at most this many rows per query (the recent buckets that
    # can still beat the k-th score when time dominates); beyond it the graph walk's result stands.
    time_scan_rows: int = 8192
    # Removed points' slots are reused by later adds (once they have left the graph), so an
    # index under add/remove churn keeps its size. False: new points always get new slots, so
    # ids given as 0, 1, 2, ... stay equal to their rows in :attr:`columns` (the graph is
    # repaired around removed points either way).
    reuse_slots: bool = True

    def __init__(self) -> None:
        # Adds and removals from several Python threads run one at a time (the core would
        # serialise them anyway); searches do not take this lock.
        self._write_lock = threading.RLock()
        self._columns = ColumnStore()
        # The undo of an add chunk that was cut off and not yet settled (see _settle).
        self._unsettled: tuple[Any, Any, Any] | None = None
        self._closed = False
        # Points added or removed since construction or load (a recall table measured at a
        # smaller count is stale once enough changed).
        self._changes = 0

    def close(self) -> None:
        """Lets go of what the index holds: the core (its vectors, graph and thread pool, and
        the mapped files of ``load(mmap=True)``) and the columns. Waits for a running add,
        removal or save (they hold the write lock); a search running meanwhile finishes on the
        core it started with, which is freed when it returns, and a search that starts after
        raises ClosedError, as every later call does. Idempotent. Unsaved points are gone."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            gone = Released(f"{type(self).__name__}: this index was closed during the call")
            self._core, self._columns, self._unsettled = gone, gone, None

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- properties ---------------------------------------------------------------------
    @property
    def dim(self) -> int:
        """Dimension of the vectors."""
        return int(self._core.dim)

    @property
    def curvature(self) -> float:
        """Curvature c > 0 of the ball c|x|^2 < 1."""
        return float(self._core.curvature)

    def memory_usage(self) -> dict[str, int]:
        """Bytes this index holds, by structure: the core's arrays (vectors, factors, ids, flags,
        the id map, and for HNSW the link lists, levels and repair bookkeeping) and the per-point
        columns, each at its allocated capacity, so the values add up to what the index costs
        (the layout per point is in docs/how-it-works.md, "Memory per vector")."""
        out = {str(k): int(v) for k, v in self._core.memory().items()}
        out.update(self._columns.memory())
        return out

    @property
    def mapped(self) -> bool:
        """Whether the vectors (and the graph's level-0 lists) are still read from the saved
        files (``load(mmap=True)``) rather than held in memory."""
        return bool(self._core.mapped)

    @property
    def verified(self) -> bool:
        """False only after ``load(mmap=True, verify=False)`` until :meth:`verify` has run."""
        return bool(self._core.verified)

    def verify(self) -> None:
        """Checks every byte a fast open left unchecked: each 1 MiB block against its checksum,
        then what a full load checks (points inside the ball, the stored rank factors, every
        graph link). Raises IndexFormatError naming the file and the first problem; a no-op on
        an index that is verified. The first write to an unverified index runs it."""
        self._core.verify()

    @property
    def ntotal(self) -> int:
        """Number of vectors in the index (removed ones not counted)."""
        return int(self._core.ntotal)

    def __len__(self) -> int:
        return self.ntotal

    @property
    def num_threads(self) -> int:
        """Threads used by batch add and search (default: all cores available to the process)."""
        return int(self._core.num_threads)

    @num_threads.setter
    def num_threads(self, value: int) -> None:
        self._core.num_threads = as_num_threads(value)

    def __contains__(self, id: object) -> bool:
        try:
            return bool(self._core.contains(as_id(id)))
        except (TypeError, KeyError):
            return False

    # ---- writes -------------------------------------------------------------------------
    def add(
        self,
        x: ArrayLike,
        *,
        t: Any = None,
        valid_from: Any = None,
        valid_until: Any = None,
        metadata: Any = None,
        progress: bool = False,
    ) -> None:
        """Add vectors (n, dim); they get ids ``next_id .. next_id + n - 1``.

        ``next_id`` is ``ntotal`` (FAISS's rule) unless ids at or above it are already taken
        (after ``add_with_ids`` or ``remove_ids``), in which case it is one past the largest id
        ever stored. Rows must be finite and inside the ball (c|x|^2 < 1 - 1e-7 after the
        float32 cast); on error nothing is added. The keyword columns are as in
        :meth:`add_with_ids`.
        """
        arr = as_matrix(x, self.dim, "x")
        with self._write_lock:
            start = int(self._core.next_auto_id)
            top = int(np.iinfo(np.int64).max)
            # The core's next id saturates at 2**63 - 1: if that id is held, the space is used up.
            largest = top if start == top and start in self else start - 1
            if largest + arr.shape[0] > top:
                raise ValueError(
                    f"the automatic ids are exhausted: {arr.shape[0]} more would pass 2**63 - 1 (the "
                    f"largest id ever stored is {largest}); give ids with add_with_ids"
                )
            ids = np.arange(start, start + arr.shape[0], dtype=np.int64)
            self._add(arr, ids, t, valid_from, valid_until, metadata, progress)

    def add_with_ids(
        self,
        x: ArrayLike,
        ids: ArrayLike,
        t: Any = None,
        valid_from: Any = None,
        valid_until: Any = None,
        metadata: Any = None,
        progress: bool = False,
    ) -> None:
        """Add vectors (n, dim) with int64 ids (unique, not already in the index, not -1).

        ``t``: each point's time (numpy datetime64, a pyarrow timestamp array, or datetimes;
        aware ones are converted to UTC, naive ones are local time as ``datetime.timestamp()``
        reads them; numpy datetime64 is UTC; one value is broadcast); default
        now. ``valid_from``/``valid_until``: the window in which the point holds (None/NaT: an
        open end); valid_until must be after valid_from. ``metadata``: a dict of columns or a
        pyarrow Table with one row per point. All of it lands in :attr:`columns`.
        ``progress=True`` shows a progress bar (tqdm) while the graph is built.
        """
        arr = as_matrix(x, self.dim, "x")
        id_arr = as_ids(ids)
        if id_arr.shape[0] != arr.shape[0]:
            raise ValueError(f"x has {arr.shape[0]} rows but ids has {id_arr.shape[0]} entries")
        with self._write_lock:
            self._add(arr, id_arr, t, valid_from, valid_until, metadata, progress)

    def add_from(
        self,
        source: Any,
        *,
        chunk_rows: int = 65_536,
        vector_column: str = "vector",
        id_column: str | None = None,
        time_column: str | None = None,
        t: Any = None,
        progress: bool = False,
    ) -> int:
        """Add the rows of a source too large to load: a 2-D array (a ``numpy.memmap`` too), or
        the path of a ``.npy`` file (memory-mapped) or a Parquet file (a list-of-float
        ``vector_column``, optional int64 ``id_column`` and timestamp ``time_column``). Reads
        ``chunk_rows`` rows at a time, so memory grows by the index's own growth plus one chunk;
        the pages of a read-only memmap are let go once copied. Returns the number of rows added.

        Each chunk is one :meth:`add` (or :meth:`add_with_ids` with an id column) and is
        validated as a whole; a chunk that fails raises, naming its rows, and the chunks before
        it stay added (as after a KeyboardInterrupt: a prefix of the source, ``ntotal`` grows by
        the returned count's worth). ``t`` (one time for every row; default: the time of the
        call) applies when there is no ``time_column``.
        """
        rows = as_positive_int(chunk_rows, "chunk_rows")
        if t is not None and time_column is not None:
            raise ValueError("give either t or time_column, not both")
        if t is None and time_column is None:  # one moment for the whole call, as one add
            t = np.datetime64(_time.now_micros(), "us")
        added = 0
        total = source_rows(source)
        chunks = iter_chunks(
            source,
            self.dim,
            rows,
            vector_column=vector_column,
            id_column=id_column,
            time_column=time_column,
        )
        with progress_bar(progress, total, "add_from") as bar:
            for chunk in chunks:
                when = chunk.t if chunk.t is not None else t
                try:
                    if chunk.ids is None:
                        self.add(chunk.x, t=when)
                    else:
                        self.add_with_ids(chunk.x, chunk.ids, t=when)
                except (ValueError, TypeError, KeyError) as exc:
                    end = chunk.start + len(chunk.x) - 1
                    msg = f"add_from: rows {chunk.start}..{end} of the source ({added} added before): {exc}"
                    raise type(exc)(msg) from exc
                added += len(chunk.x)
                bar.update(len(chunk.x))
                if added == len(chunk.x) and total and total > added:
                    # Allocate once for the rest of the source (growing per chunk leaves up to
                    # 1.5x slack), but only once a first chunk was read and accepted: a source
                    # refused at its first row must not leave the index holding its size.
                    with self._write_lock:
                        self._core.reserve(total - added)
                        self._columns.reserve(total - added)
        return added

    def _add(
        self,
        arr: NDArray[np.float32],
        ids: NDArray[np.int64],
        t: Any = None,
        valid_from: Any = None,
        valid_until: Any = None,
        metadata: Any = None,
        progress: bool = False,
    ) -> None:
        n = arr.shape[0]
        # Validate the whole batch before the first chunk so a bad row changes nothing.
        t_us = _time.as_time_column(t, n, "t", default=_time.now_micros() if t is None else None)
        vf = _time.as_time_column(valid_from, n, "valid_from", open_end=_time.OPEN_START)
        vu = _time.as_time_column(valid_until, n, "valid_until", open_end=_time.OPEN_END)
        check_window(vf, vu)
        meta = metadata_table(metadata, n)
        self._settle()
        if n == 0:
            return
        self._core.validate_points(arr, "x")
        self._core.validate_new_ids(ids)
        self._core.reserve(n)
        self._columns.reserve(n)
        # A KeyboardInterrupt between chunks leaves the index consistent, holding the rows of
        # the chunks that completed (a prefix of the batch; ntotal says how many). Each chunk's
        # column rows go in first (a concurrent search only reads rows it has a view of) and
        # come out again if the core refuses the chunk.
        with progress_bar(progress, n, "add") as bar:
            for start in range(0, n, self._add_chunk):
                end = min(n, start + self._add_chunk)
                self._add_chunk_rows(arr, ids, t_us, vf, vu, meta, start, end)
                bar.update(end - start)

    def _add_chunk_rows(
        self, arr: Any, ids: Any, t_us: Any, vf: Any, vu: Any, meta: Any, start: int, end: int
    ) -> None:
        """One chunk of an add: its column rows, then the core's points; all of it or none.

        The core's add is one C++ call, all or nothing, so the core says whether the chunk went
        in; the columns follow it (:meth:`_settle`). A Ctrl-C is held back until the chunk is
        whole, so it lands between chunks. Any other exception, wherever it is raised, leaves the
        columns' undo recorded before they change, and the settling runs at once or, if that
        fails too, at the start of the next write or save."""
        chunk_meta = meta.slice(start, end - start) if meta is not None else None
        chunk_ids = ids[start:end]
        with deferred_interrupts():
            # The slots this chunk will take (removed points' slots first, see reuse_slots):
            # their column rows are written before the core sees the points.
            slots = self._core.plan_slots(end - start, bool(self.reuse_slots))
            self._unsettled = (chunk_ids, slots, self._columns.undo_token(slots))
            try:
                fault_point("index.add:columns")
                self._columns.place(
                    slots, chunk_ids, t_us[start:end], vf[start:end], vu[start:end], chunk_meta
                )
                fault_point("index.add:core")
                self._core.add(arr[start:end], chunk_ids, slots)
                self._changes += end - start
                fault_point("index.add:done")
            except BaseException:
                self._settle()
                raise
            self._unsettled = None

    def _settle(self) -> None:
        """Finishes a chunk whose add was cut off: its column rows stay if the core holds its
        points and are put back otherwise. Idempotent; called under the write lock."""
        pending = self._unsettled
        if pending is None:
            return
        chunk_ids, slots, token = pending
        with deferred_interrupts():
            held = self._core.slots_of(chunk_ids)
            if not np.array_equal(held, slots.astype(np.int64)):
                self._columns.undo(token)
            self._unsettled = None

    def _check_consistent(self) -> None:
        """Raises InconsistentStateError unless the columns hold exactly one row per slot of the
        core, with the same id (what a save writes and a load checks)."""
        with self._write_lock:
            self._settle()
            slots = int(self._core.slots)
            rows = len(self._columns)
            if rows != slots:
                raise InconsistentStateError(f"the columns hold {rows} rows but the index has {slots} slots")
            ids = self._columns.table().column("id").to_numpy()
            core_ids = np.asarray(self._core.slot_ids(), dtype=np.int64)
            bad = np.flatnonzero(ids != core_ids)  # removed points' slots keep their ids too
            if bad.shape[0]:
                r = int(bad[0])
                raise InconsistentStateError(
                    f"row {r} of the columns names id {int(ids[r])} but slot {r} holds id {int(core_ids[r])}"
                )

    def remove_ids(self, ids: ArrayLike) -> int:
        """Remove the given ids; unknown ids are ignored (as in FAISS). Returns how many were removed.

        Removed points are never returned again. In the HNSW graph they stay as waypoints until
        5 % of the slots are removed; the next add then re-links their neighbours around them
        and reuses their slots (see ``reuse_slots``), so churn neither grows the index nor wears
        down the graph. Rows of :attr:`columns` follow the slots: a reused row shows its new point.
        """
        id_arr = as_ids(ids)
        with self._write_lock:
            self._settle()
            removed = int(self._core.remove(id_arr))
            self._changes += removed
            return removed

    # ---- reads --------------------------------------------------------------------------
    @property
    def columns(self) -> Any:
        """The per-point columns as a pyarrow Table, one row per slot (insertion order, removed
        points included): id, t, valid_from, valid_until (timestamp[us, UTC], null = open),
        access_count, then the metadata columns. A boolean filter mask aligns with these rows."""
        return self._columns.table()

    def _search(
        self, q: ArrayLike, k: int, ef: int | None, recall: Any, filters: Any = None
    ) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        beam = self._beam(k, ef, recall)
        if filters is not None or beam.exact:
            r = run_scored(self, q, k, beam, _DISTANCE_ONLY, filters, touch=False)
            return r.distances.astype(np.float32), r.ids
        ef = beam.ef
        if (
            type(q) is np.ndarray
            and q.dtype == _FLOAT32
            and q.ndim == 2
            and q.flags.c_contiguous
            and q.shape[1] == self._core.dim
            and type(k) is int
            and 0 < k
            and q.shape[0] * k <= MAX_RESULT_ENTRIES
        ):
            # Already what the core takes: no copy and no Python checks beyond these (the core
            # checks values: finite, inside the ball). A single query costs ~0.5 us over the core.
            return self._core.search(q, k, ef, beam.first_part)  # type: ignore[no-any-return]
        arr = as_matrix(q, self.dim, "query")
        k = as_positive_int(k, "k")
        check_result_size(arr.shape[0], k)
        D, I = self._core.search(arr, k, ef, beam.first_part)
        return D, I

    def search_scored(
        self,
        q: ArrayLike,
        k: int,
        *,
        decay: DecayPolicy | None = None,
        at_time: Any = None,
        depth_bias: float = 0.0,
        time_coef: float = 1.0,
        filters: Any = None,
        ef: int | None = None,
        recall: float | None = None,
        touch: bool = False,
        future_weight: float = DEFAULT_FUTURE_WEIGHT,
        future_tolerance: timedelta = DEFAULT_FUTURE_TOLERANCE,
    ) -> ScoredResults:
        """Top-k per query by the fused score
        ``-distance + depth_bias * depth + time_coef * log(time_weight)``, best first.

        ``decay``: a policy from :mod:`poincare_index.decay` (None: weight 1), evaluated in C++ on
        the columns at ``at_time`` (one time for the call; default now; a naive datetime is local
        time). Points
        stamped more than ``future_tolerance`` (default 5 minutes: clock skew between machines)
        after at_time weigh ``future_weight``; within it they count as stamped at at_time.
        ``filters``: a row mask, allowed ids or a MongoDB-style dict over :attr:`columns` (see
        :mod:`poincare_index.filters`). ``touch``:
        increment the access_count of every returned point (atomically).

        PoincareFlatIndex scores every eligible point (exact; ``ef`` and ``recall`` are checked
        and ignored). PoincareIndex walks the graph in distance order and ranks by score; the
        walk stops when no unexpanded node can beat the k-th score (log w <= 0 and depth(x) <=
        depth(q) + d give the bound -(1 - depth_bias) d + depth_bias depth(q)) or when its width
        is spent; when time dominates, recent time buckets are scanned exactly as well. With
        time_coef < 0 or depth_bias >= 1 no such bound exists and the index is scanned exactly.
        The width is ``ef`` if given, else the one the index's recall table gives for ``recall``
        (default :attr:`~PoincareIndex.recall_target`, unless :attr:`~PoincareIndex.ef_search` is
        set), checked per query against how deep in the distance order the answers lie: a query
        whose answers lie deeper than that width covers at the target is searched again wider,
        or scanned (docs/recall.md). ``ef`` and ``recall`` together: ValueError.
        """
        spec = ScoringSpec.at(
            at_time, decay=decay, depth_bias=depth_bias, time_coef=time_coef,
            future_weight=future_weight, future_tolerance=future_tolerance,
        )  # fmt: skip
        return run_scored(self, q, k, self._beam(k, ef, recall), spec, filters, touch)

    def _search_scoring(
        self, q: ArrayLike, k: int, spec: ScoringSpec, *, filters: Any = None, ef: int | None = None,
        recall: float | None = None, touch: bool = False,
    ) -> ScoredResults:  # fmt: skip
        """:meth:`search_scored` with its time settings made once by the caller (a Memory, a
        shard of the sharded index): the same search."""
        if not isinstance(spec, ScoringSpec):
            raise TypeError(f"spec must be a ScoringSpec, got {type(spec).__name__}")
        return run_scored(self, q, k, self._beam(k, ef, recall), spec, filters, touch)

    def _beam(self, k: Any, ef: Any, recall: Any) -> Beam:
        """How a search call for the k best runs (``ef`` and ``recall`` as the caller gave them,
        validated here)."""
        raise NotImplementedError

    def _width_for_reach(self, target: float, k: int, reach: int, used: int) -> tuple[int, bool]:
        """The width a fused search at ``target`` needs for a query whose answers reached
        ``reach`` deep at width ``used`` (see run_scored); (width, scan)."""
        return used, False

    def _live_ids(self) -> NDArray[np.int64]:
        """The ids of the live points, in slot order."""
        return np.asarray(self._core.slot_ids(), dtype=np.int64)[
            np.asarray(self._core.live_slots(), dtype=bool)
        ]

    def _exact_search(self, q: ArrayLike, k: int) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """The exact k nearest of each query by a scan of every point: float64 distances, ids."""
        r = run_scored(self, q, k, Beam(1, exact=True), _DISTANCE_ONLY, None, touch=False)
        return r.distances, r.ids

    def reconstruct(self, id: int) -> NDArray[np.float32]:
        """The stored float32 vector of ``id``; KeyError if the id is not in the index."""
        return self._core.reconstruct(as_id(id))

    def reconstruct_batch(self, ids: ArrayLike) -> NDArray[np.float32]:
        """The stored float32 vectors of ``ids``, (len(ids), dim), read at one moment; KeyError
        naming the first id that is not in the index (nothing is returned then)."""
        return self._core.reconstruct_batch(as_ids(ids))

    # ---- files --------------------------------------------------------------------------
    def save(self, path: PathLike) -> None:
        """Save to a directory (created if needed), atomically: see :func:`write_index`."""
        write_index(self, path)

    def _saved_params(self) -> dict[str, int | str] | None:
        """The construction parameters a saved index's manifest records (None: none)."""
        return None

    @classmethod
    def load(
        cls: type[_T],
        path: PathLike,
        num_threads: int | None = None,
        progress: bool = False,
        *,
        mmap: bool = False,
        verify: bool = True,
    ) -> _T:
        """Load an index saved by :meth:`save`; IndexFormatError if it is not a valid one of this
        kind. ``progress``: a progress bar (tqdm) over the data files. ``mmap`` and ``verify``:
        see :func:`poincare_index.read_index`."""
        index = read_index(path, num_threads=num_threads, progress=progress, mmap=mmap, verify=verify)
        if not isinstance(index, cls):
            raise IndexFormatError(
                f"{path} holds a {type(index).__name__}, not a {cls.__name__}; use read_index()"
            )
        return index

    @classmethod
    def _from_core(cls: type[_T], core: Any, **state: Any) -> _T:
        obj = cls.__new__(cls)
        IndexBase.__init__(obj)
        obj._core = core
        for key, value in state.items():
            setattr(obj, key, value)
        return obj
