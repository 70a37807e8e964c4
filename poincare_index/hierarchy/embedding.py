"""A trained embedding: node names and their points in the ball, searchable and saved in the
index's own file format (the names in its Arrow columns)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from numpy.typing import NDArray

from ..io import PathLike

__all__ = ["Embedding"]

# An embedding has no time of its own; its saved index stamps every point with the Unix epoch so
# that saving the same embedding twice writes the same columns.
_STAMP = np.datetime64(0, "us")


def _check_names(names: Any, where: str) -> tuple[str, ...]:
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise TypeError(f"{where}: names must be a sequence of str, got {type(names).__name__}")
    out = tuple(names)
    for i, name in enumerate(out):
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: name {i} must be a non-empty str, got {name!r}")
    if len(set(out)) != len(out):
        seen: set[str] = set()
        dup = next(n for n in out if n in seen or seen.add(n))  # type: ignore[func-returns-value]
        raise ValueError(f"{where}: the name {dup!r} appears twice")
    return out


@dataclass(frozen=True)
class Embedding:
    """``names[i]`` is embedded at ``points[i]`` (float32, strictly inside the unit ball);
    ``losses`` the mean loss of each training pass; ``train_seconds`` the training wall time."""

    names: tuple[str, ...]
    points: NDArray[np.float32]
    losses: tuple[float, ...] = field(default=(), compare=False)
    train_seconds: float = field(default=0.0, compare=False)

    def __post_init__(self) -> None:
        names = _check_names(self.names, "Embedding")
        pts = np.asarray(self.points)
        if pts.dtype != np.float32 or pts.ndim != 2 or pts.shape[0] != len(names) or pts.shape[1] < 2:
            raise ValueError(
                f"Embedding: points must be float32 (n_names={len(names)}, dim >= 2), got "
                f"{pts.dtype} {pts.shape}"
            )
        if not np.isfinite(pts).all():
            raise ValueError("Embedding: points hold NaN or Inf")
        norms = np.linalg.norm(pts.astype(np.float64), axis=1)
        if norms.size and float(norms.max()) >= 1.0:
            raise ValueError(f"Embedding: point {int(norms.argmax())} lies outside the unit ball")
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "points", np.ascontiguousarray(pts))

    @property
    def dim(self) -> int:
        return int(self.points.shape[1])

    def __len__(self) -> int:
        return len(self.names)

    def index_of(self, name: str) -> int:
        """The row of ``name``; KeyError if it is not embedded."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"{name!r} is not a node of this embedding") from None

    def vector(self, name: str) -> NDArray[np.float32]:
        return self.points[self.index_of(name)]

    def depth(self) -> NDArray[np.float64]:
        """Each node's distance from the origin, 2 artanh |x| (small: near the root)."""
        norms = np.linalg.norm(self.points.astype(np.float64), axis=1)
        return 2.0 * np.arctanh(norms)

    def to_index(self, kind: str = "hnsw", *, t: Any = None, **params: Any) -> Any:
        """A PoincareIndex (``kind="hnsw"``, ``params`` as its constructor's) or
        PoincareFlatIndex (``"flat"``) of the points, id i for ``names[i]``, the names in the
        ``name`` metadata column; ``t`` stamps the points (default now, as ``add``)."""
        from ..index import PoincareFlatIndex, PoincareIndex

        if kind not in ("hnsw", "flat"):
            raise ValueError(f"kind must be 'hnsw' or 'flat', got {kind!r}")
        index = PoincareIndex(self.dim, **params) if kind == "hnsw" else PoincareFlatIndex(self.dim, **params)
        index.add_with_ids(
            self.points, np.arange(len(self), dtype=np.int64), t=t, metadata={"name": list(self.names)}
        )
        return index

    def save(self, path: PathLike) -> None:
        """Save as a flat index directory (:func:`poincare_index.io.write_index`: magic bytes,
        format version, checksums), names in its ``name`` column; no pickle."""
        self.to_index("flat", t=_STAMP).save(path)

    @classmethod
    def load(cls, path: PathLike) -> Embedding:
        """An embedding saved by :meth:`save`; IndexFormatError if the directory is not a valid
        saved index, ValueError if it is one but not an embedding (ids not 0..n-1 in order, no
        ``name`` column, empty or repeated names)."""
        from ..index import PoincareFlatIndex

        index = PoincareFlatIndex.load(path)
        table = index.columns
        where = f"{path}"
        if "name" not in table.column_names:
            raise ValueError(f"{where} holds an index without a 'name' column: not an embedding")
        ids = table.column("id").to_numpy()
        if ids.shape[0] != index.ntotal or not np.array_equal(ids, np.arange(ids.shape[0])):
            raise ValueError(f"{where}: an embedding's ids are 0..n-1 in order, with nothing removed")
        names = table.column("name").to_pylist()
        if any(n is None for n in names):
            raise ValueError(f"{where}: the 'name' column has nulls")
        points = index.reconstruct_batch(ids) if ids.shape[0] else np.zeros((0, index.dim), np.float32)
        return cls(names=_check_names(names, where), points=points)

    def __repr__(self) -> str:
        depth = self.depth()
        finite = depth.size and math.isfinite(depth.max())
        spread = f", depth {depth.min():.2f}-{depth.max():.2f}" if finite else ""
        return f"Embedding({len(self)} nodes, dim {self.dim}{spread})"
