"""Filters: which rows of ``index.columns`` a search may return.

A filter is one of
* a boolean mask aligned with the rows of ``index.columns`` (slot order, removed rows included);
* an array of allowed int64 ids;
* a dict over the columns with MongoDB's query operators and semantics: ``$eq $ne $gt $gte $lt
  $lte $in $nin $exists`` on a field, ``$and $or`` over lists of filters, ``$not`` on a field's
  operators (or on a whole filter); a bare value means ``$eq``; several fields in one dict are
  and-ed. Metadata keys are written bare. As in MongoDB, ``{"f": None}`` matches rows where f is
  null or missing, ``$ne``/``$nin`` match missing values, and comparisons never match them.
  ``$exists: True`` means "not null" (a columnar store has no separate 'absent' state). On the
  time columns (t, valid_from, valid_until) a value may be a datetime, epoch seconds or an
  ISO-8601 string. On a date column (Arrow date32/date64) a value may be a date, a datetime or an
  ISO-8601 string: a date stands for its midnight, so ``{"d": {"$lt": datetime(2026, 1, 3, 12)}}``
  matches 2026-01-03 and ``$eq`` with a time past midnight matches no date (see
  :func:`day_numbers`).

Compiled to a boolean numpy mask with pyarrow.compute; the index pushes it into the traversal
(disallowed nodes are walked through, never returned) or, below a selectivity threshold, scans
the allowed rows exactly.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from datetime import date, datetime, time, timezone
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from . import _time

__all__ = ["compile_filter", "day_numbers", "FIELD_OPERATORS", "LOGICAL_OPERATORS"]

FIELD_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$not")
LOGICAL_OPERATORS = ("$and", "$or", "$not")
_COMPARE = {"$gt": "greater", "$gte": "greater_equal", "$lt": "less", "$lte": "less_equal"}


def _pc() -> Any:
    """pyarrow.compute, imported on the first filter (it is a quarter of the package's import time)."""
    import pyarrow.compute as pc

    return pc


def compile_filter(filters: Any, table: pa.Table) -> NDArray[np.bool_]:
    """The rows of ``table`` a filter allows, as a boolean array (see the module docstring)."""
    n = table.num_rows
    if isinstance(filters, Mapping):
        return _compile_dict(filters, table, "filters")
    if isinstance(filters, (pa.Array, pa.ChunkedArray)):
        filters = filters.to_numpy(zero_copy_only=False)
    if isinstance(filters, (list, tuple)):
        filters = np.asarray(filters)
    if isinstance(filters, np.ndarray):
        if filters.ndim != 1:
            raise ValueError(f"a filter array must be 1-dimensional, got shape {filters.shape}")
        if filters.dtype == np.bool_:
            if filters.shape[0] != n:
                raise ValueError(
                    f"the boolean filter mask has {filters.shape[0]} entries, index.columns has {n} rows"
                )
            return filters
        if filters.dtype.kind in "iu" or filters.size == 0:
            ids = table.column("id").to_numpy()
            return np.isin(ids, filters.astype(np.int64, copy=False))
        raise TypeError(
            f"a filter array must be boolean (a row mask) or integer (ids), got dtype {filters.dtype}"
        )
    raise TypeError(
        "filters must be a boolean mask, an array of ids or a dict of conditions, "
        f"got {type(filters).__name__}"
    )


def _compile_dict(spec: Mapping[str, Any], table: pa.Table, where: str) -> NDArray[np.bool_]:
    mask = np.ones(table.num_rows, dtype=bool)
    for key, value in spec.items():
        if not isinstance(key, str):
            raise TypeError(f"{where}: keys must be strings, got {key!r}")
        if key.startswith("$"):
            mask &= _logical(key, value, table, where)
        else:
            mask &= _field(key, value, table, f"{where}.{key}")
    return mask


def _logical(op: str, value: Any, table: pa.Table, where: str) -> NDArray[np.bool_]:
    if op in ("$and", "$or"):
        if not isinstance(value, (list, tuple)) or not value:
            raise ValueError(f"{where}: {op} takes a non-empty list of filters")
        parts = [
            _compile_dict(_as_mapping(v, f"{where}.{op}"), table, f"{where}.{op}[{i}]")
            for i, v in enumerate(value)
        ]
        out = parts[0]
        for p in parts[1:]:
            out = (out & p) if op == "$and" else (out | p)
        return out
    if op == "$not":
        return ~_compile_dict(_as_mapping(value, f"{where}.$not"), table, f"{where}.$not")
    raise ValueError(f"{where}: unknown operator {op!r} (known: {', '.join(LOGICAL_OPERATORS)})")


def _as_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{where} must be a dict, got {type(value).__name__}")
    return value


def _field(name: str, cond: Any, table: pa.Table, where: str) -> NDArray[np.bool_]:
    if name not in table.column_names:
        raise ValueError(f"{where}: unknown column {name!r} (columns: {', '.join(table.column_names)})")
    column = table.column(name)
    if pa.types.is_date(column.type):  # compared as day numbers (see day_numbers)
        if pa.types.is_date64(column.type):
            column = column.cast(pa.date32())
        column, cond = column.cast(pa.int32()), day_numbers(cond, where)
    if _is_operators(cond):
        mask = np.ones(table.num_rows, dtype=bool)
        for op, operand in cond.items():
            mask &= _operator(op, operand, column, name, where)
        return mask
    return _operator("$eq", cond, column, name, where)


def _is_operators(cond: Any) -> bool:
    return (
        isinstance(cond, Mapping)
        and bool(cond)
        and all(isinstance(k, str) and k.startswith("$") for k in cond)
    )


_EPOCH_DAY = date(1970, 1, 1).toordinal()


def day_numbers(cond: Any, where: str) -> Any:
    """A field's condition on a date column with every operand (a date, a datetime or an ISO-8601
    string) as days since 1970-01-01: a date, or a time at midnight, is its day's number; a time
    within a day is that day's number + 0.5, so it falls between the day and the next (a date
    stands for its midnight: before a time that day, after the day before). Times are wall-clock
    times: an aware datetime is read in UTC, a naive one (or a string without an offset, such as
    "2026-01-03") as it is. ``$in``/``$nin`` drop the times no date equals. None, ``$exists`` and
    unknown operators are left as they are. TypeError/ValueError naming ``where`` for an
    operand that is not a date or time."""
    if not _is_operators(cond):
        return _day_number(cond, where)
    out: dict[str, Any] = {}
    for op, operand in cond.items():
        if op in ("$in", "$nin") and isinstance(operand, (list, tuple, set, frozenset, np.ndarray)):
            days = [_day_number(v, f"{where}.{op}") for v in operand]
            out[op] = [d for d in days if not isinstance(d, float)]
        elif op == "$not":
            out[op] = day_numbers(operand, f"{where}.$not") if _is_operators(operand) else operand
        elif op in ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"):
            out[op] = _day_number(operand, f"{where}.{op}")
        else:
            out[op] = operand
    return out


def _day_number(value: Any, where: str) -> int | float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = date.fromisoformat(value)
        except ValueError:
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"{where}: {value!r} is not an ISO-8601 date or time") from None
    if isinstance(value, datetime):
        if value.utcoffset() is not None:
            try:
                value = value.astimezone(timezone.utc)
            except OverflowError:
                raise ValueError(f"{where}: {value!r} is outside the years 1..9999 in UTC") from None
        day = value.toordinal() - _EPOCH_DAY
        return day if value.time() == time() else day + 0.5
    if isinstance(value, date):
        return value.toordinal() - _EPOCH_DAY
    raise TypeError(
        f"{where}: compare a date with a date, a datetime or an ISO-8601 string, got {value!r} "
        f"({type(value).__name__})"
    )


