"""User metadata beside the index's own columns: tables built from a dict of columns or an Arrow
table, checked (names, times a datetime can hold), and appended to what is stored (one type per
key; integers and floats widen to float64)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from . import _time

RESERVED_COLUMNS = ("id", "t", "valid_from", "valid_until", "access_count")

__all__ = [
    "RESERVED_COLUMNS",
    "metadata_table",
    "check_metadata_times",
    "concat_metadata",
    "merge_small_chunks",
    "null_table",
]


def metadata_table(metadata: Any, n: int) -> pa.Table | None:
    """A dict of columns or a pyarrow Table with n rows -> pa.Table (None for None)."""
    if metadata is None:
        return None
    if isinstance(metadata, pa.Table):
        table = metadata
    elif isinstance(metadata, Mapping):
        cols = {}
        for name, values in metadata.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"metadata column names must be non-empty strings, got {name!r}")
            try:
                if isinstance(values, (pa.Array, pa.ChunkedArray)):
                    cols[name] = values  # Arrow data: a timestamp without a zone is UTC
                elif _holds_datetimes(values):
                    cols[name] = _time.datetimes_to_arrow(list(values))  # naive = local time
                else:
                    cols[name] = pa.array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise TypeError(f"metadata column {name!r} cannot be stored: {exc}") from None
        table = pa.table(cols) if cols else None
        if table is None:
            return None
    else:
        raise TypeError(
            f"metadata must be a dict of columns or a pyarrow.Table, got {type(metadata).__name__}"
        )
    for name in table.column_names:
        if name in RESERVED_COLUMNS:
            raise ValueError(f"metadata column {name!r} clashes with a built-in column")
    # Dictionary-encoded columns are stored decoded: batches with different dictionaries would
    # otherwise be concatenated into chunks the IPC writer refuses at save.
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(field.type.value_type))
    if len(set(table.column_names)) != len(table.column_names):
        raise ValueError("metadata has duplicate column names")
    check_metadata_times(table)
    if table.num_rows != n:
        raise ValueError(f"metadata has {table.num_rows} rows, expected {n} (one per row of x)")
    return table


def _holds_datetimes(values: Any) -> bool:
    """Whether a Python sequence of metadata values holds datetime objects (and None only)."""
    if isinstance(values, np.ndarray) and values.dtype != object:
        return False
    try:
        items = list(values)
    except TypeError:
        return False
    return any(isinstance(v, datetime) for v in items) and all(
        v is None or isinstance(v, datetime) for v in items
    )


# Time-typed metadata is read back as datetime objects (results, to_pylist, the inspector):
# values outside what datetime holds (years 1..9999) are refused where they come in.
_DATETIME_MIN_US = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
_DATETIME_MAX_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z


def check_metadata_times(table: pa.Table) -> None:
    """ValueError naming a timestamp or date metadata column with a value outside years 1..9999."""
    import pyarrow.compute as pc

    per_unit = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 0}  # ns: always inside the range
    for field in table.schema:
        typ = field.type
        if pa.types.is_timestamp(typ):
            us_per, raw = per_unit[typ.unit], pa.int64()
        elif pa.types.is_date32(typ):
            us_per, raw = 86_400_000_000, pa.int32()
        elif pa.types.is_date64(typ):
            us_per, raw = 1_000, pa.int64()
        else:
            continue
        if not us_per:
            continue
        column = table.column(field.name).cast(raw)
        bounds = pc.min_max(column)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if lo is not None and (lo * us_per < _DATETIME_MIN_US or hi * us_per > _DATETIME_MAX_US):
            first, last = -(-_DATETIME_MIN_US // us_per), _DATETIME_MAX_US // us_per  # in the unit
            row = pc.index(pc.or_(pc.less(column, first), pc.greater(column, last)), True).as_py()
            raise ValueError(
                f"metadata column {field.name!r} row {row} holds a time outside the years 1..9999"
            )


def merge_small_chunks(table: pa.Table) -> pa.Table:
    """The table with its trailing chunks merged while a chunk is no larger than twice the one
    after it, so n appends leave O(log n) chunks (each row copied O(log n) times in all). One
    chunk per append made every ``take`` of search results walk thousands of chunks (0.3-2 ms
    per search at 100,000 rows added in batches)."""
    batches = table.to_batches()
    if len(batches) < 2:
        return table
    merged = False
    while len(batches) >= 2 and batches[-2].num_rows <= 2 * batches[-1].num_rows:
        tail = pa.Table.from_batches(batches[-2:], schema=table.schema).combine_chunks()
        batches[-2:] = tail.to_batches() or [pa.RecordBatch.from_pylist([], schema=table.schema)]
        merged = True
    return pa.Table.from_batches(batches, schema=table.schema) if merged else table


def null_table(schema: pa.Schema, rows: int) -> pa.Table:
    """``rows`` rows of nulls with the given columns and types."""
    return pa.table({field.name: pa.nulls(rows, type=field.type) for field in schema})


def concat_metadata(old: pa.Table, new: pa.Table) -> pa.Table:
    """``old``'s rows then ``new``'s, a column missing on one side null there. A column holds one
    type: integers on one side and floats on the other become float64 on both (an integer
    outside +-2**53 is refused), as ``memory.rows.metadata_columns`` does within a batch; any
    other difference is a ValueError naming the column and both types."""
    was = {field.name: field.type for field in old.schema}
    for name, typ in zip(new.schema.names, new.schema.types):
        before = was.get(name)
        if before is None or before == typ or pa.types.is_null(before) or pa.types.is_null(typ):
            continue
        kinds = {
            "int" if pa.types.is_integer(t) else "float" if pa.types.is_floating(t) else t
            for t in (before, typ)
        }
        if kinds != {"int", "float"}:
            raise ValueError(
                f"metadata does not match the existing columns: {name!r} holds {before} values, the new "
                f"rows give {typ} (one key takes one type; integers widen to float64)"
            )
        try:
            old, new = (
                t.set_column(t.schema.get_field_index(name), name, t[name].cast(pa.float64()))
                for t in (old, new)
            )
        except pa.ArrowInvalid as exc:
            raise ValueError(
                f"metadata {name!r} mixes integers and floats, which share a float64 column: {exc}"
            ) from None
    try:
        return pa.concat_tables([old, new], promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"metadata does not match the existing columns: {exc}") from None
