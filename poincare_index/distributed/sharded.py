"""ShardedIndex: the index API over shards that are Ray actors, each owning one local index.

Writes are validated on the driver before anything is sent (the same checks and exceptions as
the local index), then routed: ``partition="hash"`` sends each id to shard
``splitmix64(id) % shards``. A search goes to every shard at once (one remote call per shard per
batch); each returns its own top-k and the driver merges them, so for flat shards the result is
exactly the single flat index's (distances ascending, ties by id) and ``search_scored`` fixes one
``at_time`` on the driver so every shard scores against the same moment.
"""

from __future__ import annotations

import json
import os
import re
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _core, _time
from .._validation import as_id, as_ids, as_matrix, as_positive_int, check_result_size
from ..columns import check_window, metadata_table
from ..decay import DEFAULT_FUTURE_TOLERANCE, DEFAULT_FUTURE_WEIGHT, DecayPolicy
from ..geometry import _curvature
from ..scored import ScoredResults

__all__ = ["ShardedIndex", "ShardUnavailableError", "shard_of"]

FORMAT = "poincare-sharded-index"
FORMAT_VERSION = 1
_KINDS = ("hnsw", "flat")
_PARTITIONS = ("hash",)
_MAX_SHARDS = 4096  # a manifest asking for more is crafted or corrupt, not started


