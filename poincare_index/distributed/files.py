"""A sharded index on disk and from a Ray Data build: the manifest (format, version, checksum,
the shards and their time ranges) and the checks that refuse shards that do not match it."""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _core, _time
from .._closing import refuse_if_closed
from .._interrupts import fault_point
from .._validation import as_int_in, as_positive_int
from ._ray_support import import_ray
from .routing import HashRoute, TimeRoute, shard_of

if TYPE_CHECKING:
    from .sharded import ShardedIndex

FORMAT = "poincare-sharded-index"
FORMAT_VERSION = 2  # 1: hash shards only, "shards" a count
MAX_SHARDS = 4096  # a manifest asking for more is crafted or corrupt, not started
_SHARD_DIR = re.compile(r"^shard-\d+(-\d+)?$")  # shard-<number>-<seq>; version 1: shard-<number>


def save(index: ShardedIndex, path: str) -> None:
    """Each shard to a new directory ``path/shard-<number>-<seq>``, named by the sequence number
    of the last write it holds, then the manifest. A shard's directory is never written twice,
    so the one a restoration would read stays whole until a newer save of that shard has
    answered: each answered save becomes its shard's restore point at once (with the write log
    trimmed to what the file does not hold), whatever the other shards do. Directories no
    manifest or restore point names are deleted after the manifest is written.

    A save never replaces a good one with a worse one: a closed index is refused (ClosedError)
    before anything is written, the manifest is checked as a load checks it before it replaces
    the old one (a hash index with no shard cannot be saved), a shard that fails leaves the old
    manifest and every directory it names in place, and saves to one path from several threads
    or processes run one after the other (a lock on the directory)."""
    from .._durable import folder_lock, write_json_atomic

    refuse_if_closed(index, "save", "index")
    root = Path(os.path.abspath(path))  # the shards' working directories are not the driver's
    root.mkdir(parents=True, exist_ok=True)
    with folder_lock(root):
        refuse_if_closed(index, "save", "index")  # closed while this call waited
        slots = list(index._set.slots)
        buckets = index._buckets
        body = {
            "format": FORMAT, "version": FORMAT_VERSION, "kind": index.kind, "dim": index.dim,
            "partition": index.partition, "next_id": index._next_id,
            "options": dict(index._options, **({} if buckets is None else {"max_shards": index.max_shards})),
            "time": None if buckets is None else {"origin_us": buckets.origin_us, "span_us": buckets.span_us},
            "shards": [{"number": s.number, "bucket": s.bucket} for s in slots],
        }  # fmt: skip
        try:
            _entries(body["shards"], index.partition)
        except ValueError as exc:
            raise ValueError(f"{root}: this index cannot be saved, a load would refuse it: {exc}") from None
        dirs: list[str] = [""] * len(slots)

        def saved(i: int, answer: Any) -> None:
            dirs[i] = str(root / f"shard-{slots[i].number}-{int(answer[1])}")
            index._set.mark_saved(slots[i], dirs[i], int(answer[1]))

        index._set.call(slots, "save_as", [(str(root), s.number) for s in slots], on_answer=saved)
        for entry, slot, d in zip(body["shards"], slots, dirs):
            entry.update(dir=Path(d).name, seq=slot.saved_seq)
        fault_point("sharded.save:manifest")
        write_json_atomic(root / "sharded.json", body)
        fault_point("sharded.save:cleanup")
        keep = {Path(d).name for d in dirs} | {
            Path(s.saved_path).name
            for s in index._set.slots
            if s.saved_path and Path(s.saved_path).parent == root
        }
        for old in root.iterdir():
            stale = _SHARD_DIR.match(old.name) and old.name not in keep
            if old.is_dir() and (stale or old.name.startswith(".staging-")):  # a save that died midway
                shutil.rmtree(old)


def load(cls: type[ShardedIndex], path: str, **kwargs: Any) -> ShardedIndex:
    """The index saved at ``path``. A save to it running meanwhile finishes first, and none
    starts until the shards have loaded: it would delete the directories they read."""
    from .._durable import folder_lock

    root = Path(os.path.abspath(path))
    if not root.is_dir():
        return _load(cls, root, **kwargs)  # raises: no manifest there
    with folder_lock(root, shared=True):
        return _load(cls, root, **kwargs)