def _operator(op: str, operand: Any, column: pa.ChunkedArray, name: str, where: str) -> NDArray[np.bool_]:
    is_null = _to_bool(column.is_null())
    if op == "$exists":
        if not isinstance(operand, (bool, np.bool_)):
            raise TypeError(f"{where}: $exists takes True or False, got {operand!r}")
        return ~is_null if operand else is_null
    if op == "$not":
        if not isinstance(operand, Mapping):
            raise TypeError(f"{where}: $not takes a dict of operators, got {type(operand).__name__}")
        inner = np.ones(len(is_null), dtype=bool)
        for inner_op, inner_operand in operand.items():
            inner &= _operator(inner_op, inner_operand, column, name, where)
        return ~inner
    if op in ("$in", "$nin"):
        if not isinstance(operand, (list, tuple, set, frozenset, np.ndarray)):
            raise TypeError(f"{where}: {op} takes a list, got {type(operand).__name__}")
        values = list(operand)
        has_none = any(v is None for v in values)
        concrete = [_scalar(v, column.type, name, where) for v in values if v is not None]
        hit = (
            _to_bool(_pc().is_in(column, value_set=pa.array(concrete, type=column.type)))
            if concrete
            else np.zeros(len(is_null), dtype=bool)
        )
        hit = hit & ~is_null
        if has_none:
            hit = hit | is_null
        return hit if op == "$in" else ~hit
    if op in ("$eq", "$ne"):
        if operand is None:
            hit = is_null
        else:
            hit = _to_bool(_pc().equal(column, _scalar(operand, column.type, name, where))) & ~is_null
        return hit if op == "$eq" else ~hit
    if op in _COMPARE:
        if operand is None:
            return np.zeros(len(is_null), dtype=bool)
        return (
            _to_bool(getattr(_pc(), _COMPARE[op])(column, _scalar(operand, column.type, name, where)))
            & ~is_null
        )
    raise ValueError(f"{where}: unknown operator {op!r} (known: {', '.join(FIELD_OPERATORS)})")


