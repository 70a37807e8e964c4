"""PoincareIndex (HNSW) and PoincareFlatIndex (exact): a FAISS-style API in the Poincaré ball."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._index_base import IndexBase, as_dim
from ._index_files import register_kind
from ._recall_state import RecallCalibrated
from ._validation import as_int_in, as_num_threads, as_positive_int
from .faiss_surface import SearchParameters, resolve_params
from .geometry import _curvature
from .recall import DEFAULT_RECALL_TARGET, Beam, as_recall, as_width_and_recall, checked_width

__all__ = ["PoincareIndex", "PoincareFlatIndex", "STORAGE_KINDS"]

# Links per node (2M on level 0). 24 rather than FAISS's and hnswlib's 16: the two orders share
# each list, and at 200,000 points 16 leave too few per order for stored points to be found at
# a narrow width (docs/graph_walk.md, "Links that scale").
DEFAULT_M = 24

# What PoincareIndex(storage=...) accepts: what its graph walk reads.
STORAGE_KINDS = ("f32", "f16", "sq8")


def as_storage(value: Any) -> str:
    """A checked ``storage=`` name: TypeError unless a str, ValueError unless a known kind."""
    if not isinstance(value, str):
        raise TypeError(f"storage must be a str, one of {STORAGE_KINDS}, got {type(value).__name__}")
    if value not in STORAGE_KINDS:
        raise ValueError(f"storage must be one of {STORAGE_KINDS}, got {value!r}")
    return value


class PoincareFlatIndex(IndexBase):
    """Exact k-nearest-neighbour search by Poincaré distance (a blocked SIMD scan).

    The scan ranks in float32 with a per-pair error bound and re-scores in float64 every point
    that could still be in the top k, so results are exact.
    """

    kind: ClassVar[str] = "flat"
    _exact_scan: ClassVar[bool] = True
    _prunes_by_time: ClassVar[bool] = False
    _add_chunk: ClassVar[int] = 1 << 16

    def __init__(self, dim: int, curvature: float = 1.0, *, num_threads: int | None = None):
        super().__init__()
        self._core = _core.FlatIndexCore(as_dim(dim), _curvature(curvature), as_num_threads(num_threads))

    def search(
        self,
        q: ArrayLike,
        k: int,
        ef: int | None = None,
        *,
        recall: float | None = None,
        filters: Any = None,
        params: SearchParameters | None = None,
    ) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """Exact k nearest per query row: ``(D, I)``, float32 distances ascending and int64 ids,
        padded with inf / -1 when fewer than k points exist. ``ef`` and ``recall`` are checked
        and ignored (the answer is exact); ``filters`` restricts the results (see
        :meth:`search_scored`); ``params`` gives them instead, as FAISS's ``search(x, k,
        params=...)``."""
        ef, recall, filters = resolve_params(params, ef, recall, filters)
        return self._search(q, k, ef, recall, filters)

    def _new_core(self) -> Any:
        return _core.FlatIndexCore(self.dim, self.curvature, self.num_threads)

    def _beam(self, k: Any, ef: Any, recall: Any) -> Beam:
        as_width_and_recall(ef, recall)
        return Beam(1)  # exact: the core scans, no beam

    def __repr__(self) -> str:
        return f"PoincareFlatIndex(dim={self.dim}, curvature={self.curvature}, ntotal={self.ntotal})"


class PoincareIndex(RecallCalibrated, IndexBase):
    """Approximate k-NN by Poincaré distance: an HNSW graph navigated by the distance's monotone
    surrogate ``|u - v|^2 a(u) a(v)``, exact distances reported for the results.

    Parameters follow the HNSW paper and FAISS: ``M`` links per node (2M on level 0; default 24,
    within hnswlib's bytes per vector at its M = 16: docs/graph_walk.md, "Links that scale"),
    ``ef_construction`` beam width while building. ``seed`` fixes the level draws; with
    ``num_threads=1`` builds are reproducible.

    Searches ask for a recall, not a beam width: ``search(x, k, recall=0.95)``, or
    :attr:`recall_target` (default 0.95) when a call names neither ``recall`` nor ``ef``. The
    index measures on its own points what width reaches what recall (:attr:`recall_table`,
    refreshed once enough points changed, kept by ``save``) and scans exactly where that is
    cheaper or no width reaches the target. ``ef=`` per call, or ``ef_search`` for every call,
    fixes the width instead (docs/recall.md).

    ``storage`` is what the graph walk reads: ``"f32"`` (the float32 coordinates), ``"f16"``
    (half-precision coordinates) or ``"sq8"`` (8-bit coordinates on each point's own scale).
    With codes, the walk ranks by ``|q - code(x)|^2`` less the code's own squared error, times
    ``a(x)`` kept in float32 from the coordinates (never from the codes); the ``ef`` candidates
    are re-ranked exactly from the float32 coordinates, which after ``save`` and
    ``load(mmap=True)`` stay in the mapped file: RAM holds the graph, the codes and the
    factors (docs/compressed_storage.md).
    """

    kind: ClassVar[str] = "hnsw"
    _exact_scan: ClassVar[bool] = False
    _prunes_by_time: ClassVar[bool] = True
    _add_chunk: ClassVar[int] = 8192

    def __init__(
        self,
        dim: int,
        M: int = DEFAULT_M,
        ef_construction: int = 200,
        curvature: float = 1.0,
        seed: int = 0,
        *,
        ef_search: int | None = None,
        recall_target: float = DEFAULT_RECALL_TARGET,
        num_threads: int | None = None,
        storage: str = "f32",
    ):
        super().__init__()
        M = as_int_in(M, "M", 2, 256)  # one range, one message, for 0, 1 and 300 alike
        ef_construction = as_positive_int(ef_construction, "ef_construction")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
        if not 0 <= int(seed) < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {seed}")
        self._ef_search = None if ef_search is None else as_positive_int(ef_search, "ef_search")
        self._recall_target = as_recall(recall_target, "recall_target")
        self._core = _core.HnswIndexCore(
            as_dim(dim),
            _curvature(curvature),
            M,
            ef_construction,
            int(seed),
            as_num_threads(num_threads),
            as_storage(storage),
        )

    @property
    def M(self) -> int:
        return int(self._core.M)

    @property
    def ef_construction(self) -> int:
        return int(self._core.ef_construction)

    @property
    def seed(self) -> int:
        return int(self._core.seed)

    @property
    def storage(self) -> str:
        """What the graph walk reads: ``"f32"``, ``"f16"`` or ``"sq8"`` (see the class)."""
        return str(self._core.storage)

    def set_storage(self, storage: str) -> None:
        """Codes every stored point as ``storage`` (``"f32"`` drops the codes): one pass over
        the coordinates, the graph unchanged (it is built from float32 whatever the kind), so
        an index built or saved as f32 becomes an f16 / sq8 one without a rebuild. Saved by
        the next :meth:`save`."""
        kind = as_storage(storage)
        with self._write_lock:
            self._core.set_storage(kind)
            self._forget_calibration()  # the walk reads the codes now: its recall is another

    @property
    def ef_search(self) -> int | None:
        """A fixed beam width for calls that name neither ``ef`` nor ``recall`` (at least k is
        used); None (the default): such calls use :attr:`recall_target`."""
        return self._ef_search

    @ef_search.setter
    def ef_search(self, value: int | None) -> None:
        self._ef_search = None if value is None else as_positive_int(value, "ef_search")

    @property
    def recall_target(self) -> float:
        """The recall a search aims for when it names neither ``ef`` nor ``recall`` and
        :attr:`ef_search` is None: a number in (0, 1], 0.95 by default. Saved with the index."""
        return self._recall_target

    @recall_target.setter
    def recall_target(self, value: float) -> None:
        self._recall_target = as_recall(value, "recall_target")

    def search(
        self,
        q: ArrayLike,
        k: int,
        ef: int | None = None,
        *,
        recall: float | None = None,
        filters: Any = None,
        params: SearchParameters | None = None,
    ) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """k approximate nearest per query row: ``(D, I)``, float32 Poincaré distances ascending
        and int64 ids, padded with inf / -1. ``recall`` (in (0, 1]) is the recall@k to aim for,
        default :attr:`recall_target`; ``ef`` fixes the beam width instead (default
        :attr:`ef_search` when set); not both. ``filters`` restricts the results (see
        :meth:`search_scored`); ``params`` gives these instead, as FAISS's ``search(x, k,
        params=...)``. :meth:`expected_recall` says what a call is expected to reach."""
        ef, recall, filters = resolve_params(params, ef, recall, filters)
        return self._search(q, k, ef, recall, filters)

    def _new_core(self) -> Any:
        return _core.HnswIndexCore(
            self.dim, self.curvature, self.M, self.ef_construction, self.seed, self.num_threads, self.storage
        )

    def _beam(self, k: Any, ef: Any, recall: Any) -> Beam:
        width = checked_width(ef, recall)
        if width is not None:
            return Beam(width)
        if recall is None and self._ef_search is not None:
            return Beam(self._ef_search)
        target = self._recall_target if recall is None else as_recall(recall)
        if type(k) is not int or k < 1:
            k = as_positive_int(k, "k")
        return self._target_beam(target, k)

    def check_integrity(self) -> dict[str, int]:
        """Structural check of the graph (links in range, no overflowing or duplicate links,
        levels consistent, entry point on top); raises IndexFormatError on a violation and
        returns counters: ``unreachable``, live nodes the level-0 graph cannot reach from the
        entry point, and ``without_way_down``, live nodes (the entry point aside) that no node at
        their depth or shallower links to on level 0. Every build and removal repairs both; the
        second stays above 0 only where every candidate source's repair slots are full.
        ``relocated_lists``: level-0 lists the repair moved to hold more than 2M links."""
        return dict(self._core.check_integrity())

    def _graph_switches(self) -> dict[str, bool]:
        """The graph's mechanisms that can be turned off (for tests and benchmarks, which
        measure what each buys; docs/graph_walk.md): ``second_order``, ``cover_rule`` and the
        repair's steps ``reachability``, ``ways_down``, ``ways_in``, and ``refill_yields`` (a link
        added back to a full list replaces its farthest refill link instead of re-selecting it)."""
        return dict(self._core.graph_switches())

    def _set_graph_switches(self, **switches: bool) -> None:
        """Turns the named mechanisms on or off for later adds and searches (not saved)."""
        current = self._graph_switches()
        for name, value in switches.items():
            if name not in current:
                raise ValueError(f"unknown graph switch {name!r}; choose from {sorted(current)}")
            if not isinstance(value, bool):
                raise TypeError(f"graph switch {name!r} must be a bool, got {type(value).__name__}")
            current[name] = value
        self._core.set_graph_switches(**current)
        self._forget_calibration()

    def _saved_params(self) -> dict[str, Any] | None:
        return {
            "M": self.M,
            "ef_construction": self.ef_construction,
            "seed": self.seed,
            "ef_search": self.ef_search,
            "storage": self.storage,
            **self._saved_recall(),
        }

    def __repr__(self) -> str:
        return (
            f"PoincareIndex(dim={self.dim}, M={self.M}, ef_construction={self.ef_construction}, "
            f"curvature={self.curvature}, ntotal={self.ntotal}, ef_search={self.ef_search}, "
            f"recall_target={self.recall_target}, storage={self.storage!r})"
        )


register_kind(PoincareFlatIndex.kind, PoincareFlatIndex)
register_kind(PoincareIndex.kind, PoincareIndex)