def _load(
    cls: type[ShardedIndex], root: Path, *, max_shards: int | None = None, **kwargs: Any
) -> ShardedIndex:
    from .._durable import read_json_checked

    doc = read_json_checked(root / "sharded.json", "the sharded index manifest")
    if doc.get("format") != FORMAT or doc.get("version") not in (1, FORMAT_VERSION):
        raise _core.IndexFormatError(
            f"{root}: not a sharded index of format version 1 or {FORMAT_VERSION}: "
            f"{json.dumps({k: doc.get(k) for k in ('format', 'version')})}"
        )
    if max_shards is not None:  # the caller's, checked apart from what the manifest says
        as_int_in(max_shards, "max_shards", 1, MAX_SHARDS)
        if doc.get("partition") != "time":
            raise ValueError(f"max_shards applies to partition='time'; {root} holds a hash partition")
    try:
        options = dict(doc["options"])
        partition = str(doc["partition"])
        if doc["version"] == 1:
            count = int(doc["shards"])
            if not 1 <= count <= MAX_SHARDS:
                raise ValueError(f"shards = {count} is outside [1, {MAX_SHARDS}]")
            listed = [{"number": i, "bucket": None} for i in range(count)]
        else:
            listed = list(doc["shards"])
        entries = _entries(listed, partition)
        missing = [e["dir"] for e in entries if not (root / e["dir"]).is_dir()]
        if missing:
            raise ValueError(f"{missing[0]} is missing")
        for e in entries:
            e["path"] = str(root / e["dir"])
        time = doc.get("time") if partition == "time" else None
        if partition == "time" and not isinstance(time, dict):
            raise ValueError("a time partition needs its origin and span")
        if partition == "time" and max_shards is None and "max_shards" in options:  # else the default
            max_shards = int(options["max_shards"])
        index = cls(
            int(doc["dim"]), kind=str(doc["kind"]), partition=partition,
            curvature=float(options["curvature"]), M=int(options["M"]),
            ef_construction=int(options["ef_construction"]),
            ef_search=None if options["ef_search"] is None else int(options["ef_search"]),
            seed=int(options["seed"]), threads_per_shard=int(options["num_threads"]),
            storage=str(options.get("storage", "f32")),  # manifests before compressed storage: f32
            time_span=None if time is None else timedelta(microseconds=int(time["span_us"])),
            time_origin=None if time is None else np.datetime64(int(time["origin_us"]), "us"),
            max_shards=max_shards, _restored=entries, **kwargs,
        )  # fmt: skip
        next_id = int(doc.get("next_id", 0))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise _core.IndexFormatError(f"{root}: the sharded index manifest is invalid: {exc}") from None
    index._next_id = max(index._next_id, next_id)
    return index


def _entries(listed: list[Any], partition: str) -> list[dict[str, Any]]:
    """The manifest's shard list checked: at most MAX_SHARDS, distinct numbers, hash shards
    numbered 0..n-1 in order, every time shard with a distinct bucket."""
    if not 1 <= len(listed) <= MAX_SHARDS and not (partition == "time" and len(listed) == 0):
        raise ValueError(f"{len(listed)} shards is outside [1, {MAX_SHARDS}]")
    entries = []
    for e in listed:
        number = int(e["number"])
        seq = int(e.get("seq", 0))
        name = str(e.get("dir", f"shard-{number}"))
        if seq < 0 or name not in (f"shard-{number}", f"shard-{number}-{seq}"):
            raise ValueError(f"shard {number}: directory {name!r} is not shard-{number}-{seq}")
        bucket = None if e["bucket"] is None else int(e["bucket"])
        entries.append({"number": number, "bucket": bucket, "dir": name, "seq": seq})
    numbers = [e["number"] for e in entries]
    if len(set(numbers)) != len(numbers) or min(numbers, default=0) < 0:
        raise ValueError(f"shard numbers {numbers[:10]} repeat or are negative")
    if partition == "hash" and numbers != list(range(len(entries))):
        raise ValueError(f"hash shards must be numbered 0..{len(entries) - 1} in order, got {numbers[:10]}")
    if partition == "time":
        buckets = [e["bucket"] for e in entries]
        if None in buckets or len(set(buckets)) != len(buckets):
            raise ValueError("every time shard needs its own time range")
    return entries


def check_restored(
    index: ShardedIndex, entries: list[dict[str, Any]], described: list[dict[str, Any]]
) -> None:
    """IndexFormatError unless every loaded shard matches the manifest: kind, dimension and
    curvature; hash shards hold only their ids; time shards only stamps of their range, and no id
    on two shards."""
    expected = (index.kind, index.dim, index.curvature)
    for e, d in zip(entries, described):
        if (d["kind"], d["dim"], d["curvature"]) != expected:
            raise _core.IndexFormatError(
                f"shard {e['number']} at {e['path']} does not match the manifest: {d}"
            )
    all_ids = index._call(index._set.slots, "ids")
    if index._buckets is None:
        for i, (e, ids) in enumerate(zip(entries, all_ids)):
            wrong = ids[shard_of(ids, len(entries)) != i]
            if wrong.size:
                raise _core.IndexFormatError(
                    f"shard {i} at {e['path']} holds id {int(wrong[0])}, which belongs to another shard"
                )
        return
    for e, d in zip(entries, described):
        start, end = index._buckets.start_us(e["bucket"]), index._buckets.end_us(e["bucket"])
        if d["t_min"] is not None and not (start <= d["t_min"] and d["t_max"] < end):
            raise _core.IndexFormatError(
                f"shard {e['number']} at {e['path']} holds stamps from {np.datetime64(d['t_min'], 'us')} to "
                f"{np.datetime64(d['t_max'], 'us')}, outside its range [{np.datetime64(start, 'us')}, "
                f"{np.datetime64(end, 'us')})"
            )
    twice = _repeated_id(all_ids)
    if twice is not None:
        raise _core.IndexFormatError(f"{Path(entries[0]['path']).parent}: id {twice} is on two shards")