def _to_bool(values: Any) -> NDArray[np.bool_]:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    return np.asarray(values.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _scalar(value: Any, typ: pa.DataType, name: str, where: str) -> pa.Scalar:
    """A filter operand as an Arrow scalar of the column's type."""
    if pa.types.is_timestamp(typ):
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"{where}: {value!r} is not an ISO-8601 time") from None
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            if not math.isfinite(float(value)) or abs(float(value)) > 9.2e12:
                raise ValueError(f"{where}: {value!r} epoch seconds is outside the time range")
            us = int(round(float(value) * 1_000_000))
        else:
            try:
                us = _time.as_time_scalar(value, where)
            except TypeError:
                raise TypeError(
                    f"{where}: compare {name} with a datetime, epoch seconds or an ISO-8601 string, "
                    f"got {type(value).__name__}"
                ) from None
        return pa.scalar(us, type=pa.int64()).cast(typ)
    # Arrow would cast across kinds (1 -> "1", "3" -> 3, True -> 1) and answer a different
    # question than the one asked: a value of another kind than the column is an error.
    column_kind, value_kind = _kind_of_type(typ), _kind_of_value(value)
    if column_kind is not None and value_kind != column_kind:
        raise TypeError(
            f"{where}: {value!r} ({type(value).__name__}) cannot be compared with column {name!r} "
            f"({typ}): give a {column_kind} value"
        )
    if pa.types.is_integer(typ) and isinstance(value, numbers.Real) and value_kind == "number":
        if not float(value).is_integer():  # n > 1.5 on an integer column: compare as float64
            return pa.scalar(float(value), type=pa.float64())
    try:
        return pa.scalar(value).cast(typ) if not isinstance(value, pa.Scalar) else value.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise TypeError(
            f"{where}: {value!r} cannot be compared with column {name!r} ({typ}): {exc}"
        ) from None
    except OverflowError:
        raise ValueError(f"{where}: {value!r} is outside the range of column {name!r} ({typ})") from None


def _kind_of_type(typ: pa.DataType) -> str | None:
    """'string', 'number' or 'boolean' for the column types filters compare by kind; None else."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return "string"
    if pa.types.is_boolean(typ):
        return "boolean"
    if pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_decimal(typ):
        return "number"
    return None


def _kind_of_value(value: Any) -> str | None:
    if isinstance(value, pa.Scalar):
        return _kind_of_type(value.type)
    if isinstance(value, (bool, np.bool_)):  # before numbers: a bool is not an integer here
        return "boolean"
    if isinstance(value, numbers.Real):
        return "number"
    if isinstance(value, str):
        return "string"
    return None
