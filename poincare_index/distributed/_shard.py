"""The Ray actor behind each shard: one local index, driven by ShardedIndex. Imported only
once Ray is (the class is wrapped with ``ray.remote`` by the driver).

Every write the shard applies (add, remove, the access counts a ``touch=True`` search adds)
advances its sequence number and returns it; ``save`` returns the number its file holds. The
driver's log of acknowledged writes is kept by these numbers, so a shard restored from its file
replays exactly the writes after it, whatever order the acknowledgements reached the driver in.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa

from ..columns import RESERVED_COLUMNS
from ..filters import compile_filter
from ..index import PoincareFlatIndex, PoincareIndex
from ..io import read_index


class Shard:
    """One shard: a PoincareIndex or PoincareFlatIndex and the calls the driver makes on it.
    Inputs arrive validated by the driver; the index validates them again (cheaply)."""

    def __init__(
        self, kind: str, dim: int, options: dict[str, Any], path: str | None = None, seq: int = 0
    ) -> None:
        if path is not None:
            self.index = read_index(path, num_threads=options.get("num_threads"))
        elif kind == "flat":
            self.index = PoincareFlatIndex(dim, options["curvature"], num_threads=options.get("num_threads"))
        else:
            self.index = PoincareIndex(
                dim, M=options["M"], ef_construction=options["ef_construction"],
                curvature=options["curvature"], seed=options["seed"], ef_search=options["ef_search"],
                num_threads=options.get("num_threads"), storage=options.get("storage", "f32"),
            )  # fmt: skip
        self.seq = int(seq)
        # The directories this shard loaded from or saved to: each holds the writes up to the
        # sequence number in its name, so one of them is never written again.
        self.own_dirs: set[str] = set() if path is None else {os.path.abspath(path)}

    def describe(self) -> dict[str, Any]:
        """Kind, size and the bounds the driver prunes by: stamps (min, max; None when empty) and
        the largest access count, over the live rows."""
        live = np.asarray(self.index._core.live_slots(), dtype=bool)
        cols = self.index.columns
        t = cols.column("t").to_numpy().astype("datetime64[us]").astype(np.int64)[live]
        access = cols.column("access_count").to_numpy()[live]
        return {
            "kind": self.index.kind, "dim": self.index.dim, "curvature": self.index.curvature,
            "ntotal": self.index.ntotal, "next_auto_id": int(self.index._core.next_auto_id),
            "t_min": int(t.min()) if t.size else None, "t_max": int(t.max()) if t.size else None,
            "max_access": int(access.max()) if access.size else 0, "seq": self.seq,
            "metadata_schema": pa.schema([f for f in cols.schema if f.name not in RESERVED_COLUMNS]),
            "pid": os.getpid(), "node_id": _node_id(),
        }  # fmt: skip

    def ids(self) -> np.ndarray:
        live = np.asarray(self.index._core.live_slots(), dtype=bool)
        return np.asarray(self.index._core.slot_ids(), dtype=np.int64)[live]

    def check_new_ids(self, ids: np.ndarray) -> None:
        """ValueError naming an id this shard holds already (nothing is added)."""
        self.index._core.validate_new_ids(np.ascontiguousarray(ids, dtype=np.int64))

    def add(self, x: np.ndarray, ids: np.ndarray, times: tuple[Any, Any, Any], metadata: Any) -> int:
        """Adds validated rows; ``times`` is (t, valid_from, valid_until) as datetime64[us].
        Returns the sequence number of this write."""
        t, valid_from, valid_until = times
        self.index.add_with_ids(x, ids, t, valid_from, valid_until, metadata)
        self.seq += 1
        return self.seq

    def remove(self, ids: np.ndarray) -> tuple[int, int]:
        """(how many were removed, the sequence number of this write)."""
        removed = int(self.index.remove_ids(ids))
        self.seq += 1
        return removed, self.seq

    def touch(self, ids: np.ndarray) -> int:
        """Adds 1 to the access count of each id (listed twice: 2; unknown ones are ignored), as
        a ``touch=True`` search asks for what the merge returned. Returns the sequence number."""
        slots = self.index._core.slots_of(np.ascontiguousarray(ids, dtype=np.int64))
        rows = slots[slots >= 0]
        if rows.size:
            self.index._columns.add_access(rows)
        self.seq += 1
        return self.seq

    def _filters(self, filters: Any, schema: Any) -> Any:
        """A dict filter over the index-wide metadata ``schema``: a column this shard has no row
        of reads as null here, as it would in one local index; then the allowed ids."""
        if not isinstance(filters, dict) or schema is None:
            return filters
        ids, table = self.index._columns.filter_snapshot()
        missing = [f for f in schema if f.name not in table.column_names]
        if not missing:
            return filters
        for f in missing:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
        return ids[compile_filter(filters, table)]

    def search(
        self,
        q: np.ndarray,
        k: int,
        ef: int | None,
        filters: Any,
        schema: Any = None,
        recall: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(D, I)``, with I as int32 when every id fits (the driver's merge widens it again):
        Ray passes a result under 100 KB inline and a larger one through its object store,
        about 1.2 ms more a call, and a batch of 1,000 top-10s is 120 KB with int64 ids, 80 KB
        with int32 (benchmarks/BENCHMARKS.md, Step 9)."""
        D, I = self.index.search(q, k, ef, recall=recall, filters=self._filters(filters, schema))
        small = np.iinfo(np.int32)
        if I.size == 0 or (small.min <= I.min() and I.max() <= small.max):
            I = I.astype(np.int32)
        return D, I

    def search_scored(self, q: np.ndarray, k: int, options: dict[str, Any]) -> tuple[np.ndarray, ...]:
        """The six result columns; never touches (the driver touches what its merge returns)."""
        filters = self._filters(options.get("filters"), options.get("schema"))
        r = self.index._search_scoring(
            q, k, options["scoring"], filters=filters, ef=options.get("ef"), recall=options.get("recall")
        )
        return r.ids, r.scores, r.distances, r.depths, r.time_weights, r.log_weights

    def query(
        self, method: str, args: tuple[Any, ...], joined: tuple[tuple[int, int], ...] = (), *chunks: Any
    ) -> Any:
        """``search`` or ``search_scored`` by name: the one method a fan-out calls (the compiled
        one too), its arguments in one tuple (Ray serializes each argument of a call apart, so
        one tuple costs less than five). ``joined`` lists (position, count) pairs: the argument
        at that position is the next ``count`` of ``chunks`` joined: row chunks of one array
        sent as arguments of their own so that each travels inline with the call, or one array
        from Ray's object store (an argument of its own, which Ray resolves to its value)."""
        if method not in ("search", "search_scored"):
            raise ValueError(f"query runs search or search_scored, not {method!r}")
        if joined:
            args = list(args)
            at = 0
            for position, count in joined:
                args[position] = chunks[at] if count == 1 else np.concatenate(chunks[at : at + count])
                at += count
            if at != len(chunks):
                raise ValueError(f"query got {len(chunks)} chunks for {joined}")
        return getattr(self, method)(*args)

    def reconstruct_batch(self, ids: np.ndarray) -> np.ndarray:
        return self.index.reconstruct_batch(ids)

    def find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a mask of the ids held here, their vectors): for partitions that do not know an id's
        shard."""
        ids = np.asarray(ids, dtype=np.int64)
        held = np.isin(ids, self.ids())
        return held, self.index.reconstruct_batch(ids[held])

    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def save_as(self, root: str, number: int) -> tuple[str, int]:
        """Saves the index to ``root/shard-<number>-<seq>`` (seq: this shard's last write), a
        directory written once: into a staging one first, then renamed. Returns (path, seq).

        A directory of that name that this shard did not write or load from holds another
        index's shard (another index saved to ``root`` with as many writes): it is not taken
        for this one, and the shard's sequence number moves past it instead (a number no write
        took: the driver's log and a restoration follow the returned one)."""
        final = os.path.join(os.path.abspath(root), f"shard-{number}-{self.seq}")
        if final in self.own_dirs and os.path.isdir(final):  # no write since: the same contents
            return final, self.seq
        while os.path.exists(final):
            self.seq += 1
            final = os.path.join(os.path.abspath(root), f"shard-{number}-{self.seq}")
        staging = os.path.join(root, f".staging-{number}-{self.seq}-{os.getpid()}")
        self.index.save(staging)
        os.replace(staging, final)
        self.own_dirs.add(final)
        return final, self.seq


def _node_id() -> str | None:
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # outside Ray (direct use in tests)
        return None


class Router:
    """A Ray Data worker of ``ShardedIndex.from_dataset``: checks each batch as the driver checks
    an add (points, ids, times, metadata), splits it by shard and sends each part straight to its
    shard actor, so the batches never pass through the driver. ``route`` maps checked rows to
    the keys of ``actors`` (a shard number, or a time bucket)."""

    def __init__(self, actors: dict[int, Any], dim: int, curvature: float, columns: dict[str, Any],
                 route: Any) -> None:  # fmt: skip
        from .. import _core

        self._actors, self._dim, self._columns, self._route = actors, dim, columns, route
        self._checker = _core.FlatIndexCore(dim, curvature, 1)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import ray

        from .routing import check_add

        cols = self._columns
        vectors = batch[cols["vector"]]
        if vectors.dtype == object:  # a column of per-row arrays
            vectors = np.stack([np.asarray(v) for v in vectors])
        metadata = {name: batch[name] for name in cols["metadata"]} or None
        t = batch[cols["time"]] if cols["time"] is not None else None
        rows = check_add(self._checker, self._dim, vectors, batch[cols["id"]], t, None, None, metadata,
                         now_us=cols["now_us"])  # fmt: skip
        parts = rows.split(self._route(rows))
        missing = [key for key, _ in parts if key not in self._actors]
        if missing:
            raise ValueError(
                f"a row of this batch belongs to shard key {missing[0]}, which the build did not open"
            )
        ray.get([self._actors[key].add.remote(*args) for key, args in parts])
        return {"added": np.array([len(rows)], dtype=np.int64)}
