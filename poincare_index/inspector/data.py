"""What the inspector page shows, computed on the server: the disk projection (or the time layout,
when every point has the same depth), time weights at a moment, search results with their score
breakdown, and a point's fields.

The page never evaluates a decay policy itself: weights come from the policy's numpy reference
(:meth:`DecayPolicy.weight`), which the tests hold equal to the C++ evaluation inside search.
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from .. import _time
from .._index_base import IndexBase
from ..decay import DEFAULT_FUTURE_WEIGHT, DecayPolicy, HalfLife
from ..describe import check_json_file
from ..io import read_index
from ..memory import Memory
from ..memory.rows import times_as_datetime64

__all__ = ["StoreView", "open_store", "store_loader", "PROJECTION", "TIME_LAYOUT", "LAYOUTS", "choose_layout"]

PROJECTION = (
    "Each point keeps its true distance from the origin (its depth); its direction is the "
    "projection of its tangent vector at the origin (log map) onto the two principal axes of "
    "all tangent vectors. Distances from the centre are exact; angles between points are "
    "approximate (a PCA of the tangent space at the origin)."
)
TIME_LAYOUT = (
    "Time layout, not the hyperbolic geometry: the radius is the point's time t, linear from the "
    "oldest memory (inner ring) to the newest (rim), like tree rings; the dashed circle is the "
    "slider's time. Directions are those of the Poincaré projection (a PCA of the tangent "
    "vectors at the origin); distances in this picture mean nothing in the ball."
)
LAYOUTS = {"depth": PROJECTION, "time": TIME_LAYOUT}
# Below this spread of depths (hyperbolic distance from the origin, 5th to 95th percentile) the
# true layout is one ring: the hashing embedder puts every text at the same depth (spread
# ~1e-7), so does any embedder that normalises its vectors before mapping them into the ball. A
# generated hierarchy spreads over several units.
RING_SPREAD = 0.05
# The time layout's radii: the oldest point sits off the centre, where angles still show.
TIME_RADII = (0.15, 0.97)
_BUILTIN = {"id", "text", "t", "valid_from", "valid_until", "access_count"}


def _iso(us: int | None) -> str | None:
    return None if us is None else _time.micros_to_datetime(us).isoformat().replace("+00:00", "Z")


def _log_scale(norms: NDArray[np.float64]) -> NDArray[np.float64]:
    """artanh(|x|) / |x|: the log map's factor (1 at the origin, its limit)."""
    safe = np.minimum(norms, 1 - 1e-12)
    return np.divide(np.arctanh(safe), safe, out=np.ones_like(safe), where=safe > 0)