def _repeated_id(ids_per_shard: list[np.ndarray]) -> int | None:
    """An id that more than one of the shards' id arrays holds, or None."""
    joined = np.concatenate(ids_per_shard) if ids_per_shard else np.zeros(0, np.int64)
    uniq, counts = np.unique(joined, return_counts=True)
    return int(uniq[counts > 1][0]) if np.any(counts > 1) else None


def from_dataset(
    cls: type[ShardedIndex], ds: Any, *, vector_column: str, id_column: str, time_column: str | None = None,
    metadata_columns: list[str] | None = None, dim: int | None = None, batch_size: int = 8192,
    concurrency: int = 2, at_time: Any = None, **options: Any,
) -> ShardedIndex:  # fmt: skip
    """A new index built from a ``ray.data.Dataset``: its batches are checked and routed by Ray
    Data workers (``concurrency`` of them) straight to the shard actors, so a build runs on every
    node and no row passes through the driver. ``dim`` defaults to the length of the first
    vector; rows without ``time_column`` are stamped ``at_time`` (default now); ``options`` are
    the constructor's (``shards``, ``kind``, ``partition``, ...). Time partitions take one more
    pass over the dataset first, to open the shards of its time ranges. A bad batch fails the
    build with its error (ValueError naming the row or id); batches already routed stay added.
    With a ``checkpoint_path`` the build is saved there before it returns."""
    import_ray()
    from ray.data import Dataset

    if not isinstance(ds, Dataset):
        raise TypeError(f"ds must be a ray.data.Dataset, got {type(ds).__name__}")
    names = set(ds.columns())
    roles = [("vector_column", vector_column), ("id_column", id_column), ("time_column", time_column)]
    roles += [("metadata_columns", m) for m in metadata_columns or []]
    for role, name in roles:
        if name is not None and name not in names:
            raise ValueError(f"{role} {name!r} is not a column of the dataset ({', '.join(sorted(names))})")
    workers = as_positive_int(concurrency, "concurrency")
    now_us = _time.as_time_scalar(at_time, "at_time")
    if dim is None:
        first = ds.take(1)
        if not first:
            raise ValueError("the dataset is empty and no dim was given")
        dim = int(np.asarray(first[0][vector_column]).shape[-1])
    index = cls(dim, **options)
    from ._shard import Router

    if index._buckets is None:
        route: Any = HashRoute(index.shards)
        actors = {s.number: s.actor for s in index._set.slots}
    else:
        route = TimeRoute(index._buckets)
        if time_column is None:
            keys = [int(index._buckets.bucket_of(np.array([now_us]))[0])]
        else:
            buckets = index._buckets

            def buckets_of(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
                values = batch[time_column]
                return {
                    "bucket": np.unique(
                        buckets.bucket_of(_time.as_time_column(values, len(values), time_column))
                    )
                }

            found = ds.map_batches(buckets_of, batch_format="numpy", batch_size=batch_size).unique("bucket")
            keys = sorted(int(b) for b in found)
        actors = {b: slot.actor for b, slot in zip(keys, index._slots_for_buckets(keys))}
    columns = {"vector": vector_column, "id": id_column, "time": time_column,
               "metadata": list(metadata_columns or []), "now_us": now_us}  # fmt: skip
    try:
        added = ds.map_batches(
            Router, fn_constructor_args=(actors, index.dim, index.curvature, columns, route),
            batch_size=batch_size, batch_format="numpy", concurrency=workers,
        ).sum("added")  # fmt: skip
    except Exception as exc:
        cause = _user_cause(exc)
        if cause is not None:
            raise cause from None
        raise
    index._adopt(index._call(index._set.slots, "describe"))  # the rows arrived past the driver
    if int(added or 0) != index.ntotal:
        raise RuntimeError(f"from_dataset routed {added} rows but the shards hold {index.ntotal}")
    if index._buckets is not None:  # batches are checked one by one: an id may be in two of them
        twice = _repeated_id(index._call(index._set.slots, "ids"))
        if twice is not None:
            raise ValueError(f"{id_column}: id {twice} appears in two rows of the dataset")
    if index._checkpoint is not None:
        index.save()
    return index


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
