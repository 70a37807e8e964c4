"""PoincareIndex (HNSW) and PoincareFlatIndex (exact): a FAISS-style API in the Poincaré ball."""

from __future__ import annotations

import os
import threading
from typing import Any, ClassVar, TypeVar, Union

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._validation import as_id, as_ids, as_matrix, as_positive_int
from .geometry import _curvature

__all__ = ["PoincareIndex", "PoincareFlatIndex"]

PathLike = Union[str, "os.PathLike[str]"]
_T = TypeVar("_T", bound="_IndexBase")


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _threads(value: int | None) -> int:
    return _default_threads() if value is None else as_positive_int(value, "num_threads")


def _dim(value: Any) -> int:
    return as_positive_int(value, "dim")


class _IndexBase:
    """What both indexes share. Ids are int64; ``add`` assigns ntotal, ntotal+1, ... as FAISS does."""

    kind: ClassVar[str]
    # Rows per call into the core during add: between chunks Python gets the chance to raise
    # KeyboardInterrupt, so Ctrl-C during a long add is honoured within a fraction of a second.
    _add_chunk: ClassVar[int]

    _core: Any

    def __init__(self) -> None:
        # Adds and removals from several Python threads run one at a time (the core would
        # serialise them anyway); searches do not take this lock.
        self._write_lock = threading.RLock()

    # ---- properties ---------------------------------------------------------------------
    @property
    def dim(self) -> int:
        """Dimension of the vectors."""
        return int(self._core.dim)

    @property
    def curvature(self) -> float:
        """Curvature c > 0 of the ball c|x|^2 < 1."""
        return float(self._core.curvature)

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
        self._core.num_threads = as_positive_int(value, "num_threads")

    def __contains__(self, id: object) -> bool:
        try:
            return bool(self._core.contains(as_id(id)))
        except (TypeError, KeyError):
            return False

    # ---- writes -------------------------------------------------------------------------
    def add(self, x: ArrayLike) -> None:
        """Add vectors (n, dim); they get ids ``next_id .. next_id + n - 1``.

        ``next_id`` is ``ntotal`` (FAISS's rule) unless ids at or above it are already taken
        (after ``add_with_ids`` or ``remove_ids``), in which case it is one past the largest id
        ever stored. Rows must be finite and inside the ball (c|x|^2 < 1 - 1e-7 after the
        float32 cast); on error nothing is added.
        """
        arr = as_matrix(x, self.dim, "x")
        with self._write_lock:
            start = int(self._core.next_auto_id)
            ids = np.arange(start, start + arr.shape[0], dtype=np.int64)
            self._add(arr, ids)

    def add_with_ids(self, x: ArrayLike, ids: ArrayLike) -> None:
        """Add vectors (n, dim) with int64 ids (unique, not already in the index, not -1)."""
        arr = as_matrix(x, self.dim, "x")
        id_arr = as_ids(ids)
        if id_arr.shape[0] != arr.shape[0]:
            raise ValueError(f"x has {arr.shape[0]} rows but ids has {id_arr.shape[0]} entries")
        with self._write_lock:
            self._add(arr, id_arr)

    def _add(self, arr: NDArray[np.float32], ids: NDArray[np.int64]) -> None:
        n = arr.shape[0]
        if n == 0:
            return
        # Validate the whole batch before the first chunk so a bad row changes nothing.
        self._core.validate_points(arr, "x")
        self._core.validate_new_ids(ids)
        self._core.reserve(n)
        # A KeyboardInterrupt between chunks leaves the index consistent, holding the rows of
        # the chunks that completed (a prefix of the batch; ntotal says how many). The
        # finishing pass (HNSW: connectivity repair) runs once, after the last chunk, or on the
        # way out of an interrupted add.
        finished = False
        try:
            for start in range(0, n, self._add_chunk):
                end = min(n, start + self._add_chunk)
                self._core.add(arr[start:end], ids[start:end], end == n)
                finished = end == n
        finally:
            if not finished:
                self._core.finish()

    def remove_ids(self, ids: ArrayLike) -> int:
        """Remove the given ids; unknown ids are ignored (as in FAISS). Returns how many were removed.

        Removed points are never returned again; in the HNSW graph they stay as waypoints.
        """
        id_arr = as_ids(ids)
        with self._write_lock:
            return int(self._core.remove(id_arr))

    # ---- reads --------------------------------------------------------------------------
    def _search(self, q: ArrayLike, k: int, ef: int) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        arr = as_matrix(q, self.dim, "query")
        k = as_positive_int(k, "k")
        D, I = self._core.search(arr, k, ef)
        return D, I

    def reconstruct(self, id: int) -> NDArray[np.float32]:
        """The stored float32 vector of ``id``; KeyError if the id is not in the index."""
        return self._core.reconstruct(as_id(id))

    # ---- files --------------------------------------------------------------------------
    def save(self, path: PathLike) -> None:
        """Save to a directory (created if needed), atomically: see :func:`write_index`."""
        from .io import write_index

        write_index(self, path)

    @classmethod
    def load(cls: type[_T], path: PathLike, num_threads: int | None = None) -> _T:
        """Load an index saved by :meth:`save`; IndexFormatError if it is not a valid one of this kind."""
        from .io import read_index

        index = read_index(path, num_threads=num_threads)
        if not isinstance(index, cls):
            from ._core import IndexFormatError

            raise IndexFormatError(
                f"{path} holds a {type(index).__name__}, not a {cls.__name__}; use read_index()"
            )
        return index

    @classmethod
    def _from_core(cls: type[_T], core: Any, **state: Any) -> _T:
        obj = cls.__new__(cls)
        _IndexBase.__init__(obj)
        obj._core = core
        for key, value in state.items():
            setattr(obj, key, value)
        return obj