class ShardUnavailableError(RuntimeError):
    """A shard actor died or cannot be reached; the message names the shard."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("poincare_index.distributed needs Ray: pip install 'poincare-index[ray]'") from exc
    return ray


def shard_of(ids: NDArray[np.int64], shards: int) -> NDArray[np.int64]:
    """The shard of each id under hash partitioning: splitmix64(id) mod shards (sequential ids
    spread evenly; the same on every machine and Python version)."""
    z = ids.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(shards)).astype(np.int64)


class ShardedIndex:
    """The index API over ``shards`` Ray actors (see the module docstring). Call ``ray.init``
    first to choose the cluster (``ray.init(address=...)``); otherwise Ray starts a local one.

    ``kind``: "hnsw" or "flat"; ``M``, ``ef_construction``, ``ef_search``, ``seed``,
    ``curvature`` as for the local indexes; ``threads_per_shard`` each shard's search threads;
    ``actor_options`` goes to ``ray.remote(...).options`` (e.g. ``{"num_cpus": 1}``, resources,
    a scheduling strategy).
    """

    def __init__(
        self,
        dim: int,
        *,
        shards: int = 4,
        kind: str = "hnsw",
        partition: str = "hash",
        curvature: float = 1.0,
        M: int = 16,
        ef_construction: int = 200,
        ef_search: int = 64,
        seed: int = 0,
        threads_per_shard: int = 1,
        actor_options: dict[str, Any] | None = None,
        _paths: list[str] | None = None,
    ) -> None:
        self._dim = as_positive_int(dim, "dim")
        self._shards = as_positive_int(shards, "shards")
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        if partition not in _PARTITIONS:
            raise ValueError(
                f"partition must be one of {_PARTITIONS}, got {partition!r} (time partitions are "
                "not built yet)"
            )
        if actor_options is not None and not isinstance(actor_options, dict):
            raise TypeError(f"actor_options must be a dict, got {type(actor_options).__name__}")
        self._kind, self._partition = kind, partition
        self._options = {
            "curvature": _curvature(curvature), "M": as_positive_int(M, "M"),
            "ef_construction": as_positive_int(ef_construction, "ef_construction"),
            "ef_search": as_positive_int(ef_search, "ef_search"), "seed": int(seed),
            "num_threads": as_positive_int(threads_per_shard, "threads_per_shard"),
        }  # fmt: skip
        # A local flat core checks points exactly as every shard will (dimension, NaN/Inf, ball).
        self._checker = _core.FlatIndexCore(self._dim, self._options["curvature"], 1)
        self._write_lock = threading.RLock()
        ray = _ray()
        from ._shard import Shard

        remote = ray.remote(Shard)
        if actor_options:
            remote = remote.options(**actor_options)
        paths = _paths or [None] * self._shards
        self._actors = [remote.remote(kind, self._dim, self._options, p) for p in paths]
        described = self._gather([a.describe.remote() for a in self._actors])
        # One past the largest id any shard ever stored (removed ones included), as add() numbers.
        self._next_id = max(int(d["next_auto_id"]) for d in described)
        if _paths is not None:
            for i, d in enumerate(described):
                if (d["kind"], d["dim"], d["curvature"]) != (kind, self._dim, self._options["curvature"]):
                    raise _core.IndexFormatError(f"shard {i} at {paths[i]} does not match the manifest: {d}")
            for i, ids in enumerate(self._gather([a.ids.remote() for a in self._actors])):
                wrong = ids[shard_of(ids, self._shards) != i]
                if wrong.size:
                    raise _core.IndexFormatError(
                        f"shard {i} at {paths[i]} holds id {int(wrong[0])}, which belongs to another shard"
                    )

    # ---- plumbing -----------------------------------------------------------------------
    def _gather(self, refs: list[Any], shards: list[int] | None = None) -> list[Any]:
        """ray.get of one call per shard (``shards`` names them, default 0, 1, ...), the shard's
        own exception re-raised as itself (a KeyError stays a KeyError), a dead shard as
        ShardUnavailableError naming it."""
        ray = _ray()
        try:
            return list(ray.get(refs))  # one wait for all: the common case
        except (ray.exceptions.RayTaskError, ray.exceptions.RayActorError):
            pass
        out = []
        for i, ref in enumerate(refs):  # which shard failed, and how
            try:
                out.append(ray.get(ref))
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(exc.cause, BaseException) else RuntimeError(str(exc))
                raise cause from None
            except ray.exceptions.RayActorError as exc:
                name = i if shards is None else shards[i]
                raise ShardUnavailableError(f"shard {name} is unavailable: {exc}") from None
        return out

    @property
    def actors(self) -> list[Any]:
        """The shard actor handles, shard 0 first."""
        return list(self._actors)

    @property
    def dim(self) -> int:
        return self._dim

    d = dim

    @property
    def curvature(self) -> float:
        return float(self._options["curvature"])

    @property
    def shards(self) -> int:
        return self._shards

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def ntotal(self) -> int:
        return int(sum(self._gather([a.ntotal.remote() for a in self._actors])))

    def __len__(self) -> int:
        return self.ntotal

    # ---- writes -------------------------------------------------------------------------
    def add(self, x: ArrayLike, *, t: Any = None, valid_from: Any = None, valid_until: Any = None,
            metadata: Any = None) -> None:  # fmt: skip
        """Adds vectors with ids ``next_id, next_id + 1, ...`` (one past the largest id ever
        stored here; 0 for a new index), as :meth:`PoincareIndex.add`."""
        arr = as_matrix(x, self._dim, "x")
        with self._write_lock:
            ids = np.arange(self._next_id, self._next_id + arr.shape[0], dtype=np.int64)
            self.add_with_ids(
                arr, ids, t=t, valid_from=valid_from, valid_until=valid_until, metadata=metadata
            )

    def add_with_ids(
        self, x: ArrayLike, ids: ArrayLike, t: Any = None, valid_from: Any = None, valid_until: Any = None,
        metadata: Any = None,
    ) -> None:  # fmt: skip
        """As :meth:`PoincareIndex.add_with_ids`; everything is checked before any shard gets a
        row (a bad row, a repeated id or one a shard holds already: nothing is added)."""
        with self._write_lock:
            parts = routed_parts(self._checker, self._dim, self._shards, x, ids, t, valid_from, valid_until,
                                 metadata)  # fmt: skip
            if not parts:
                return
            # Every shard checks its ids first; only then does any shard get a row.
            which = [s for s, _ in parts]
            self._gather([self._actors[s].check_new_ids.remote(args[1]) for s, args in parts], which)
            self._gather([self._actors[s].add.remote(*args) for s, args in parts], which)
            self._next_id = max(self._next_id, max(int(args[1].max()) for _, args in parts) + 1)

    def remove_ids(self, ids: ArrayLike) -> int:
        """Removes the given ids (unknown ones are ignored); returns how many were removed."""
        id_arr = as_ids(ids)
        if id_arr.size == 0:
            return 0
        owner = shard_of(id_arr, self._shards)
        with self._write_lock:
            which = [s for s in range(self._shards) if np.any(owner == s)]
            calls = [self._actors[s].remove.remote(id_arr[owner == s]) for s in which]
            return int(sum(self._gather(calls, which)))

    # ---- reads --------------------------------------------------------------------------
    def reconstruct(self, id: int) -> NDArray[np.float32]:
        """The stored vector of ``id``; KeyError if no shard holds it."""
        return self.reconstruct_batch([as_id(id)])[0]

    def reconstruct_batch(self, ids: ArrayLike) -> NDArray[np.float32]:
        id_arr = as_ids(ids)
        out = np.zeros((id_arr.shape[0], self._dim), dtype=np.float32)
        owner = shard_of(id_arr, self._shards)
        shards = [s for s in range(self._shards) if np.any(owner == s)]
        parts = self._gather(
            [self._actors[s].reconstruct_batch.remote(id_arr[owner == s]) for s in shards], shards
        )
        for s, part in zip(shards, parts):
            out[owner == s] = part
        return out

    def _query(self, q: ArrayLike, k: int) -> tuple[NDArray[np.float32], int]:
        arr = as_matrix(q, self._dim, "query")
        k = as_positive_int(k, "k")
        check_result_size(arr.shape[0], k)
        self._checker.validate_points(arr, "query")
        return arr, k

    @staticmethod
    def _check_filters(filters: Any) -> None:
        if isinstance(filters, np.ndarray) and filters.dtype == bool:
            raise TypeError("a sharded index takes dict filters or arrays of allowed ids, not row masks")

    def search(
        self, q: ArrayLike, k: int, ef: int | None = None, *, filters: Any = None
    ) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        """``(D, I)`` as the local indexes give them: every shard's top-k merged (distances
        ascending, ties by id). ``filters`` (a dict, or allowed ids) go to every shard."""
        arr, k = self._query(q, k)
        if ef is not None:
            as_positive_int(ef, "ef")
        self._check_filters(filters)
        parts = self._gather([a.search.remote(arr, k, ef, filters) for a in self._actors])
        D = np.concatenate([p[0] for p in parts], axis=1)
        I = np.concatenate([p[1] for p in parts], axis=1)
        # Padding (-1) sorts last by its +inf distance; ties by id, padding after real ids.
        order = np.lexsort((np.where(I < 0, np.iinfo(np.int64).max, I), D), axis=1)[:, :k]
        return np.take_along_axis(D, order, axis=1), np.take_along_axis(I, order, axis=1)

    def search_scored(
        self, q: ArrayLike, k: int, *, decay: DecayPolicy | None = None, at_time: Any = None,
        depth_bias: float = 0.0, time_coef: float = 1.0, filters: Any = None, ef: int | None = None,
        touch: bool = False, future_weight: float = DEFAULT_FUTURE_WEIGHT,
        future_tolerance: timedelta = DEFAULT_FUTURE_TOLERANCE,
    ) -> ScoredResults:  # fmt: skip
        """As :meth:`PoincareIndex.search_scored`, over every shard; ``at_time`` (default now)
        is fixed here once, so all shards score against the same moment; merged by score
        (best first, ties by id)."""
        arr, k = self._query(q, k)
        at_us = _time.as_time_scalar(at_time, "at_time")
        self._check_filters(filters)
        options = {
            "decay": decay, "at_time": np.datetime64(at_us, "us"), "depth_bias": depth_bias,
            "time_coef": time_coef, "filters": filters, "ef": ef, "touch": touch,
            "future_weight": future_weight, "future_tolerance": future_tolerance,
        }  # fmt: skip
        parts = self._gather([a.search_scored.remote(arr, k, options) for a in self._actors])
        cols = [np.concatenate([p[j] for p in parts], axis=1) for j in range(6)]
        ids = cols[0]
        order = np.lexsort((np.where(ids < 0, np.iinfo(np.int64).max, ids), -cols[1]), axis=1)[:, :k]
        ids, scores, dist, depths, weights, logw = (np.take_along_axis(c, order, axis=1) for c in cols)
        return ScoredResults(ids, scores, dist, depths, weights, logw)

    @classmethod
    def from_dataset(
        cls, ds: Any, *, vector_column: str, id_column: str, time_column: str | None = None,
        metadata_columns: list[str] | None = None, dim: int | None = None, batch_size: int = 8192,
        concurrency: int = 2, **options: Any,
    ) -> ShardedIndex:  # fmt: skip
        """A new index built from a ``ray.data.Dataset``: its batches are checked and routed by
        Ray Data workers (``concurrency`` of them) straight to the shard actors, so a build runs
        on every node and no row passes through the driver. ``dim`` defaults to the length of
        the first vector; ``options`` are the constructor's (``shards``, ``kind``, ...). A bad
        batch fails the build with its error (ValueError naming the row or id); batches
        already routed stay added."""
        _ray()
        from ray.data import Dataset

        if not isinstance(ds, Dataset):
            raise TypeError(f"ds must be a ray.data.Dataset, got {type(ds).__name__}")
        names = set(ds.columns())
        roles = [("vector_column", vector_column), ("id_column", id_column), ("time_column", time_column)]
        roles += [("metadata_columns", m) for m in metadata_columns or []]
        for role, name in roles:
            if name is not None and name not in names:
                known = ", ".join(sorted(names))
                raise ValueError(f"{role} {name!r} is not a column of the dataset ({known})")
        if dim is None:
            first = ds.take(1)
            if not first:
                raise ValueError("the dataset is empty and no dim was given")
            dim = int(np.asarray(first[0][vector_column]).shape[-1])
        index = cls(dim, **options)
        from ._shard import Router

        columns = {"vector": vector_column, "id": id_column, "time": time_column,
                   "metadata": list(metadata_columns or [])}  # fmt: skip
        try:
            workers = as_positive_int(concurrency, "concurrency")
            added = ds.map_batches(
                Router, fn_constructor_args=(index._actors, index._dim, index.curvature, columns),
                batch_size=batch_size, batch_format="numpy", concurrency=workers,
            ).sum("added")  # fmt: skip
        except Exception as exc:
            cause = _user_cause(exc)
            if cause is not None:
                raise cause from None
            raise
        described = index._gather([a.describe.remote() for a in index._actors])
        index._next_id = max(int(d["next_auto_id"]) for d in described)
        if int(added or 0) != index.ntotal:
            raise RuntimeError(f"from_dataset routed {added} rows but the shards hold {index.ntotal}")
        return index

    # ---- files --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Every shard saves itself to ``path/shard-<i>`` (a path the shard's node can write:
        on a multi-node cluster, a shared file system); then ``path/sharded.json`` names them,
        with the format, its version and a checksum."""
        from ..memory.store import write_json_atomic

        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        with self._write_lock:
            dirs = [str(root / f"shard-{i}") for i in range(self._shards)]
            self._gather([a.save.remote(d) for a, d in zip(self._actors, dirs)])
            write_json_atomic(root / "sharded.json", {
                "format": FORMAT, "version": FORMAT_VERSION, "kind": self._kind, "dim": self._dim,
                "shards": self._shards, "partition": self._partition, "options": self._options,
            })  # fmt: skip

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, actor_options: dict[str, Any] | None = None
    ) -> ShardedIndex:
        """The index ``save`` wrote; IndexFormatError for a missing, corrupted or crafted
        manifest, or shards that do not match it (kind, dimension, ids on the wrong shard)."""
        from ..memory.store import read_json_checked

        root = Path(path)
        doc = read_json_checked(root / "sharded.json", "the sharded index manifest")
        if doc.get("format") != FORMAT or doc.get("version") != FORMAT_VERSION:
            raise _core.IndexFormatError(
                f"{root}: not a sharded index of format version {FORMAT_VERSION}: "
                f"{json.dumps({k: doc.get(k) for k in ('format', 'version')})}"
            )
        try:
            options = dict(doc["options"])
            shards = int(doc["shards"])
            if not 1 <= shards <= _MAX_SHARDS:
                raise ValueError(f"shards = {shards} is outside [1, {_MAX_SHARDS}]")
            missing = [i for i in range(shards) if not (root / f"shard-{i}").is_dir()]
            if missing:
                raise ValueError(f"shard-{missing[0]} is missing")
            index = cls(
                int(doc["dim"]), shards=shards, kind=str(doc["kind"]), partition=str(doc["partition"]),
                curvature=float(options["curvature"]), M=int(options["M"]),
                ef_construction=int(options["ef_construction"]), ef_search=int(options["ef_search"]),
                seed=int(options["seed"]), threads_per_shard=int(options["num_threads"]),
                actor_options=actor_options, _paths=[str(root / f"shard-{i}") for i in range(shards)],
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise _core.IndexFormatError(f"{root}: the sharded index manifest is invalid: {exc}") from None
        return index

    def close(self) -> None:
        """Ends the shard actors (their indexes are gone unless saved)."""
        ray = _ray()
        for a in self._actors:
            ray.kill(a)
        self._actors = []

    def __repr__(self) -> str:
        return f"ShardedIndex(dim={self._dim}, shards={self._shards}, kind={self._kind!r})"


_USER_ERRORS = {"ValueError": ValueError, "TypeError": TypeError, "KeyError": KeyError}
_USER_ERROR_LINE = re.compile(r"^\s*(ValueError|TypeError|KeyError): (.+)$", re.MULTILINE)


def _user_cause(exc: BaseException) -> BaseException | None:
    """The ValueError/TypeError/KeyError a Ray Data worker raised. Ray Data hands it back only
    as the text of a UserCodeException (the original object stays in the worker), so it is
    rebuilt from the last such line of that text; None when there is none."""
    found = _USER_ERROR_LINE.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    return _USER_ERRORS[name](message)


def routed_parts(
    checker: Any, dim: int, shards: int, x: ArrayLike, ids: ArrayLike, t: Any, valid_from: Any,
    valid_until: Any, metadata: Any,
) -> list[tuple[int, tuple[Any, ...]]]:  # fmt: skip
    """An add checked as the local index checks it (points, ids, times, window, metadata) and
    split by shard: [(shard, (x, ids, (t, valid_from, valid_until), metadata))] for the shards
    that get rows. Raises before anything is sent."""
    arr = as_matrix(x, dim, "x")
    id_arr = as_ids(ids)
    n = arr.shape[0]
    if id_arr.shape[0] != n:
        raise ValueError(f"x has {n} rows but ids has {id_arr.shape[0]} entries")
    if n == 0:
        return []
    t_us = _time.as_time_column(t, n, "t", default=_time.now_micros() if t is None else None)
    vf = _time.as_time_column(valid_from, n, "valid_from", open_end=_time.OPEN_START)
    vu = _time.as_time_column(valid_until, n, "valid_until", open_end=_time.OPEN_END)
    check_window(vf, vu)
    meta = metadata_table(metadata, n)
    checker.validate_points(arr, "x")
    if np.any(id_arr == -1):
        raise ValueError(f"ids row {int(np.flatnonzero(id_arr == -1)[0])}: -1 is reserved for padding")
    uniq, first = np.unique(id_arr, return_index=True)
    if uniq.shape[0] != n:
        dup = int(np.setdiff1d(np.arange(n), first)[0])
        raise ValueError(f"ids row {dup}: id {int(id_arr[dup])} appears twice in this call")
    owner = shard_of(id_arr, shards)
    parts = []
    for s in range(shards):
        p = np.flatnonzero(owner == s)
        if p.size:
            times = (
                _as_datetime64(t_us[p], None),
                _as_datetime64(vf[p], _time.OPEN_START),
                _as_datetime64(vu[p], _time.OPEN_END),
            )
            parts.append((s, (arr[p], id_arr[p], times, None if meta is None else meta.take(p))))
    return parts


def _as_datetime64(us: NDArray[np.int64], open_value: int | None) -> NDArray[Any]:
    """Microseconds as datetime64[us], open ends (the stored sentinels) as NaT."""
    out = us.astype("datetime64[us]")
    if open_value is not None:
        out[us == open_value] = np.datetime64("NaT")
    return out
