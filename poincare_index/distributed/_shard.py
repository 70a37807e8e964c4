"""The Ray actor behind each shard: one local index, driven by ShardedIndex. Imported only
once Ray is (the class is wrapped with ``ray.remote`` by the driver)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..index import PoincareFlatIndex, PoincareIndex
from ..io import read_index


class Shard:
    """One shard: a PoincareIndex or PoincareFlatIndex and the calls the driver makes on it.
    Inputs arrive validated by the driver; the index validates them again (cheaply)."""

    def __init__(self, kind: str, dim: int, options: dict[str, Any], path: str | None = None) -> None:
        if path is not None:
            self.index = read_index(path, num_threads=options.get("num_threads"))
        elif kind == "flat":
            self.index = PoincareFlatIndex(dim, options["curvature"], num_threads=options.get("num_threads"))
        else:
            self.index = PoincareIndex(
                dim, M=options["M"], ef_construction=options["ef_construction"],
                curvature=options["curvature"], seed=options["seed"], ef_search=options["ef_search"],
                num_threads=options.get("num_threads"),
            )  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {"kind": self.index.kind, "dim": self.index.dim, "curvature": self.index.curvature,
                "ntotal": self.index.ntotal, "next_auto_id": int(self.index._core.next_auto_id)}  # fmt: skip

    def ids(self) -> np.ndarray:
        live = np.asarray(self.index._core.live_slots(), dtype=bool)
        return np.asarray(self.index._core.slot_ids(), dtype=np.int64)[live]

    def check_new_ids(self, ids: np.ndarray) -> None:
        """ValueError naming an id this shard holds already (nothing is added)."""
        self.index._core.validate_new_ids(np.ascontiguousarray(ids, dtype=np.int64))

    def add(self, x: np.ndarray, ids: np.ndarray, times: tuple[Any, Any, Any], metadata: Any) -> int:
        """Adds validated rows; ``times`` is (t, valid_from, valid_until) as datetime64[us]."""
        t, valid_from, valid_until = times
        self.index.add_with_ids(x, ids, t, valid_from, valid_until, metadata)
        return int(self.index.ntotal)

    def search(self, q: np.ndarray, k: int, ef: int | None, filters: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(q, k, ef, filters=filters)

    def search_scored(self, q: np.ndarray, k: int, options: dict[str, Any]) -> tuple[np.ndarray, ...]:
        r = self.index.search_scored(q, k, **options)
        return r.ids, r.scores, r.distances, r.depths, r.time_weights, r.log_weights

    def remove(self, ids: np.ndarray) -> int:
        return int(self.index.remove_ids(ids))

    def reconstruct_batch(self, ids: np.ndarray) -> np.ndarray:
        return self.index.reconstruct_batch(ids)

    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def save(self, path: str) -> None:
        self.index.save(path)


class Router:
    """A Ray Data worker of ``ShardedIndex.from_dataset``: checks each batch as the driver checks
    an add (points, ids, times, metadata), splits it by shard and sends each part straight to its
    shard actor, so the batches never pass through the driver."""

    def __init__(self, actors: list[Any], dim: int, curvature: float, columns: dict[str, Any]) -> None:
        from .. import _core

        self._actors, self._dim, self._columns = actors, dim, columns
        self._checker = _core.FlatIndexCore(dim, curvature, 1)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import ray

        from .sharded import routed_parts

        cols = self._columns
        vectors = batch[cols["vector"]]
        if vectors.dtype == object:  # a column of per-row arrays
            vectors = np.stack([np.asarray(v) for v in vectors])
        metadata = {name: batch[name] for name in cols["metadata"]} or None
        t = batch[cols["time"]] if cols["time"] is not None else None
        parts = routed_parts(self._checker, self._dim, len(self._actors), vectors, batch[cols["id"]],
                             t, None, None, metadata)  # fmt: skip
        ray.get([self._actors[s].add.remote(*args) for s, args in parts])
        return {"added": np.array([len(batch[cols["id"]])], dtype=np.int64)}
