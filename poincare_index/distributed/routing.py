"""Which shard a row goes to: hash partitions by id, time partitions by stamp, and an add checked
on the driver (or a Ray Data worker) exactly as the local index checks it, before any shard gets
a row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _time
from .._metadata import metadata_table
from .._validation import as_ids, as_matrix
from ..columns import check_window

__all__ = ["shard_of", "TimeBuckets", "CheckedRows", "check_add"]


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


@dataclass(frozen=True)
class TimeBuckets:
    """Time partitions: bucket b holds the stamps in [origin + b span, origin + (b + 1) span)."""

    origin_us: int
    span_us: int

    @classmethod
    def of(cls, span: Any, origin: Any) -> TimeBuckets:
        """From a timedelta span (at least one second) and an origin time (None: 1970-01-01 UTC)."""
        if not isinstance(span, timedelta):
            raise TypeError(f"time_span must be a datetime.timedelta, got {type(span).__name__}")
        if span < timedelta(seconds=1):
            raise ValueError(f"time_span must be at least one second, got {span}")
        origin_us = 0 if origin is None else _time.as_time_scalar(origin, "time_origin")
        return cls(origin_us, span // timedelta(microseconds=1))

    def bucket_of(self, t_us: NDArray[np.int64]) -> NDArray[np.int64]:
        """The bucket of each stamp (floor division: stamps before the origin get negative ones)."""
        return (t_us - self.origin_us) // self.span_us

    def start_us(self, bucket: int) -> int:
        """The first microsecond of ``bucket``."""
        return self.origin_us + bucket * self.span_us

    def end_us(self, bucket: int) -> int:
        """One past the last microsecond of ``bucket``."""
        return self.origin_us + (bucket + 1) * self.span_us


@dataclass(frozen=True)
class CheckedRows:
    """An add that passed every check: float32 points, ids, times in microseconds (open window
    ends as the stored sentinels) and the metadata table (or None)."""

    x: NDArray[np.float32]
    ids: NDArray[np.int64]
    t_us: NDArray[np.int64]
    valid_from_us: NDArray[np.int64]
    valid_until_us: NDArray[np.int64]
    metadata: Any

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def split(self, owner: NDArray[np.int64]) -> list[tuple[int, tuple[Any, ...]]]:
        """[(key, (x, ids, (t, valid_from, valid_until), metadata))] per distinct ``owner`` key in
        ascending order, the arguments of ``Shard.add`` (times as datetime64[us], open ends NaT)."""
        parts = []
        for key in np.unique(owner).tolist():
            p = np.flatnonzero(owner == key)
            times = (
                _as_datetime64(self.t_us[p], None),
                _as_datetime64(self.valid_from_us[p], _time.OPEN_START),
                _as_datetime64(self.valid_until_us[p], _time.OPEN_END),
            )
            meta = None if self.metadata is None else self.metadata.take(p)
            parts.append((int(key), (self.x[p], self.ids[p], times, meta)))
        return parts


def check_add(
    checker: Any, dim: int, x: ArrayLike, ids: ArrayLike, t: Any, valid_from: Any, valid_until: Any,
    metadata: Any, *, now_us: int | None = None,
) -> CheckedRows:  # fmt: skip
    """An add checked as the local index checks it (points, ids, times, window, metadata); rows
    without ``t`` are stamped ``now_us`` (default now). Raises before anything is sent."""
    arr = as_matrix(x, dim, "x")
    id_arr = as_ids(ids)
    n = arr.shape[0]
    if id_arr.shape[0] != n:
        raise ValueError(f"x has {n} rows but ids has {id_arr.shape[0]} entries")
    default = (_time.now_micros() if now_us is None else now_us) if t is None else None
    t_us = _time.as_time_column(t, n, "t", default=default)
    vf = _time.as_time_column(valid_from, n, "valid_from", open_end=_time.OPEN_START)
    vu = _time.as_time_column(valid_until, n, "valid_until", open_end=_time.OPEN_END)
    check_window(vf, vu)
    meta = metadata_table(metadata, n)
    if n:
        checker.validate_points(arr, "x")
    if np.any(id_arr == -1):
        raise ValueError(f"ids row {int(np.flatnonzero(id_arr == -1)[0])}: -1 is reserved for padding")
    uniq, first = np.unique(id_arr, return_index=True)
    if uniq.shape[0] != n:
        dup = int(np.setdiff1d(np.arange(n), first)[0])
        raise ValueError(f"ids row {dup}: id {int(id_arr[dup])} appears twice in this call")
    return CheckedRows(arr, id_arr, t_us, vf, vu, meta)


def _as_datetime64(us: NDArray[np.int64], open_value: int | None) -> NDArray[Any]:
    """Microseconds as datetime64[us], open ends (the stored sentinels) as NaT."""
    out = us.astype("datetime64[us]")
    if open_value is not None:
        out[us == open_value] = np.datetime64("NaT")
    return out


@dataclass(frozen=True)
class HashRoute:
    """Rows to shard numbers by id (``shard_of``)."""

    shards: int

    def __call__(self, rows: CheckedRows) -> NDArray[np.int64]:
        return shard_of(rows.ids, self.shards)


@dataclass(frozen=True)
class TimeRoute:
    """Rows to time buckets by stamp."""

    buckets: TimeBuckets

    def __call__(self, rows: CheckedRows) -> NDArray[np.int64]:
        return self.buckets.bucket_of(rows.t_us)