class PoincareFlatIndex(_IndexBase):
    """Exact k-nearest-neighbour search by Poincaré distance (a blocked SIMD scan).

    The scan ranks in float32 with a per-pair error bound and re-scores in float64 every point
    that could still be in the top k, so results are exact.
    """

    kind: ClassVar[str] = "flat"
    _add_chunk: ClassVar[int] = 1 << 16

    def __init__(self, dim: int, curvature: float = 1.0, *, num_threads: int | None = None):
        super().__init__()
        self._core = _core.FlatIndexCore(_dim(dim), _curvature(curvature), _threads(num_threads))

    def search(
        self, q: ArrayLike, k: int, ef: int | None = None
    ) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """Exact k nearest per query row: ``(D, I)``, float32 distances ascending and int64 ids,
        padded with inf / -1 when fewer than k points exist. ``ef`` is accepted and ignored."""
        if ef is not None:
            as_positive_int(ef, "ef")
        return self._search(q, k, 1)

    def __repr__(self) -> str:
        return f"PoincareFlatIndex(dim={self.dim}, curvature={self.curvature}, ntotal={self.ntotal})"


class PoincareIndex(_IndexBase):
    """Approximate k-NN by Poincaré distance: an HNSW graph navigated by the distance's monotone
    surrogate ``|u - v|^2 a(u) a(v)``, exact distances reported for the results.

    Parameters follow the HNSW paper and FAISS: ``M`` links per node (2M on level 0),
    ``ef_construction`` beam width while building, ``ef_search`` at query time (raise it for
    recall). ``seed`` fixes the level draws; with ``num_threads=1`` builds are reproducible.
    """

    kind: ClassVar[str] = "hnsw"
    _add_chunk: ClassVar[int] = 8192

    def __init__(
        self,
        dim: int,
        M: int = 16,
        ef_construction: int = 200,
        curvature: float = 1.0,
        seed: int = 0,
        *,
        ef_search: int = 64,
        num_threads: int | None = None,
    ):
        super().__init__()
        M = as_positive_int(M, "M")
        if not 2 <= M <= 256:
            raise ValueError(f"M must be in [2, 256], got {M}")
        ef_construction = as_positive_int(ef_construction, "ef_construction")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
        if not 0 <= int(seed) < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {seed}")
        self._ef_search = as_positive_int(ef_search, "ef_search")
        self._core = _core.HnswIndexCore(
            _dim(dim), _curvature(curvature), M, ef_construction, int(seed), _threads(num_threads)
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
    def ef_search(self) -> int:
        """Default beam width of :meth:`search` (at least k is used)."""
        return self._ef_search

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self._ef_search = as_positive_int(value, "ef_search")

    def search(
        self, q: ArrayLike, k: int, ef: int | None = None
    ) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """k approximate nearest per query row: ``(D, I)``, float32 Poincaré distances ascending
        and int64 ids, padded with inf / -1. ``ef`` overrides :attr:`ef_search` for this call."""
        ef_value = self._ef_search if ef is None else as_positive_int(ef, "ef")
        return self._search(q, k, ef_value)

    def check_integrity(self) -> dict[str, int]:
        """Structural check of the graph (links in range, no overflowing or duplicate links,
        levels consistent, entry point on top); raises IndexFormatError on a violation and
        returns counters, ``unreachable`` being nodes the level-0 graph cannot reach."""
        return dict(self._core.check_integrity())

    def __repr__(self) -> str:
        return (
            f"PoincareIndex(dim={self.dim}, M={self.M}, ef_construction={self.ef_construction}, "
            f"curvature={self.curvature}, ntotal={self.ntotal}, ef_search={self.ef_search})"
        )
