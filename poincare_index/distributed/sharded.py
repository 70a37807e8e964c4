"""ShardedIndex: the index API over shards that are Ray actors, each owning one local index.

Writes are validated on the driver before anything is sent (the same checks and exceptions as
the local index), then routed: ``partition="hash"`` sends each id to shard
``splitmix64(id) % shards``; ``partition="time"`` gives each shard one ``time_span`` of stamps and
opens a new shard when a row arrives for a span that has none, so ``drop_before`` retires whole
shards. A search goes to the shards at once (one remote call per shard per batch); each returns
its own top-k and the driver merges them, so for flat shards the result is exactly the single
flat index's (distances ascending, ties by id). ``search_scored`` fixes one ``at_time`` on the
driver so every shard scores against the same moment; over time shards it reads the newest
first and skips a shard once no point of it can beat the k-th score found so far.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _core, _time
from .._closing import refuse_when_closed
from .._validation import (
    as_flag,
    as_id,
    as_ids,
    as_int_in,
    as_matrix,
    as_positive_int,
    check_result_size,
)
from ..decay import DEFAULT_FUTURE_TOLERANCE, DEFAULT_FUTURE_WEIGHT, DecayPolicy
from ..geometry import _curvature
from ..index import DEFAULT_M, as_storage
from ..recall import as_width_and_recall
from ..scoring import ScoringSpec
from . import files
from ._ray_support import as_seconds, import_ray
from .compiled import CompiledFanout
from .pruning import ScoreBound
from .results import ShardedScoredResults, ShardedSearchResult, merge_scored
from .routing import HashRoute, TimeBuckets, TimeRoute, check_add, shard_of
from .slots import ShardSet, ShardSlot, ShardUnavailableError

__all__ = ["ShardedIndex", "ShardUnavailableError", "shard_of"]

_KINDS = ("hnsw", "flat")
_PARTITIONS = ("hash", "time")
# How many shards a time partition may open unless told otherwise (see the class docstring).
DEFAULT_MAX_TIME_SHARDS = 64


@refuse_when_closed("index")
class ShardedIndex:
    """The index API over Ray actors (see the module docstring). Call ``ray.init`` first to
    choose the cluster (``ray.init(address=...)``); otherwise Ray starts a local one.

    ``kind``: "hnsw" or "flat"; ``M``, ``ef_construction``, ``ef_search`` (default None: each
    shard searches at its recall target, 0.95), ``seed``, ``curvature``, ``storage`` (HNSW:
    "f32", "f16" or "sq8") as for the local indexes;
    ``threads_per_shard`` each shard's search threads;
    ``actor_options`` goes to ``ray.remote(...).options`` (e.g. ``{"num_cpus": 1}``, resources,
    a scheduling strategy; not ``max_restarts``: restoring a shard is the driver's job).

    ``partition="hash"``: ``shards`` actors (default 4, at most 4096, what a saved manifest may
    list). ``partition="time"``: one actor per ``time_span`` (default 30 days, counted from
    ``time_origin``, default 1970-01-01 UTC), opened as rows arrive; ``shards`` does not apply.

    ``max_shards`` (time partitions; default 64, at most 4096) bounds how many time shards may
    be open at once: an add (or a ``from_dataset`` build) whose stamps would open more is
    refused with a ValueError before any actor starts or any row is sent. Each shard is a Ray
    actor, a process of its own (about 330 MB resident, 140 MB of it its own, before it holds a
    point: measured on a local cluster), and a search that cannot skip shards sends one call to
    each; a ``time_span`` too short for the data (one second, for rows a second apart) would
    otherwise start one actor per row. 64 is five years of the default 30-day span, and about
    9 GB of idle processes were they on one machine. More history: a longer ``time_span``,
    ``drop_before`` for what is no longer needed, or a larger ``max_shards``. Saved with the
    index.

    Faults: every wait for a shard is bounded by ``call_timeout`` seconds (starting a shard by
    ``restore_timeout``); a dead or silent shard raises ShardUnavailableError naming it. With
    ``checkpoint_path``, ``save()`` writes there and a dead shard is restored from its last save
    plus the writes acknowledged since (kept on the driver until the next save), within
    ``restore_timeout`` seconds; calls meanwhile wait.

    ``low_latency=True`` sends searches that go to every shard through a Ray Compiled Graph
    (beta in Ray; see :mod:`.compiled`), which cuts Ray's per-call overhead; whenever that path
    cannot answer, the plain one does, with the same results and errors.
    """

    def __init__(
        self, dim: int, *, shards: int | None = None, kind: str = "hnsw", partition: str = "hash",
        curvature: float = 1.0, M: int = DEFAULT_M, ef_construction: int = 200, ef_search: int | None = None,
        seed: int = 0, threads_per_shard: int = 1, actor_options: dict[str, Any] | None = None,
        time_span: timedelta | None = None, time_origin: Any = None,
        checkpoint_path: str | os.PathLike[str] | None = None, call_timeout: float = 60.0,
        restore_timeout: float = 600.0, low_latency: bool = False, storage: str = "f32",
        max_shards: int | None = None, _restored: list[dict[str, Any]] | None = None,
    ) -> None:  # fmt: skip
        self._closed = False
        self._dim = as_positive_int(dim, "dim")
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        if partition not in _PARTITIONS:
            raise ValueError(f"partition must be one of {_PARTITIONS}, got {partition!r}")
        if partition == "hash":
            if time_span is not None or time_origin is not None or max_shards is not None:
                raise ValueError("time_span, time_origin and max_shards apply to partition='time'")
            n_shards = 4 if shards is None else as_int_in(shards, "shards", 1, files.MAX_SHARDS)
            self._buckets: TimeBuckets | None = None
            self._max_shards = n_shards
        else:
            if shards is not None:
                raise ValueError("partition='time' opens one shard per time_span as rows arrive; shards= "
                                 "applies to partition='hash'")  # fmt: skip
            self._buckets = TimeBuckets.of(
                timedelta(days=30) if time_span is None else time_span, time_origin
            )
            n_shards = 0
            self._max_shards = (
                DEFAULT_MAX_TIME_SHARDS
                if max_shards is None
                else as_int_in(max_shards, "max_shards", 1, files.MAX_SHARDS)
            )
        if actor_options is not None and not isinstance(actor_options, dict):
            raise TypeError(f"actor_options must be a dict, got {type(actor_options).__name__}")
        if (actor_options or {}).get("max_restarts", 0) != 0:
            raise ValueError(
                "actor_options max_restarts: Ray would restart a shard empty; give the index a "
                "checkpoint_path and the driver restores it from its last save instead"
            )
        self._kind, self._partition = kind, partition
        self._options = {
            "curvature": _curvature(curvature), "M": as_positive_int(M, "M"),
            "ef_construction": as_positive_int(ef_construction, "ef_construction"),
            "ef_search": None if ef_search is None else as_positive_int(ef_search, "ef_search"),
            "seed": int(seed),
            "num_threads": as_positive_int(threads_per_shard, "threads_per_shard"),
            "storage": as_storage(storage),
        }  # fmt: skip
        if kind == "flat" and storage != "f32":
            raise ValueError(f"storage={storage!r} applies to kind='hnsw' (the flat scan reads float32)")
        self._checkpoint = None if checkpoint_path is None else os.fspath(checkpoint_path)
        self._fanout = CompiledFanout() if as_flag(low_latency, "low_latency") else None
        # A local flat core checks points exactly as every shard will (dimension, NaN/Inf, ball).
        self._checker = _core.FlatIndexCore(self._dim, self._options["curvature"], 1)
        self._write_lock = threading.RLock()
        ray = import_ray()
        from ._shard import Shard

        remote = ray.remote(Shard)
        if actor_options:
            remote = remote.options(**actor_options)

        def make_actor(path: str | None, seq: int) -> Any:
            return remote.remote(kind, self._dim, self._options, path, seq)

        self._set = ShardSet(
            make_actor, call_timeout=as_seconds(call_timeout, "call_timeout"),
            restore_timeout=as_seconds(restore_timeout, "restore_timeout"),
            recover=self._checkpoint is not None, write_lock=self._write_lock,
        )  # fmt: skip
        if _restored is not None:
            for entry in _restored:
                self._set.open(entry["number"], entry["bucket"], entry["path"], entry["seq"])
        else:
            for number in range(n_shards):
                self._set.open(number)
        self._next_number = max((s.number for s in self._set.slots), default=-1) + 1
        described = self._set.started(self._set.slots)
        self._adopt(described)
        if _restored is not None:
            files.check_restored(self, _restored, described)

    # ---- plumbing -----------------------------------------------------------------------
    def _adopt(self, described: list[dict[str, Any]]) -> None:
        """What the driver keeps of its shards, from their descriptions (one per slot, in slot
        order): each slot's stamp bounds and largest access count, the metadata columns over all
        shards (a filter on one a shard lacks reads it as null) and the next automatic id (one
        past the largest any shard ever stored, removed ones included, as add() numbers)."""
        import pyarrow as pa

        schema = pa.schema([])
        for slot, d in zip(self._set.slots, described):
            slot.t_min, slot.t_max, slot.max_access = d["t_min"], d["t_max"], int(d["max_access"])
            schema = self._widened(schema, d["metadata_schema"], f"shard {slot.number} holds")
        self._schema = schema
        self._next_id = max((int(d["next_auto_id"]) for d in described), default=0)

    def _call(
        self, slots: list[ShardSlot], method: str, args: list[tuple[Any, ...]] | None = None
    ) -> list[Any]:
        return self._set.call(slots, method, args or [()] * len(slots))[0]

    def _write(self, slots: list[ShardSlot], method: str, args: list[tuple[Any, ...]]) -> list[Any]:
        """A write on ``slots``: every acknowledgement is logged (and its stamps noted) as it is
        read, even when another shard fails and the call raises."""

        def acknowledged(i: int, answer: Any) -> None:
            seq = answer[1] if isinstance(answer, tuple) else answer
            self._set.log(slots[i], int(seq), method, args[i])
            if method == "add":
                slots[i].note_times(args[i][2][0].astype(np.int64))

        return self._set.call(slots, method, args, on_answer=acknowledged)[0]

    @staticmethod
    def _widened(schema: Any, new: Any, given: str = "the new rows give") -> Any:
        """``schema`` with ``new``'s columns by the rule of a local index and a Memory (see
        ``_metadata.concat_metadata``): integers and floats under one key widen to float64, a null
        column takes the other type; any other mix is a ValueError naming the key and both types."""
        import pyarrow as pa

        types = dict(zip(schema.names, schema.types))
        for name, typ in zip(new.names, new.types):
            before = types.get(name)
            if before is None or pa.types.is_null(before):
                types[name] = typ
            elif before != typ and not pa.types.is_null(typ):
                kinds = {"int" if pa.types.is_integer(t) else "float" if pa.types.is_floating(t) else t
                         for t in (before, typ)}  # fmt: skip
                if kinds != {"int", "float"}:
                    raise ValueError(
                        f"metadata does not match the existing columns: {name!r} holds {before} values, "
                        f"{given} {typ} (one key takes one type; integers widen to float64)"
                    )
                types[name] = pa.float64()
        return pa.schema(list(types.items()))

    def _check_metadata(self, rows: Any) -> Any:
        """``rows`` (CheckedRows) with their metadata cast to the types the index holds (integers
        to float64 where it holds floats: every shard stores one type), or a ValueError (see
        :meth:`_widened`) before any shard gets a part. A shard none of whose rows is among the
        floats that widen a column of integers keeps its integers until its next add."""
        import dataclasses

        import pyarrow as pa

        meta = rows.metadata
        if meta is None:
            return rows
        want = self._widened(self._schema, meta.schema)
        for i, name in enumerate(meta.schema.names):
            try:  # a no-op where the type is the index's already
                meta = meta.set_column(i, name, meta.column(i).cast(want.field(name).type))
            except pa.ArrowInvalid as exc:
                raise ValueError(
                    f"metadata {name!r} mixes integers and floats, which share a float64 column: {exc}"
                ) from None
        return dataclasses.replace(rows, metadata=meta)

    def _note_metadata(self, metadata: Any) -> None:
        if metadata is not None:
            self._schema = self._widened(self._schema, metadata.schema)

    def _fan(
        self, slots: list[ShardSlot], method: str, args: list[tuple[Any, ...]], *, allow_partial: bool = False
    ) -> tuple[list[Any], list[int]]:
        """As :meth:`ShardSet.call` for a search; one that asks every shard the same question
        takes the compiled path when there is one and it answers."""
        if (
            self._fanout is not None and not allow_partial and len(slots) == len(self._set.slots)
            and all(a is args[0] for a in args)
        ):  # fmt: skip
            answers = self._fanout.run([s.actor for s in slots], method, args[0], self._set.call_timeout)
            if answers is not None:
                return answers, []
        if len(args) > 1 and all(a is args[0] for a in args):
            args = [_handed_over(method, args[0])] * len(args)
        else:
            args = [(method, a) for a in args]
        return self._set.call(slots, "query", args, allow_partial=allow_partial, label=method)

    @property
    def actors(self) -> list[Any]:
        """The shard actor handles, in shard order (hash: shard 0 first; time: oldest first)."""
        return [s.actor for s in self._set.slots]

    def shard_info(self) -> list[dict[str, Any]]:
        """Per shard: its number, its time range (time partitions) and the stamp bounds of the
        rows it was sent, as the driver knows them (no remote call)."""
        out = []
        for s in self._set.slots:
            info: dict[str, Any] = {"number": s.number, "t_min": _dt(s.t_min), "t_max": _dt(s.t_max)}
            if self._buckets is not None and s.bucket is not None:
                info["start"] = _dt(self._buckets.start_us(s.bucket))
                info["end"] = _dt(self._buckets.end_us(s.bucket))
            out.append(info)
        return out

    @property
    def dim(self) -> int:
        return self._dim

    d = dim

    @property
    def curvature(self) -> float:
        return float(self._options["curvature"])

    @property
    def shards(self) -> int:
        """How many shards there are now (time partitions open and drop them)."""
        return len(self._set.slots)

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def storage(self) -> str:
        """What each shard's graph walk reads: "f32", "f16" or "sq8" (see PoincareIndex)."""
        return str(self._options["storage"])

    @property
    def partition(self) -> str:
        return self._partition

    @property
    def max_shards(self) -> int:
        """How many time shards may be open at once (hash partitions: the number of shards)."""
        return self._max_shards

    @property
    def ntotal(self) -> int:
        return int(sum(n for n in self._call(list(self._set.slots), "ntotal") if n is not None))

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
        row (a bad row, a repeated id or one a shard holds already: nothing is added). When it
        returns, the add is acknowledged: with a checkpoint, no shard failure loses it."""
        rows = check_add(self._checker, self._dim, x, ids, t, valid_from, valid_until, metadata)
        if not len(rows):
            return
        with self._write_lock:
            rows = self._check_metadata(rows)
            if self._buckets is None:
                parts = [
                    (self._set.slots[key], args) for key, args in rows.split(HashRoute(self.shards)(rows))
                ]
                holders = [slot for slot, _ in parts]
                self._set.call(holders, "check_new_ids", [(args[1],) for _, args in parts])
            else:  # any shard may hold an id already: all check
                self._set.call(self._set.slots, "check_new_ids", [(rows.ids,)] * self.shards)
                split = rows.split(TimeRoute(self._buckets)(rows))
                parts = list(zip(self._slots_for_buckets([key for key, _ in split]), [a for _, a in split]))
            # The ids and the columns are taken before the shards get them: an add that fails
            # halfway (a shard dead without a checkpoint) hands neither out again.
            self._next_id = max(self._next_id, int(rows.ids.max()) + 1)
            self._note_metadata(rows.metadata)
            self._write([s for s, _ in parts], "add", [args for _, args in parts])

    def _slots_for_buckets(self, buckets: list[int]) -> list[ShardSlot]:
        """The slots of these time buckets, opening the missing ones (started together); a
        ValueError before any starts when they would pass ``max_shards``."""
        have = {s.bucket: s for s in self._set.slots}
        new = sorted(set(buckets) - set(have))
        if len(have) + len(new) > self._max_shards:
            assert self._buckets is not None
            span = timedelta(microseconds=self._buckets.span_us)
            first, last = (_dt(self._buckets.start_us(b)) for b in (new[0], new[-1]))
            raise ValueError(
                f"this add would open {len(new)} new time shards (stamps from {first} to {last}, "
                f"time_span {span}) beside the {len(have)} open: more than max_shards="
                f"{self._max_shards}; give a longer time_span, drop_before old shards, or a larger "
                "max_shards (each shard is a Ray actor)"
            )
        opened = []
        for bucket in buckets:
            if bucket not in have:
                have[bucket] = self._set.open(self._next_number, bucket)
                self._next_number += 1
                opened.append(have[bucket])
        if opened:
            self._set.slots = sorted(self._set.slots, key=lambda s: s.bucket)  # a new list: readers copy
            self._set.started(opened)
        return [have[b] for b in buckets]

    def remove_ids(self, ids: ArrayLike) -> int:
        """Removes the given ids (unknown ones are ignored); returns how many were removed."""
        id_arr = as_ids(ids)
        if id_arr.size == 0:
            return 0
        with self._write_lock:
            if self._buckets is None:
                owner = shard_of(id_arr, self.shards)
                slots = [s for i, s in enumerate(self._set.slots) if np.any(owner == i)]
                args = [(id_arr[owner == self._set.slots.index(s)],) for s in slots]
            else:
                slots, args = list(self._set.slots), [(id_arr,)] * self.shards
            replies = self._write(slots, "remove", args)
            return int(sum(r[0] for r in replies))

    def drop_before(self, t: Any) -> int:
        """Retires every time shard whose whole range ends at or before ``t`` (retention without
        touching a graph; a shard that straddles ``t`` stays whole). Returns how many points
        went. The next ``save`` no longer lists the dropped shards (and deletes their files)."""
        if self._buckets is None:
            raise ValueError("drop_before needs partition='time' (hash shards mix all times)")
        cutoff = _time.as_time_scalar(t, "t")
        with self._write_lock:
            old = [
                s
                for s in self._set.slots
                if s.bucket is not None and self._buckets.end_us(s.bucket) <= cutoff
            ]
            if not old:
                return 0
            dropped = int(sum(self._call(old, "ntotal")))
            ray = import_ray()
            self._set.slots = [s for s in self._set.slots if s not in old]
            for slot in old:  # a search that copied the list before still reaches them: retired
                slot.retired = True
                ray.kill(slot.actor)
            return dropped

    # ---- reads --------------------------------------------------------------------------
    def reconstruct(self, id: int) -> NDArray[np.float32]:
        """The stored vector of ``id``; KeyError if no shard holds it."""
        return self.reconstruct_batch([as_id(id)])[0]

    def reconstruct_batch(self, ids: ArrayLike) -> NDArray[np.float32]:
        id_arr = as_ids(ids)
        out = np.zeros((id_arr.shape[0], self._dim), dtype=np.float32)
        if self._buckets is None:
            owner = shard_of(id_arr, self.shards)
            numbers = [i for i in range(self.shards) if np.any(owner == i)]
            slots = [self._set.slots[i] for i in numbers]
            parts = self._call(slots, "reconstruct_batch", [(id_arr[owner == i],) for i in numbers])
            for i, part in zip(numbers, parts):
                out[owner == i] = part
            return out
        found = np.zeros(id_arr.shape[0], dtype=bool)
        slots = list(self._set.slots)
        for answer in self._call(slots, "find", [(id_arr,)] * len(slots)):
            if answer is None:  # a shard dropped meanwhile
                continue
            held, vectors = answer
            out[held] = vectors
            found |= held
        if not found.all():
            raise KeyError(f"id {int(id_arr[~found][0])} is not in the index")
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
        self, q: ArrayLike, k: int, ef: int | None = None, *, recall: float | None = None,
        filters: Any = None, allow_partial: bool = False,
    ) -> ShardedSearchResult:  # fmt: skip
        """``(D, I)`` as the local indexes give them: every shard's top-k merged (distances
        ascending, ties by id). ``ef`` or ``recall`` (not both) go to every shard, as do
        ``filters`` (a dict, or allowed ids): each shard meets the target on its own top k, so
        the merge does too (a true answer is lost only where its shard missed it).
        With ``allow_partial=True`` a shard that fails is left out instead of raising; the
        result's ``answered`` and ``missing`` name the shards (it unpacks as ``D, I``)."""
        arr, k = self._query(q, k)
        ef, recall = as_width_and_recall(ef, recall)
        self._check_filters(filters)
        as_flag(allow_partial, "allow_partial")
        slots = list(self._set.slots)
        question = (arr, k, ef, filters, self._schema if filters is not None else None, recall)
        parts, missing = self._fan(
            slots, "search", [question] * len(slots), allow_partial=bool(allow_partial)
        )
        got = [p for p in parts if p is not None]
        # By (distance, id), as a local index orders its results; padding last.
        D, I = _core.merge_topk([p[0] for p in got], [p[1] for p in got], arr.shape[0], k)
        answered = tuple(s.number for s, p in zip(slots, parts) if p is not None)
        return ShardedSearchResult(D, I, answered, tuple(missing))

    def search_scored(
        self, q: ArrayLike, k: int, *, decay: DecayPolicy | None = None, at_time: Any = None,
        depth_bias: float = 0.0, time_coef: float = 1.0, filters: Any = None, ef: int | None = None,
        recall: float | None = None, touch: bool = False, future_weight: float = DEFAULT_FUTURE_WEIGHT,
        future_tolerance: timedelta = DEFAULT_FUTURE_TOLERANCE, allow_partial: bool = False,
        prune: bool = True,
    ) -> ShardedScoredResults:  # fmt: skip
        """As :meth:`PoincareIndex.search_scored`, over the shards; ``at_time`` (default now) is
        fixed here once, so all shards score against the same moment; merged by score (best
        first, ties by id). ``touch=True`` counts an access on what the merge returns.

        Time partitions are read newest first in waves (1, 2, 4, ... shards); before each wave,
        a shard whose score bound (see :mod:`.pruning`) is below every query's k-th score so far
        is skipped, and a query goes only to the shards that can still improve it, so the
        result is the one reading every shard would give (exact on flat shards). The result
        says how many shards were read (``shards_read``, ``reads_per_query``); ``prune=False``
        reads every shard in one wave (to compare)."""
        arr, k = self._query(q, k)
        # One spec, checked here before any call: every shard scores against the same moment.
        spec = ScoringSpec.at(
            at_time, decay=decay, depth_bias=depth_bias, time_coef=time_coef,
            future_weight=future_weight, future_tolerance=future_tolerance,
        )  # fmt: skip
        self._check_filters(filters)
        for name, flag in (("touch", touch), ("allow_partial", allow_partial), ("prune", prune)):
            as_flag(flag, name)
        ef, recall = as_width_and_recall(ef, recall)
        options = {
            "scoring": spec, "filters": filters, "ef": ef, "recall": recall,
            "schema": self._schema if filters is not None else None,
        }  # fmt: skip
        slots = [s for s in self._set.slots if self._buckets is None or s.t_min is not None]
        bound = None
        if self._buckets is not None and prune:
            bound = ScoreBound.of(arr, self.curvature, spec)
            slots.sort(key=lambda s: -(s.t_max or 0))  # newest first (a local list)
        result = merge_scored(self._fan, slots, arr, k, options, bound, bool(allow_partial))
        if touch:
            self._touch(result)
        return result

    def _touch(self, result: ShardedScoredResults) -> None:
        """Counts one access on every returned point, on the shard it came from (logged). The
        bound on a shard's access counts is raised before the counts are, so a concurrent
        search never prunes by a bound below them."""
        with self._write_lock:
            live = {s.number: s for s in self._set.slots}
            slots, args = [], []
            for number in sorted(set(result.sources[result.ids >= 0].tolist())):
                if number not in live:  # dropped meanwhile
                    continue
                ids = result.ids[(result.sources == number) & (result.ids >= 0)]
                live[number].max_access += int(np.unique(ids, return_counts=True)[1].max())
                slots.append(live[number])
                args.append((ids,))
            if slots:
                self._write(slots, "touch", args)

    # ---- bulk build and files -------------------------------------------------------------
    from_dataset = classmethod(files.from_dataset)

    def save(self, path: str | os.PathLike[str] | None = None) -> None:
        """Every shard saves itself to ``path/shard-<number>`` (a path the shard's node can
        write: on a multi-node cluster, a shared file system); then ``path/sharded.json`` names
        them, with the format, its version and a checksum. ``path`` defaults to the
        ``checkpoint_path``; a save is the point restorations start from. A save that fails
        leaves the previous one loadable, saves to one path take turns, and a closed index
        refuses to save (ClosedError): see :func:`.files.save`."""
        if path is None:
            if self._checkpoint is None:
                raise ValueError("save() needs a path: this index has no checkpoint_path")
            path = self._checkpoint
        with self._write_lock:
            files.save(self, os.fspath(path))  # refuses a closed index itself (closed meanwhile)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, actor_options: dict[str, Any] | None = None,
        checkpoint_path: str | os.PathLike[str] | None = None, call_timeout: float = 60.0,
        restore_timeout: float = 600.0, max_shards: int | None = None,
    ) -> ShardedIndex:  # fmt: skip
        """The index ``save`` wrote; IndexFormatError for a missing, corrupted or crafted
        manifest, or shards that do not match it (kind, dimension, ids or stamps on the wrong
        shard). ``max_shards`` (time partitions) replaces the saved bound: the saved shards load
        whatever it is, and it bounds the opening of more."""
        return files.load(cls, os.fspath(path), actor_options=actor_options, checkpoint_path=checkpoint_path,
                          call_timeout=call_timeout, restore_timeout=restore_timeout,
                          max_shards=max_shards)  # fmt: skip

    def close(self) -> None:
        """Ends the shard actors (their indexes are gone unless saved). Waits for a running
        write or save; a search running meanwhile raises ClosedError unless its shards had
        answered, and every later call raises ClosedError. Idempotent."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            if self._fanout is not None:
                self._fanout.close()
            self._set.close()

    def __repr__(self) -> str:
        return (f"ShardedIndex(dim={self._dim}, shards={self.shards}, kind={self._kind!r}, "
                f"partition={self._partition!r})")  # fmt: skip


# Ray copies an argument of this size or more into its object store on every call it is passed
# to (smaller ones travel inline); its default max_direct_call_object_size.
_INLINE_LIMIT = 100 * 1024
# Up to this size a large array goes inline in row chunks under _INLINE_LIMIT; beyond it, it is
# put into the object store once for all shards. A sharded search of 1,000 64-d queries (256 KB)
# took 0.2-1.1 ms less in chunks over three runs; from 4,000 queries (1 MB) the two were a draw
# or the put was ahead (benchmarks/BENCHMARKS.md, Step 9, third sitting).
_SPLIT_LIMIT = 512 * 1024
# A chunk's bytes at most: under _INLINE_LIMIT with room for what Ray wraps around it.
_CHUNK_BYTES = _INLINE_LIMIT - 4096


def _handed_over(method: str, question: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arguments of ``Shard.query`` that send the same ``method(*question)`` to every shard.
    An array under 100 KB goes as it is. One up to _SPLIT_LIMIT goes as row chunks of under
    100 KB, each an argument of its own, so that all travel inline with the call (the shard joins
    them); a larger one is put into Ray's object store once, and its reference is an argument
    of its own, so that every shard reads that one copy. For a batch of 1,000 64-d queries
    (256 KB) the object store's copy cost the local Raylet 1.4-1.7 ms of CPU a search."""
    import ray

    args = list(question)
    joined: list[tuple[int, int]] = []
    chunks: list[np.ndarray] = []
    for position, x in enumerate(question):
        if not isinstance(x, np.ndarray) or x.nbytes < _INLINE_LIMIT:
            continue
        args[position] = None
        if x.nbytes <= _SPLIT_LIMIT and x.ndim >= 1 and x.nbytes // x.shape[0] < _CHUNK_BYTES:
            rows = _CHUNK_BYTES // (x.nbytes // x.shape[0])
            parts = [x[i : i + rows] for i in range(0, x.shape[0], rows)]
        else:  # one reference, an argument of its own: Ray resolves only those to their value
            parts = [ray.put(x)]
        joined.append((position, len(parts)))
        chunks.extend(parts)
    return (method, tuple(args), tuple(joined), *chunks) if joined else (method, tuple(args))


def _dt(us: int | None) -> np.datetime64 | None:
    return None if us is None else np.datetime64(int(us), "us")
