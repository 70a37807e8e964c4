"""Reading fields out of files we did not necessarily write: every JSON field and Arrow table a
loader uses goes through these, so a crafted or damaged file raises IndexFormatError naming the
file and the field, never a KeyError, TypeError or OverflowError from deep inside the loader.

A checksum only says the bytes are the ones someone wrote; these say the values make sense.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from ._core import IndexFormatError

__all__ = ["checked_dict", "checked_int", "checked_float", "checked_str", "checked_list", "checked_table"]

INT64_MAX = 2**63 - 1


def _fail(where: str, key: str, why: str) -> IndexFormatError:
    return IndexFormatError(f"{where}: field {key!r} {why}")


def checked_dict(doc: Any, key: str, where: str) -> dict[str, Any]:
    """doc[key], which must be a JSON object."""
    value = _present(doc, key, where)
    if not isinstance(value, dict):
        raise _fail(where, key, f"must be an object, got {type(value).__name__}")
    return value


def checked_int(doc: Any, key: str, where: str, lo: int = -(2**63), hi: int = INT64_MAX) -> int:
    """doc[key], an integer (not a bool) in [lo, hi]."""
    value = _present(doc, key, where)
    if type(value) is not int:
        raise _fail(where, key, f"must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise _fail(where, key, f"is {value}, outside [{lo}, {hi}]")
    return value


def checked_float(doc: Any, key: str, where: str, *, positive: bool = False) -> float:
    """doc[key], a finite number (an int is accepted), > 0 when ``positive``."""
    value = _present(doc, key, where)
    if type(value) not in (int, float):
        raise _fail(where, key, f"must be a number, got {type(value).__name__}")
    try:
        out = float(value)
    except OverflowError:
        raise _fail(where, key, "is too large") from None
    if not math.isfinite(out) or (positive and not out > 0):
        raise _fail(where, key, f"is {value!r}, not a {'positive ' if positive else ''}finite number")
    return out


def checked_str(doc: Any, key: str, where: str, choices: tuple[str, ...] | None = None) -> str:
    """doc[key], a string (one of ``choices`` when given)."""
    value = _present(doc, key, where)
    if not isinstance(value, str):
        raise _fail(where, key, f"must be a string, got {type(value).__name__}")
    if choices is not None and value not in choices:
        raise _fail(where, key, f"is {value!r}, not one of {', '.join(choices)}")
    return value


def checked_list(doc: Any, key: str, where: str, length: int | None = None) -> list[Any]:
    """doc[key], a list (of ``length`` items when given)."""
    value = _present(doc, key, where)
    if not isinstance(value, list):
        raise _fail(where, key, f"must be a list, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise _fail(where, key, f"has {len(value)} items, expected {length}")
    return value


def _present(doc: Any, key: str, where: str) -> Any:
    if not isinstance(doc, dict):
        raise IndexFormatError(f"{where}: expected an object holding {key!r}, got {type(doc).__name__}")
    if key not in doc:
        raise _fail(where, key, "is missing")
    return doc[key]


def checked_table(table: pa.Table, where: str) -> pa.Table:
    """The table, after Arrow's full validation of every array (offsets within their data
    buffers, valid UTF-8, dictionary indices in range, null counts that match the bitmaps):
    an IPC file's buffers are trusted by nothing that reads them afterwards."""
    try:
        table.validate(full=True)
    except pa.ArrowException as exc:
        raise IndexFormatError(f"{where}: invalid Arrow data: {exc}") from None
    return table