def tangent_vectors(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """log map at the origin (curvature 1): artanh(|x|) x / |x|."""
    return _log_scale(np.linalg.norm(x, axis=1))[:, None] * x


def _sample(n: int) -> NDArray[np.int64] | slice:
    return slice(None) if n <= 20_000 else np.random.default_rng(0).choice(n, 20_000, replace=False)


def projection_axes(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """principal_axes of the tangent vectors of ``x``'s sample (the others are never built)."""
    return principal_axes(tangent_vectors(x[_sample(x.shape[0])]))


def principal_axes(tangent: NDArray[np.float64]) -> NDArray[np.float64]:
    """(dim, 2): the two principal axes of the tangent vectors (a seeded sample of 20,000),
    each signed so that its largest component is positive."""
    n, dim = tangent.shape
    sample = tangent[_sample(n)]
    centred = sample - sample.mean(axis=0) if n else sample
    if dim >= 2 and n and np.any(centred):
        # The eigenvectors of the (dim, dim) scatter matrix, not an SVD of the (20,000, dim)
        # sample: the same axes, ~15x faster (20,000 x 256: 2.5 s -> 0.17 s on 2 busy cores).
        _, vectors = np.linalg.eigh(centred.T @ centred)
        axes = vectors[:, ::-1][:, :2].copy()
        rows = np.argmax(np.abs(axes), axis=0)
        axes *= np.sign(axes[rows, [0, 1]])
        return axes
    return np.eye(dim, 2)


def disk_coordinates(x: NDArray[np.float64], axes: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
    """(n, 2) points in the unit disk: |x| kept (hence the depth), direction from the tangent
    vector projected on ``axes`` (default: its own principal axes)."""
    if x.shape[0] == 0:
        return np.zeros((0, 2))
    axes = projection_axes(x) if axes is None else axes
    norms = np.linalg.norm(x, axis=1)
    # The log map only rescales each row, so it commutes with the projection: (n, 2), not (n, dim).
    flat = _log_scale(norms)[:, None] * (x @ axes)
    fn = np.linalg.norm(flat, axis=1)
    direction = np.divide(flat, fn[:, None], out=np.zeros_like(flat), where=fn[:, None] > 0)
    direction[fn == 0] = (1.0, 0.0)
    return direction * norms[:, None]


def depths(xy: NDArray[np.float64]) -> NDArray[np.float64]:
    """Hyperbolic distance from the origin of each disk point (the projection keeps it)."""
    return 2 * np.arctanh(np.minimum(np.linalg.norm(xy, axis=1), 1 - 1e-12))


def depth_spread(depth: NDArray[np.float64]) -> float:
    """5th to 95th percentile of the depths: a few empty texts at the origin do not count."""
    if depth.size == 0:
        return 0.0
    lo, hi = np.percentile(depth, [5, 95])
    return float(hi - lo)


def choose_layout(depth: NDArray[np.float64]) -> str:
    """The default layout: the Poincaré projection ("depth") unless all points lie on one ring ("time")."""
    return "time" if depth.size > 1 and depth_spread(depth) < RING_SPREAD else "depth"


def time_coordinates(xy: NDArray[np.float64], t_us: NDArray[np.int64]) -> NDArray[np.float64]:
    """(n, 2): the direction of ``xy`` (of the projection) at a radius linear in time, from
    TIME_RADII[0] (the oldest) to TIME_RADII[1] (the newest); one time puts all in the middle."""
    if xy.shape[0] == 0:
        return np.zeros((0, 2))
    return _directions(xy) * time_radius(t_us, int(t_us.min()), int(t_us.max()))[:, None]


def time_radius(t_us: NDArray[np.int64], t_min: int, t_max: int) -> NDArray[np.float64]:
    """Radius of times in the time layout; the page draws the slider's ring with the same rule."""
    r0, r1 = TIME_RADII
    if t_max <= t_min:
        return np.full(np.shape(t_us), (r0 + r1) / 2)
    return r0 + (r1 - r0) * (np.asarray(t_us, dtype=np.float64) - t_min) / (t_max - t_min)


def _directions(xy: NDArray[np.float64]) -> NDArray[np.float64]:
    norms = np.linalg.norm(xy, axis=1)
    out = np.divide(xy, norms[:, None], out=np.zeros_like(xy), where=norms[:, None] > 0)
    out[norms == 0] = (1.0, 0.0)  # an empty text sits at the origin: any direction is as true
    return out


class StoreView:
    """The data behind the page for a Memory (or a saved index, without texts)."""

    def __init__(self, source: Any, *, touch: bool = False, decay: DecayPolicy | None = None) -> None:
        self.memory = source if isinstance(source, Memory) else None
        self._bare_index: IndexBase | None = None if self.memory is not None else source
        self.touch = bool(touch)
        self.decay = self.memory.decay if self.memory is not None else decay
        self.future_weight = self.memory.future_weight if self.memory is not None else DEFAULT_FUTURE_WEIGHT
        self._version: tuple[int, int] = (-1, -1)
        self._axes: NDArray[np.float64] | None = None
        self._axes_n = 0
        self.generation = 0
        self.refresh()

    @property
    def index(self) -> IndexBase:
        """The index now (a Memory replaces its index when it compacts)."""
        if self.memory is not None:
            return self.memory.index
        assert self._bare_index is not None
        return self._bare_index

    def _state(self) -> tuple[int, int]:
        assert self.memory is not None
        return self.memory.change_token

    def sync(self, max_age: float = 0.25) -> None:
        """Re-reads the store when a live Memory changed (adds, deletes, accesses) and the view
        is older than ``max_age`` seconds: a store under constant writes is re-read a few
        times a second, not on every request. A read-only Memory (the inspector's default on a
        store another process writes) first takes in the writer's acknowledged changes
        (Memory.refresh: a look at the files, cheap when nothing changed)."""
        if self.memory is None:
            return
        self.memory.refresh()
        if self._state() == self._version:
            return
        if time.monotonic() - self._refreshed >= max_age:
            self.refresh()

    # ---- the points ----------------------------------------------------------------------
    def refresh(self) -> None:
        """Reads the points (from one moment of the store: Memory.to_arrow with the vectors)."""
        if self.memory is not None:
            # The token first: a change after it makes the next sync read again.
            self._version = self._state()
            table = self.memory.to_arrow(vectors=True)
            column = table.column("vector").combine_chunks()
            vecs = np.asarray(column.flatten(), dtype=np.float64).reshape(len(column), -1)
            table = table.drop_columns(["vector"])
        else:
            table = self._index_table()
            vecs = self._vectors(table.column("_key").to_pylist())
        self.table = table
        self.ids = [str(v) for v in table.column("id").to_pylist()]
        self.row_of = {mid: i for i, mid in enumerate(self.ids)}
        # The projection's axes stay put while the store grows or shrinks by under 10 %, so
        # points do not jump around between refreshes.
        n = vecs.shape[0]
        if self._axes is None or not 0.9 * self._axes_n <= n <= 1.1 * self._axes_n:
            self._axes = projection_axes(vecs) if n else None
            self._axes_n = n
        self.xy = disk_coordinates(vecs, self._axes)
        self._refreshed = time.monotonic()
        self.t_us = _us(table.column("t"))
        self.valid_from = _us(table.column("valid_from"), _time.OPEN_START)
        self.valid_until = _us(table.column("valid_until"), _time.OPEN_END)
        access = table.column("access_count").to_numpy(zero_copy_only=False)
        self.access = np.asarray(access, dtype=np.float64)
        self.fields = [n for n in table.column_names if n not in _BUILTIN and not n.startswith("_")]
        depth = depths(self.xy)
        self.depth_spread = depth_spread(depth)
        self.layout = choose_layout(depth)
        self._coords = {"depth": self.xy, "time": time_coordinates(self.xy, self.t_us)}
        # Sent with every answer: the page's parallel requests (positions, weights, ids) belong
        # together only when they carry the same generation.
        self.generation += 1

    def _vectors(self, keys: list[int]) -> NDArray[np.float64]:
        if not keys:
            return np.zeros((0, 2))
        return np.asarray(self.index.reconstruct_batch(np.asarray(keys, dtype=np.int64)), dtype=np.float64)

    def _index_table(self) -> pa.Table:
        cols = self.index.columns
        keys = cols.column("id")
        live = np.array([int(k) in self.index for k in keys.to_pylist()], dtype=bool)
        cols = cols.filter(pa.array(live))
        return cols.append_column("_key", cols.column("id")).set_column(
            0, "id", cols.column("id").cast(pa.string())
        )

    def meta(self) -> dict[str, Any]:
        n = len(self.ids)
        return {
            "kind": "memory" if self.memory is not None else "index",
            "count": n,
            "t_min": _iso(int(self.t_us.min())) if n else None,
            "t_max": _iso(int(self.t_us.max())) if n else None,
            "decay": repr(self.decay),
            "projection": PROJECTION,
            "layout": self.layout,
            "layouts": LAYOUTS,
            "depth_spread": float(f"{self.depth_spread:.3g}"),
            "time_radii": TIME_RADII,
            "fields": {f: self.field_values(f) for f in self.fields},
            "searchable": "text" if self.memory is not None else "point id",
            "touch": self.touch,
        }

    def field_values(self, name: str, limit: int = 100) -> list[Any]:
        values = self.table.column(name).unique().to_pylist()
        values = [v for v in values if v is not None and isinstance(v, (str, bool, int))]
        return sorted(values, key=str)[:limit]

    def coordinates(self, layout: str = "depth") -> NDArray[np.float64]:
        """(n, 2) disk positions in a layout: "depth" (the projection) or "time" (TIME_LAYOUT)."""
        if layout not in self._coords:
            raise ValueError(f"unknown layout {layout!r} (one of {', '.join(LAYOUTS)})")
        return self._coords[layout]

    def points(self, field: str | None = None, value: Any = None, layout: str = "depth") -> dict[str, Any]:
        xy = self.coordinates(layout)
        keep = self.mask(field, value)
        idx = np.arange(len(self.ids)) if keep is None else np.flatnonzero(keep)
        return {
            "ids": [self.ids[i] for i in idx],
            "x": np.round(xy[idx, 0], 5).tolist(),
            "y": np.round(xy[idx, 1], 5).tolist(),
        }

    # The page's bulk arrays go as little-endian float32: 8 bytes a point instead of ~30 of JSON,
    # read by the page straight into a Float32Array (no parse), and -inf needs no stand-in.
    def positions_f32(self, layout: str = "depth") -> bytes:
        """x0, y0, x1, y1, ... of every point, in the order of ``ids``."""
        return np.ascontiguousarray(self.coordinates(layout), dtype="<f4").tobytes()

    def weights_f32(self, at: datetime | None) -> bytes:
        """The log time weights at ``at``, in the order of ``ids``."""
        return np.ascontiguousarray(self.log_weights(at), dtype="<f4").tobytes()

    def log_weights(self, at: datetime | None) -> NDArray[np.float64]:
        n = len(self.ids)
        if self.decay is None:
            future = self.t_us > _time.as_time_scalar(at, "at")
            return np.where(future, math.log(self.future_weight), 0.0) if n else np.zeros(0)
        return np.asarray(
            self.decay.log_weight(
                self.t_us.astype("datetime64[us]"),
                at,
                times_as_datetime64(self.valid_from, _time.OPEN_START),
                times_as_datetime64(self.valid_until, _time.OPEN_END),
                self.access,
                future_weight=self.future_weight,
            )
        )

    def weights(self, at: datetime | None) -> dict[str, Any]:
        logw = self.log_weights(at)
        return {"log_weight": np.round(np.maximum(logw, -1e9), 4).tolist()}

    def mask(self, field: str | None, value: Any) -> NDArray[np.bool_] | None:
        if not field:
            return None
        if field not in self.fields:
            raise ValueError(f"unknown field {field!r}")
        col = self.table.column(field).to_pylist()
        return np.array([str(v) == str(value) for v in col], dtype=bool)

    # ---- search and details --------------------------------------------------------------
    def search(
        self, query: str, at: datetime | None, k: int, field: str | None, value: Any
    ) -> list[dict[str, Any]]:
        if field and field not in self.fields:
            raise ValueError(f"unknown field {field!r}")
        if self.memory is not None:
            filters = None if not field else {field: _typed(self.table.column(field).type, value)}
            results = self.memory.search(query, k, at_time=at, touch=self.touch, filters=filters)
            return [_result_json(r) for r in results]
        try:
            key = int(query)
        except ValueError:
            raise ValueError("this store has no texts: search by a point id") from None
        vec = self.index.reconstruct(key).reshape(1, -1)
        allowed = None
        if field:
            m = self.mask(field, value)
            allowed = np.array([int(i) for i, ok in zip(self.ids, m) if ok], dtype=np.int64)
        r = self.index.search_scored(vec, k, decay=self.decay, at_time=at, filters=allowed, touch=False)
        out = []
        for j in range(r.ids.shape[1]):
            if r.ids[0, j] < 0:
                continue
            i = self.row_of[str(int(r.ids[0, j]))]
            out.append(
                {
                    "id": self.ids[i], "text": "", "score": float(r.scores[0, j]),
                    "distance_term": -float(r.distances[0, j]), "depth_term": 0.0,
                    "time_term": float(r.log_weights[0, j]), "time_weight": float(r.time_weights[0, j]),
                }
            )  # fmt: skip
        return out

    def point(self, mid: str) -> dict[str, Any]:
        i = self.row_of.get(mid)
        if i is None:
            raise KeyError(f"no point with id {mid!r}")
        row = self.table.slice(i, 1).to_pylist()[0]
        out = {
            k: (v.isoformat().replace("+00:00", "Z") if isinstance(v, datetime) else v)
            for k, v in row.items()
        }
        out.pop("_key", None)
        out["depth"] = round(float(depths(self.xy[i : i + 1])[0]), 6)
        return out


def _us(column: Any, open_value: int | None = None) -> NDArray[np.int64]:
    """A timestamp column as int64 microseconds; nulls (open ends) as ``open_value``."""
    nulls = np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    arr = np.array(column.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    if open_value is not None:
        arr[nulls] = open_value
    return arr


def _typed(typ: pa.DataType, value: Any) -> Any:
    if pa.types.is_boolean(typ):
        return str(value).lower() in ("true", "1")
    if pa.types.is_integer(typ):
        return int(value)
    if pa.types.is_floating(typ):
        return float(value)
    return value


def _result_json(r: Any) -> dict[str, Any]:
    e = r.explain()
    return {
        "id": r.id,
        "text": r.text,
        "score": r.score,
        "distance_term": e.distance_term,
        "depth_term": e.depth_term,
        "time_term": e.time_term,
        "time_weight": r.time_weight,
    }


def open_store(
    path: str | Path,
    namespace: str | None = None,
    allow_writes: bool = False,
    half_life_hours: float | None = None,
) -> StoreView:
    """A StoreView of a Memory store (its root or a namespace directory) or of a saved index
    directory. Missing or corrupt stores raise FileNotFoundError / IndexFormatError."""
    return store_loader(path, namespace, allow_writes, half_life_hours)(lambda stage: None)


def store_loader(
    path: str | Path,
    namespace: str | None = None,
    allow_writes: bool = False,
    half_life_hours: float | None = None,
) -> Callable[[Callable[[str], None]], StoreView]:
    """What :func:`open_store` does in two parts. Now, the checks that take no time: nothing at
    ``path`` or no namespace of that name (FileNotFoundError), several namespaces and none
    chosen (ValueError, naming them), a damaged store configuration (IndexFormatError). Returned:
    the function that opens the store and builds its StoreView (seconds on a large store),
    reporting each stage to its argument; the inspector runs it while it already answers."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"no store at {root}")
    if (root / "manifest.json").exists():  # a saved index
        check_json_file(root / "manifest.json", "manifest of a saved index")
        decay = HalfLife(hours=half_life_hours) if half_life_hours else None

        def load_index(report: Callable[[str], None]) -> StoreView:
            report(f"reading the saved index at {root}")
            index = read_index(root)
            report(f"projecting {index.ntotal:,} points into the disk")
            return StoreView(index, decay=decay)

        return load_index
    if (root / "config.json").exists():  # a namespace directory itself
        root, namespace = root.parent, root.name
    names = Memory.namespaces(root)
    if not names:
        raise FileNotFoundError(f"{root} holds neither a memory store nor a saved index")
    if namespace is None:
        if len(names) > 1:
            raise ValueError(
                f"{root} holds several namespaces ({', '.join(names)}); choose one with --namespace"
            )
        namespace = names[0]
    elif namespace not in names:
        raise FileNotFoundError(f"{root} holds no namespace {namespace!r} (it holds {', '.join(names)})")
    Memory.stored_embedder(root, namespace)  # reads and checks the configuration
    chosen = namespace

    def load_memory(report: Callable[[str], None]) -> StoreView:
        report(f"opening the store at {root} (namespace {chosen!r})")
        mem = Memory(path=root, namespace=chosen, read_only=not allow_writes)
        try:
            report(f"projecting {len(mem):,} memories into the disk")
            return StoreView(mem, touch=allow_writes)
        except BaseException:
            mem.close()
            raise

    return load_memory
