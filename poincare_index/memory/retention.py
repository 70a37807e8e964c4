"""Archiving before deleting: a Parquet file made durable before anything is removed."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..io import _fsync_dir

__all__ = ["write_parquet_durably"]


def write_parquet_durably(table: pa.Table, path: Path) -> None:
    """Writes ``table`` to ``path`` (which must not exist) via a temporary file, fsyncs the file
    and its directory, then renames it into place: on return the archive is on disk; on any
    error no file is left at ``path``."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"archive {path} already exists; give a new file name")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"archive directory {path.parent} does not exist")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
