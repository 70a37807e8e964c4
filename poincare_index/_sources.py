"""Chunked readers for ``add_from``: a 2-D array (a ``numpy.memmap`` included), a ``.npy`` file
or a Parquet file, read a bounded number of rows at a time so a source larger than memory can
be added without loading it."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np
from numpy.typing import NDArray

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class Chunk:
    """Rows ``start .. start + len(x)`` of the source: float32 points, and ids / times when the
    source has those columns (None otherwise)."""

    start: int
    x: NDArray[np.float32]
    ids: NDArray[Any] | None = None
    t: Any = None  # a pyarrow timestamp array from a Parquet time column


def iter_chunks(
    source: Any,
    dim: int,
    chunk_rows: int,
    *,
    vector_column: str = "vector",
    id_column: str | None = None,
    time_column: str | None = None,
) -> Iterator[Chunk]:
    """Chunks of at most ``chunk_rows`` rows of ``source``, in order; raises TypeError for a
    source of another kind and ValueError for a wrong shape or a missing column."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"add_from: no file at {str(path)!r}")
        suffix = path.suffix.lower()
        if suffix == ".npy":
            if id_column or time_column:
                raise ValueError("add_from: a .npy file holds only points; pass ids/t columns via Parquet")
            yield from _npy_chunks(path, dim, chunk_rows)
            return
        if suffix in (".parquet", ".pq"):
            yield from _parquet_chunks(path, dim, chunk_rows, vector_column, id_column, time_column)
            return
        raise ValueError(f"add_from: {str(path)!r} is neither a .npy nor a .parquet file")
    if isinstance(source, np.ndarray):
        if id_column or time_column:
            raise ValueError("add_from: an array holds only points; id_column/time_column need Parquet")
        yield from _array_chunks(source, dim, chunk_rows)
        return
    raise TypeError(
        "add_from: source must be a 2-D numpy array (numpy.memmap included), or the path of a "
        f".npy or .parquet file, got {type(source).__name__}"
    )


def source_rows(source: Any) -> int | None:
    """The number of rows ``source`` holds, when it says so without being read (an array's
    shape, a .npy header, a Parquet footer); None otherwise."""
    if isinstance(source, np.ndarray):
        return int(source.shape[0]) if source.ndim >= 1 else None
    if isinstance(source, (str, os.PathLike)) and Path(source).is_file():
        suffix = Path(source).suffix.lower()
        try:
            if suffix == ".npy":
                return int(np.load(source, mmap_mode="r", allow_pickle=False).shape[0])
            if suffix in (".parquet", ".pq"):
                import pyarrow.parquet as pq

                return int(pq.ParquetFile(source).metadata.num_rows)
        except (ValueError, OSError, IndexError):
            return None  # iter_chunks reports what is wrong with it
    return None


def _check_shape(shape: tuple[int, ...], dim: int, what: str) -> None:
    if len(shape) != 2 or shape[1] != dim:
        raise ValueError(f"add_from: {what} has shape {shape}, expected (n, {dim})")


def _array_chunks(a: NDArray[Any], dim: int, chunk_rows: int) -> Iterator[Chunk]:
    _check_shape(a.shape, dim, "the array")
    for start in range(0, a.shape[0], chunk_rows):
        rows = a[start : start + chunk_rows]
        yield Chunk(start, np.array(rows, dtype=np.float32, order="C"))
        _drop_pages(a, start, rows.shape[0])


def _drop_pages(a: NDArray[Any], start: int, n: int) -> None:
    """Lets the kernel drop the pages of a read-only memmap's rows once they are copied, so the
    mapping's resident pages do not grow to the whole file (they are read again from the file if
    touched). Other arrays, and copy-on-write maps (whose pages may hold the user's changes),
    are left alone."""
    raw = getattr(a, "_mmap", None)
    if not isinstance(a, np.memmap) or raw is None or a.mode != "r" or not hasattr(raw, "madvise"):
        return
    if not a.flags.c_contiguous:
        return
    # Offsets into the mapping from addresses: a slice of a memmap keeps its parent's offset.
    map_start = np.frombuffer(raw, dtype=np.uint8).ctypes.data
    row_bytes = a.strides[0]
    lo_in_map = a.ctypes.data - map_start + start * row_bytes
    hi_in_map = lo_in_map + n * row_bytes
    # madvise wants page-aligned ranges: the whole pages inside [lo, hi).
    page = mmap.PAGESIZE
    lo_page = -(-lo_in_map // page) * page
    hi_page = (hi_in_map // page) * page
    if hi_page > lo_page:
        raw.madvise(mmap.MADV_DONTNEED, lo_page, hi_page - lo_page)


def _npy_chunks(path: Path, dim: int, chunk_rows: int) -> Iterator[Chunk]:
    try:
        a = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        raise ValueError(f"add_from: {str(path)!r} is not a readable .npy array: {exc}") from None
    yield from _array_chunks(a, dim, chunk_rows)


def _parquet_chunks(
    path: Path,
    dim: int,
    chunk_rows: int,
    vector_column: str,
    id_column: str | None,
    time_column: str | None,
) -> Iterator[Chunk]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    wanted = [c for c in (vector_column, id_column, time_column) if c]
    missing = [c for c in wanted if c not in pf.schema_arrow.names]
    if missing:
        raise ValueError(
            f"add_from: {str(path)!r} has no column(s) {missing}; it has {pf.schema_arrow.names}"
        )
    start = 0
    for batch in pf.iter_batches(batch_size=chunk_rows, columns=wanted):
        col = batch.column(vector_column)
        if not (
            pa.types.is_list(col.type)
            or pa.types.is_fixed_size_list(col.type)
            or pa.types.is_large_list(col.type)
        ):
            raise TypeError(f"add_from: column {vector_column!r} must be a list of floats, got {col.type}")
        if col.null_count:
            raise ValueError(
                f"add_from: column {vector_column!r} has a null in rows {start}..{start + len(col) - 1}"
            )
        lengths = col.value_lengths().to_numpy(zero_copy_only=False)
        if len(lengths) and (lengths.min() != dim or lengths.max() != dim):
            bad = int(np.flatnonzero(lengths != dim)[0])
            raise ValueError(
                f"add_from: row {start + bad} of {vector_column!r} has {int(lengths[bad])} "
                f"values, expected {dim}"
            )
        x = np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float32).reshape(len(col), dim)
        ids = batch.column(id_column).to_numpy(zero_copy_only=False) if id_column else None
        t = batch.column(time_column) if time_column else None
        yield Chunk(start, np.ascontiguousarray(x), ids, t)
        start += len(col)
