"""The parts of FAISS's Index interface that pipelines call beyond add/search/remove_ids.

Both index kinds get them through :class:`FaissSurface`: ``d``, ``is_trained``/``train``,
``reset``, ``range_search``, ``reconstruct_n``, ``merge_from``, and ``search(..., params=)`` with
:class:`SearchParameters`. Where FAISS and this library differ, docs/index-api.md's table says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from numpy.typing import ArrayLike, NDArray

from ._closing import ClosedError
from ._validation import as_finite_float, as_id, as_matrix, as_positive_int, check_result_size
from .columns import RESERVED_COLUMNS, ColumnStore
from .recall import as_recall

if TYPE_CHECKING:
    from ._index_base import IndexBase

__all__ = ["SearchParameters", "FaissSurface"]


@dataclass(frozen=True)
class SearchParameters:
    """Per-call search settings, as FAISS's ``SearchParameters``/``SearchParametersHNSW``:
    ``ef`` the beam width (HNSW; FAISS's ``efSearch``; ignored by the flat index), or ``recall``
    the recall target the index picks a width for (not both), ``filters`` what the results may
    be (a row mask, allowed ids, or a dict filter over the columns; FAISS's ``sel``)."""

    ef: int | None = None
    filters: Any = None
    recall: float | None = None

    def __post_init__(self) -> None:
        if self.ef is not None:
            as_positive_int(self.ef, "SearchParameters.ef")
        if self.recall is not None:
            as_recall(self.recall, "SearchParameters.recall")
            if self.ef is not None:
                raise ValueError("SearchParameters: give ef or recall, not both")


def resolve_params(
    params: Any, ef: int | None, recall: float | None, filters: Any
) -> tuple[int | None, float | None, Any]:
    """(ef, recall, filters) for a search given ``params`` or the keyword arguments, not both."""
    if params is None:
        return ef, recall, filters
    if not isinstance(params, SearchParameters):
        raise TypeError(f"params must be a SearchParameters, got {type(params).__name__}")
    if ef is not None or recall is not None or filters is not None:
        raise TypeError("give ef/recall/filters either as arguments or in params, not both")
    return params.ef, params.recall, params.filters


class FaissSurface:
    """Mixin of the FAISS-compatible calls; relies on the index's core, columns and locks."""

    # Provided by IndexBase.
    _core: Any
    _columns: Any
    _write_lock: Any
    _closed: bool
    _changes: int
    dim: int
    curvature: float
    ntotal: int
    kind: str
    _exact_scan: bool

    @property
    def d(self) -> int:
        """FAISS's name for :attr:`dim`."""
        return self.dim

    @property
    def is_trained(self) -> bool:
        """Always True: neither index kind needs training."""
        return True

    def train(self, x: ArrayLike) -> None:
        """Checks ``x`` as :meth:`add` would (dimension, finite, inside the ball) and does
        nothing else: neither index kind learns anything from training data."""
        arr = as_matrix(x, self.dim, "x")
        self._core.validate_points(arr, "x")

    def reset(self) -> None:
        """Removes every point and its columns; the next ``add`` numbers from 0 again, as after
        construction. Settings (dimension, curvature, M, ef_construction, ef_search, seed,
        threads) stay. A search running meanwhile sees the index before or after, never a mix
        that could fail: the core only returns points its columns cover."""
        with self._write_lock:
            core = self._new_core()
            self._changes += int(self._core.ntotal)  # every point removed: a recall table is stale
            self._core, self._columns = core, ColumnStore()

    def _new_core(self) -> Any:
        raise NotImplementedError

    def range_search(
        self, x: ArrayLike, radius: float, *, params: SearchParameters | None = None
    ) -> tuple[NDArray[np.uint64], NDArray[np.float32], NDArray[np.int64]]:
        """Every point at Poincaré distance < ``radius`` from each query row, laid out as FAISS
        lays it out: ``(lims, D, I)``, the hits of query i being ``D[lims[i]:lims[i+1]]`` and
        ``I[lims[i]:lims[i+1]]`` (lims uint64 of length nq + 1), each query's hits ascending by
        distance (FAISS leaves their order unspecified).

        The flat index is exact. The HNSW index searches the graph with k (and ef) doubled until
        the k-th result lies at or beyond the radius or every point was returned: approximate,
        as its k-NN search is (a point the walk misses is missed here too).
        ``params`` restricts the results by ``filters`` and sets the starting ``ef`` (or the
        ``recall`` target of each of those searches).
        """
        arr = as_matrix(x, self.dim, "x")
        r = as_finite_float(radius, "radius")
        if not r > 0:
            raise ValueError(f"radius must be > 0, got {radius!r}")
        ef, recall, filters = resolve_params(params, None, None, None)
        if self._exact_scan and filters is None:
            return self._core.exact_range_search(arr, r)  # type: ignore[no-any-return]
        return self._widening_range_search(arr, r, ef, recall, filters)

    def _widening_range_search(
        self, arr: NDArray[np.float32], radius: float, ef: int | None, recall: float | None, filters: Any
    ) -> tuple[NDArray[np.uint64], NDArray[np.float32], NDArray[np.int64]]:
        nq = arr.shape[0]
        if nq == 0:
            return np.zeros(1, np.uint64), np.zeros(0, np.float32), np.zeros(0, np.int64)
        hits: list[tuple[NDArray[np.float32], NDArray[np.int64]]] = [
            (np.zeros(0, np.float32), np.zeros(0, np.int64))
        ] * nq
        pending = np.arange(nq)
        k = 16
        while pending.size:
            total = max(self.ntotal, 1)
            k = min(k, total)
            check_result_size(pending.size, k)
            width = None if ef is None else max(k, ef)
            D, I = self._search(arr[pending], k, width, recall, filters)  # type: ignore[attr-defined]
            # Done when the k-th hit is at or past the radius, or fewer than k were found, or
            # k already asks for every point.
            done = (D[:, -1] >= radius) | (I[:, -1] < 0) | (k >= total)
            for j in np.flatnonzero(done).tolist():
                keep = (D[j] < radius) & (I[j] >= 0)
                hits[int(pending[j])] = (D[j][keep], I[j][keep])
            pending = pending[~done]
            k *= 2
        lims = np.zeros(nq + 1, dtype=np.uint64)
        lims[1:] = np.cumsum([h[1].shape[0] for h in hits])
        return lims, np.concatenate([h[0] for h in hits]), np.concatenate([h[1] for h in hits])

    def reconstruct_n(self, i0: int, n: int) -> NDArray[np.float32]:
        """The stored vectors of ids ``i0 .. i0 + n - 1``, (n, dim), as FAISS's reconstruct_n;
        KeyError naming the first of those ids that is not in the index."""
        start = as_id(i0, "i0")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"n must be an integer, got {type(n).__name__}")
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if start + int(n) - 1 > np.iinfo(np.int64).max:
            raise KeyError(f"ids {start} .. {start + int(n) - 1} pass the int64 range")
        ids = np.arange(start, start + int(n), dtype=np.int64)
        return self._core.reconstruct_batch(ids)  # type: ignore[no-any-return]

    def merge_from(self, other: IndexBase, add_id: int = 0) -> None:
        """Moves every point of ``other`` (either index kind, same dimension and curvature) into
        this index, as FAISS does: ids kept (plus ``add_id``), their columns (times, validity,
        access counts, metadata) with them, then removed from ``other``. All or nothing: an id
        already here is a ValueError before anything changes."""
        if not isinstance(other, FaissSurface):
            raise TypeError(f"other must be a PoincareIndex or PoincareFlatIndex, got {type(other).__name__}")
        if other is self:
            raise ValueError("cannot merge an index into itself")
        if other._closed:  # before any of its properties, which would name themselves instead
            raise ClosedError(f"{type(self).__name__}.merge_from: other ({type(other).__name__}) is closed")
        if other.dim != self.dim:
            raise ValueError(f"other has dimension {other.dim}, this index has dimension {self.dim}")
        if other.curvature != self.curvature:
            raise ValueError(
                f"other has curvature {other.curvature}, this index has curvature {self.curvature}"
            )
        shift = as_id(add_id, "add_id")
        # Both write locks for the whole move, taken in one global order (so two merges in
        # opposite directions cannot deadlock): nothing can change other's points between the
        # read and the removal, and nothing lands here half-merged.
        first, second = sorted((self, other), key=id)
        with first._write_lock, second._write_lock:
            table = other.columns
            live = np.asarray(other._core.live_slots(), dtype=bool)
            table = table.filter(pa.array(live))
            ids = table.column("id").to_numpy()
            if ids.size == 0:
                return
            x = other._core.reconstruct_batch(np.ascontiguousarray(ids, dtype=np.int64))
            if shift and (int(ids.max()) + shift > np.iinfo(np.int64).max or int(ids.min()) + shift < 0):
                raise ValueError(f"add_id={shift} moves other's ids outside [0, 2**63 - 1]")
            new_ids = ids + shift
            metadata_names = [c for c in table.column_names if c not in RESERVED_COLUMNS]
            metadata = table.select(metadata_names) if metadata_names else None
            self.add_with_ids(  # type: ignore[attr-defined]
                x, new_ids, t=table.column("t").combine_chunks(),
                valid_from=table.column("valid_from").combine_chunks(),
                valid_until=table.column("valid_until").combine_chunks(), metadata=metadata,
            )  # fmt: skip
            counts = table.column("access_count").to_numpy()
            if counts.any():
                # The rows the merged ids now live in (a removed point's old slot may carry
                # the same id: only live slots count).
                live_here = np.flatnonzero(np.asarray(self._core.live_slots(), dtype=bool))
                slot_ids = np.asarray(self._core.slot_ids(), dtype=np.int64)[live_here]
                order = np.argsort(slot_ids, kind="stable")
                rows = live_here[order[np.searchsorted(slot_ids, new_ids, sorter=order)]]
                self._columns.set_access(rows.astype(np.int64), counts)
            other.remove_ids(ids)
