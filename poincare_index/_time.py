"""Times in, times out: everything inside is int64 microseconds since the Unix epoch, UTC.

Accepted on input: ``datetime`` (aware ones are converted to UTC), ``numpy.datetime64`` scalars
and arrays (read as UTC), pyarrow timestamp arrays (any unit; with a time zone they are instants,
without one they are read as UTC), ``pandas.Timestamp`` (a ``datetime``), and lists of these.
``None``/NaT/null is a missing value, which only the validity-window columns allow (an open end).

The one rule for naive values: a naive ``datetime`` (no tzinfo; an ISO-8601 string without an
offset is one) is the local time of the process, as Python's own ``datetime.timestamp()`` and
``astimezone()`` read it, so ``datetime.now()`` means now in every time zone (read as UTC it put
a memory 9 hours in the future in Tokyo, weighing 1e-6). numpy datetime64 values and Arrow
timestamps without a zone are array data with no notion of a local zone: they are UTC. Where
the rule changes a result (the local zone is not UTC at that time), the first naive value read
in a process raises one :class:`NaiveTimeWarning` naming the rule and the fix (aware values).
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
from numpy.typing import NDArray

# Open ends of a validity window, as stored (and as null in the Arrow columns).
OPEN_START = np.iinfo(np.int64).min
OPEN_END = np.iinfo(np.int64).max
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US_PER_HOUR = 3_600_000_000
# Times are accepted from 1678-01-01 to 2261-12-31 (UTC), what numpy's datetime64[ns] carries:
# every difference of two of them fits an int64 with room, so no time arithmetic can overflow.
MIN_TIME_US = -9_214_560_000_000_000  # 1678-01-01T00:00:00Z
MAX_TIME_US = 9_214_646_400_000_000 - 1  # just before 2262-01-01T00:00:00Z


def _check_range(us: NDArray[np.int64], missing: NDArray[np.bool_], name: str) -> None:
    flat, gone = us.reshape(-1), np.broadcast_to(missing, us.shape).reshape(-1)
    bad = ((flat < MIN_TIME_US) | (flat > MAX_TIME_US)) & ~gone
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise _out_of_range(f"{name} row {row}" if us.ndim else name, int(flat[row]))


def _out_of_range(where: str, us: int) -> ValueError:
    return ValueError(
        f"{where} ({_describe_micros(us)}) is outside the supported times 1678-01-01 .. 2261-12-31 UTC"
    )


def _describe_micros(us: int) -> str:
    try:
        return micros_to_datetime(us).isoformat()
    except OverflowError:
        return f"{us} us since 1970"


class NaiveTimeWarning(UserWarning):
    """A naive datetime was read as local time in a process whose zone is not UTC (once per
    process): a value meant as UTC, e.g. from ``datetime.utcnow()``, lands hours off."""


_naive_warning = threading.Lock()  # held by the one call that warns; never released after it
# The warning points at the first frame outside these packages: the user's call.
_PACKAGES = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), name, "")
    for name in ("poincare_index", "poincare_memory")
)


def _user_stacklevel() -> int:
    """warnings.warn's stacklevel, called from the caller of this function, that names the
    first frame outside the package."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGES):
        frame, level = frame.f_back, level + 1
    return level


def _naive_as_utc(value: datetime) -> datetime:
    """A naive datetime read as local time (the rule above), converted to UTC."""
    local = value.astimezone()
    offset = local.utcoffset()
    if offset and _naive_warning.acquire(blocking=False):
        hours = offset / timedelta(hours=1)
        warnings.warn(
            NaiveTimeWarning(
                f"a naive datetime ({value.isoformat()}) is read as this process's local time "
                f"({local.tzname()}, UTC{hours:+g} h), the one rule for naive values (as "
                "datetime.timestamp() reads them); a naive value meant as UTC, such as "
                f"datetime.utcnow(), lands {abs(hours):g} h off. Pass aware datetimes "
                "(datetime.now(timezone.utc), or .replace(tzinfo=timezone.utc)) to mean UTC. "
                "Shown once per process."
            ),
            stacklevel=_user_stacklevel(),
        )
    return local.astimezone(timezone.utc)


def now_micros() -> int:
    """The current time (UTC) in microseconds; the one place a default 'now' is read."""
    return datetime_to_micros(datetime.now(timezone.utc))


