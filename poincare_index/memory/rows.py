"""Input checks for memories: ids, texts, times and metadata rows, one batch at a time."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from .. import _time
from ..columns import check_window
from .codec import check_metadata_value

__all__ = ["BUILTIN_COLUMNS", "Batch", "make_batch", "metadata_columns"]

# Columns every memory has; metadata keys may not reuse them.
BUILTIN_COLUMNS = ("id", "text", "t", "valid_from", "valid_until", "access_count")


@dataclass
class Batch:
    """Validated memories ready to store: times in UTC microseconds (open ends as sentinels)."""

    ids: list[str]
    texts: list[str]
    t: NDArray[np.int64]
    valid_from: NDArray[np.int64]
    valid_until: NDArray[np.int64]
    metadata: list[dict[str, Any]]

    def __len__(self) -> int:
        return len(self.ids)


def check_utf8(value: str, what: str) -> str:
    """Strings are stored as UTF-8: lone surrogates (e.g. from bad decoding) are refused."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not valid Unicode text ({exc.reason} at {exc.start})") from None
    return value


def _check_id(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{where}: id must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{where}: id must not be empty")
    return check_utf8(value, f"{where}: id")


def _check_metadata(meta: Any, where: str) -> dict[str, Any]:
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise TypeError(f"{where}: metadata must be a dict, got {type(meta).__name__}")
    out = {}
    for key, value in meta.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"{where}: metadata keys must be non-empty str, got {key!r}")
        if key in BUILTIN_COLUMNS:
            raise ValueError(f"{where}: metadata key {key!r} clashes with the built-in column {key!r}")
        check_utf8(key, f"{where}: metadata key")
        check_metadata_value(key, value, where)
        if isinstance(value, str):
            check_utf8(value, f"{where}: metadata {key!r}")
        out[key] = value
    return out


def make_batch(
    texts: Sequence[str],
    ids: Sequence[Any] | None,
    t: Any,
    valid_from: Any,
    valid_until: Any,
    metadata: Sequence[Any] | None,
    now_us: int,
) -> Batch:
    """Validates one batch (TypeError/ValueError naming the entry); generates missing ids."""
    n = len(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
        check_utf8(text, f"texts[{i}]")
        if not text.strip():
            # Every empty text would embed to one point and match every query alike.
            raise ValueError(f"texts[{i}] is empty or only whitespace: there is nothing to remember")
    if ids is None:
        id_list = [uuid.uuid4().hex for _ in range(n)]
    else:
        if isinstance(ids, str) or len(ids) != n:
            raise ValueError(f"ids must be a sequence of {n} str")
        id_list = [uuid.uuid4().hex if v is None else _check_id(v, f"memory {i}") for i, v in enumerate(ids)]
        if len(set(id_list)) != n:
            raise ValueError("ids holds duplicates")
    t_us = _time.as_time_column(t, n, "t", default=now_us if t is None else None)
    vf = _time.as_time_column(valid_from, n, "valid_from", open_end=_time.OPEN_START)
    vu = _time.as_time_column(valid_until, n, "valid_until", open_end=_time.OPEN_END)
    check_window(vf, vu)
    if metadata is None:
        metas: list[dict[str, Any]] = [{} for _ in range(n)]
    else:
        if isinstance(metadata, Mapping) or len(metadata) != n:
            raise ValueError(f"metadata must be a sequence of {n} dicts (one per memory)")
        given = [None] * n if ids is None else list(ids)  # the caller's ids name the rows too
        metas = [
            _check_metadata(m, f"memory {i}" if given[i] is None else f"memory {i} (id {given[i]!r})")
            for i, m in enumerate(metadata)
        ]
    return Batch(id_list, list(texts), t_us, vf, vu, metas)


def metadata_columns(metas: list[dict[str, Any]]) -> pa.Table | None:
    """Rows of metadata -> a table (missing keys null). One key holds one type: ints widen to
    float64 when the key also holds floats (as against the stored columns, see
    ``_metadata.concat_metadata``); any other mix is a ValueError naming the key and both types."""
    keys: list[str] = []
    for m in metas:
        keys.extend(k for k in m if k not in keys)
    if not keys:
        return None
    columns = {}
    for key in keys:
        values = [m.get(key) for m in metas]
        _check_one_type(key, values)
        if any(isinstance(v, datetime) for v in values):
            # Through the one time rule (a naive datetime is local time), as the log's codec
            # reads them: Arrow alone would keep a naive one's wall clock as if it were UTC.
            columns[key] = _time.datetimes_to_arrow(values)
            continue
        try:
            arr = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(f"metadata {key!r} mixes value types: {exc}") from None
        except OverflowError:
            raise ValueError(f"metadata {key!r} holds an integer outside the int64 range") from None
        if pa.types.is_timestamp(arr.type):
            arr = arr.cast(pa.timestamp("us", tz="UTC"))
        columns[key] = arr
    return pa.table(columns)


_EXACT = 2**53  # Arrow casts an int64 to float64 within +-2**53 only


def _check_one_type(key: str, values: list[Any]) -> None:
    """ValueError unless the values (checked ones: see codec.check_metadata_value) are of one
    type, ints and floats counting as one (Arrow would read 1 after a datetime as 1 us after
    1970, and True after a float as 1.0); an int outside +-2**53 among floats is refused."""
    first: dict[type, int] = {}
    for i, v in enumerate(values):
        if v is not None:
            first.setdefault(
                next(t for t in (bool, int, float, str, datetime, object) if isinstance(v, t)), i
            )
    kinds = list(first)
    if len(kinds) == 2 and set(kinds) == {int, float}:
        big = next((v for v in values if isinstance(v, int) and not -_EXACT <= v <= _EXACT), None)
        if big is not None:
            raise ValueError(
                f"metadata {key!r} mixes int and float values, which share a float64 column, but the "
                f"int {big} is outside the integers float64 holds exactly (+-2**53)"
            )
    elif len(kinds) > 1:
        a, b = kinds[0], kinds[1]
        raise ValueError(
            f"metadata {key!r} holds {a.__name__} (memory {first[a]}) and {b.__name__} (memory "
            f"{first[b]}) values: one key takes one type (ints widen to float)"
        )


def times_as_datetime64(us: NDArray[np.int64], open_end: int) -> NDArray[np.datetime64]:
    """Microseconds -> datetime64[us] with NaT where the value is the open-end sentinel."""
    out = us.astype("datetime64[us]")
    out[us == open_end] = np.datetime64("NaT")
    return out


def merged_metadata(old: Mapping[str, Any], changes: Any) -> dict[str, Any]:
    """``old`` with the keys of ``changes`` (a dict, or None for none) merged in; a None value
    removes its key. TypeError when ``changes`` is not a dict."""
    meta = dict(old)
    if changes is not None:
        if not isinstance(changes, Mapping):
            raise TypeError(f"metadata must be a dict, got {type(changes).__name__}")
        meta.update(changes)
    return {k: v for k, v in meta.items() if v is not None}