def datetime_to_micros(value: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is local time (see the module docstring)."""
    if value.tzinfo is None or value.utcoffset() is None:
        try:
            value = _naive_as_utc(value)
        except (OverflowError, OSError, ValueError):
            raise ValueError(
                f"{value.isoformat()} (a naive datetime, read as local time) is outside the supported "
                "times 1678-01-01 .. 2261-12-31 UTC"
            ) from None
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def datetimes_to_arrow(values: Sequence[Any]) -> Any:
    """A column of Python datetimes (and None) as timestamp[us, UTC], each read by the rule
    above (Arrow alone keeps a naive datetime's wall clock, i.e. reads it as UTC)."""
    import pyarrow as pa

    us = [None if v is None else datetime_to_micros(v) for v in values]
    return pa.array(us, type=pa.int64()).cast(pa.timestamp("us", tz="UTC"))


def with_local_zone(value: Any) -> Any:
    """``value`` with every naive datetime in it (top level, or in lists, tuples and dict values)
    given the local zone, as the rule reads it: for arguments sent to another process, which
    may run in another zone."""
    if isinstance(value, datetime):
        return _naive_as_utc(value) if value.tzinfo is None or value.utcoffset() is None else value
    if isinstance(value, (list, tuple)):
        return type(value)(with_local_zone(v) for v in value)
    if isinstance(value, dict):
        return {k: with_local_zone(v) for k, v in value.items()}
    return value


def micros_to_datetime(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=int(us))


def timedelta_hours(value: timedelta) -> float:
    return value / timedelta(hours=1)


def _scalar_micros(value: Any, name: str) -> int | None:
    """One time value -> microseconds, or None for a missing value."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return datetime_to_micros(value)
    if isinstance(value, np.datetime64):
        if np.isnat(value):
            return None
        return int(value.astype("datetime64[us]").astype(np.int64))
    try:
        import pyarrow as pa

        if isinstance(value, pa.TimestampScalar):
            return None if not value.is_valid else _scalar_micros(value.as_py(), name)
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        pass
    raise TypeError(
        f"{name} must hold datetimes (datetime, numpy.datetime64 or pyarrow timestamps), "
        f"got {type(value).__name__}"
    )


def as_time_scalar(value: Any, name: str) -> int:
    """A single time (e.g. ``at_time``) -> microseconds; None means now."""
    if value is None:
        return now_micros()
    us = _scalar_micros(value, name)
    if us is None:
        raise ValueError(f"{name} is NaT")
    return check_micros(us, name)


def check_micros(us: int, name: str) -> int:
    """``us`` (microseconds since the epoch, UTC) if it lies in the supported times; ValueError
    naming ``name`` otherwise."""
    if not MIN_TIME_US <= us <= MAX_TIME_US:  # a plain comparison: every search passes here
        raise _out_of_range(name, us)
    return us


def as_time_column(
    values: Any, n: int, name: str, *, open_end: int | None = None, default: int | None = None
) -> NDArray[np.int64]:
    """n times -> int64 microseconds. ``values`` None gives ``default`` on every row. A missing
    value (None/NaT/null) becomes ``open_end`` (OPEN_START or OPEN_END: a window end that is
    open); with ``open_end`` None it is a ValueError.

    A scalar is broadcast to all n rows. Raises TypeError for non-time values and ValueError for
    a wrong length or a missing value where none is allowed, naming the row.
    """
    nullable = open_end is not None
    if values is None:
        if default is not None:
            return np.full(n, default, dtype=np.int64)
        if nullable:
            return np.full(n, open_end, dtype=np.int64)
        raise ValueError(f"{name} is required")
    raw, null = _column_micros(values, name)
    _check_range(raw, null, name)
    if raw.ndim == 0:
        raw, null = np.full(n, raw, dtype=np.int64), np.full(n, bool(null))
    if raw.shape[0] != n:
        raise ValueError(f"{name} has {raw.shape[0]} entries, expected {n} (one per row of x)")
    if null.any():
        if not nullable:
            row = int(np.flatnonzero(null)[0])
            raise ValueError(f"{name} row {row} is missing (NaT/None); every point needs a time")
        raw = np.where(null, open_end, raw)
    return np.ascontiguousarray(raw, dtype=np.int64)


def _column_micros(values: Any, name: str) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """(microseconds, is-missing) for a column-like or scalar input."""
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        if not pa.types.is_timestamp(values.type):
            raise TypeError(f"{name} must be a timestamp array, got Arrow type {values.type}")
        us = values.cast(pa.timestamp("us", tz=values.type.tz), safe=False)
        null = np.asarray(us.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        raw = us.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        return np.asarray(raw, dtype=np.int64), null
    if isinstance(values, np.ndarray):
        if values.dtype.kind == "M":
            if values.ndim > 1:
                raise ValueError(f"{name} must be 1-dimensional, got shape {values.shape}")
            null = np.isnat(values)
            raw = values.astype("datetime64[us]").astype(np.int64)
            return np.where(null, 0, raw), null
        if values.dtype == object and values.ndim == 1:
            values = list(values)
        elif values.ndim == 0 and values.dtype == object:
            values = values.item()
        else:
            raise TypeError(f"{name} must hold datetimes, got a numpy array of dtype {values.dtype}")
    if isinstance(values, (list, tuple)):
        out = np.zeros(len(values), dtype=np.int64)
        null = np.zeros(len(values), dtype=bool)
        for i, v in enumerate(values):
            try:
                us = _scalar_micros(v, name)
            except TypeError:
                raise TypeError(f"{name} row {i} is a {type(v).__name__}, not a datetime") from None
            if us is None:
                null[i] = True
            else:
                out[i] = us
        return out, null
    us = _scalar_micros(values, name)
    return np.asarray(0 if us is None else us, dtype=np.int64), np.asarray(us is None)


def hours_between(later_us: NDArray[np.int64] | int, earlier_us: NDArray[np.int64] | int) -> Any:
    """(later - earlier) in hours, float64."""
    return (np.asarray(later_us, dtype=np.int64) - np.asarray(earlier_us, dtype=np.int64)) / float(
        _US_PER_HOUR
    )
