"""Retention: a policy the writer applies on its own schedule, and archiving before deleting (a
Parquet file made durable before anything is removed)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .. import _time
from .._durable import fsync_dir

__all__ = ["DELETE_CHUNK_ROWS", "Retention", "archive_path", "run_retention", "write_parquet_durably"]


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
        fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class Retention:
    """Keep memories for ``max_age``: every ``every`` the writer deletes the memories stamped
    before now - max_age, first archiving them to one Parquet file per run under ``archive_dir``
    (made with its parents when missing; files named by the time range they hold, never
    overwriting; None: delete without archiving).

    The writer applies it on its own schedule: after a write, when ``every`` has passed since
    the last run (and on the first write after opening), so an idle store changes nothing.
    ``clock`` (a callable returning an aware datetime; default the UTC wall clock) is what
    "now" is, so tests can move time. Not saved with the store: pass it on each open.
    """

    max_age: timedelta
    archive_dir: str | os.PathLike[str] | None = None
    every: timedelta = timedelta(hours=6)
    clock: Callable[[], datetime] | None = None

    def __post_init__(self) -> None:
        for name in ("max_age", "every"):
            value = getattr(self, name)
            if not isinstance(value, timedelta):
                raise TypeError(f"Retention.{name} must be a datetime.timedelta, got {type(value).__name__}")
            if value <= timedelta(0):
                raise ValueError(f"Retention.{name} must be positive, got {value}")
        if self.archive_dir is not None:
            if not isinstance(self.archive_dir, (str, os.PathLike)):
                raise TypeError(
                    f"Retention.archive_dir must be a path or None, got {type(self.archive_dir).__name__}"
                )
            make_archive_dir(self.archive_dir)
        if self.clock is not None and not callable(self.clock):
            raise TypeError("Retention.clock must be a callable returning a datetime")

    def now_us(self) -> int:
        return _time.as_time_scalar(self.clock() if self.clock is not None else None, "Retention.clock()")


def make_archive_dir(directory: str | os.PathLike[str]) -> None:
    """Creates ``directory`` and its parents when missing (``mkdir -p``); an error names it."""
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise NotADirectoryError(
            f"Retention.archive_dir {directory}: it or a folder above it is a file, not a directory"
        ) from None
    except OSError as exc:
        raise type(exc)(
            exc.errno, f"Retention.archive_dir {directory} cannot be created: {exc.strerror}"
        ) from None


def archive_path(directory: str | os.PathLike[str], first_us: int, last_us: int) -> Path:
    """``memories-<first>--<last>.parquet`` in ``directory`` (UTC, to the second), with a
    ``-2``, ``-3``, ... suffix when that name is taken: a run never overwrites an archive."""
    stamp = "%Y%m%dT%H%M%SZ"
    base = (
        f"memories-{_time.micros_to_datetime(first_us).strftime(stamp)}"
        f"--{_time.micros_to_datetime(last_us).strftime(stamp)}"
    )
    path = Path(directory) / f"{base}.parquet"
    n = 1
    while path.exists():
        n += 1
        path = Path(directory) / f"{base}-{n}.parquet"
    return path


# Rows deleted per writer-lock hold: searches wait for one chunk at a time, not for the run.
DELETE_CHUNK_ROWS = 2048


def run_retention(mem: Any, max_age: timedelta, archive_dir: Any, at_us: int) -> int:
    """Deletes ``mem``'s memories stamped before at_us - max_age (archived first when
    ``archive_dir`` is set); returns how many.

    Searches are never blocked for the run: the rows are chosen and their table taken under the
    read lock (searches go on, writers wait), the archive is written under no lock, and the
    deletes go in chunks of DELETE_CHUNK_ROWS, each its own write (logged, then applied) under
    the writer lock. A row that changed since it was chosen (deleted, updated, re-stamped
    younger) is left alone. A crash between the archive and the last chunk leaves rows both
    archived and held: the next run archives them again (a second file), nothing is lost."""
    import numpy as np

    cutoff = at_us - max_age // timedelta(microseconds=1)
    mem._check_open()
    with mem._lock.reading():
        n = len(mem._mids)
        t = mem._index._columns._t[:n]
        held = np.asarray(mem._index._core.live_slots()[:n], dtype=bool)
        rows = np.flatnonzero(held & (t < cutoff))
        if rows.size == 0:
            return 0
        archive = None
        if archive_dir is not None:
            stamps = t[rows]
            archive = (mem._table_in_chunks(rows.tolist()), int(stamps.min()), int(stamps.max()))
    if archive is not None:
        table, first_us, last_us = archive
        make_archive_dir(archive_dir)  # made when the policy was; again if removed since
        write_parquet_durably(table, archive_path(archive_dir, first_us, last_us))
    deleted = 0
    for start in range(0, rows.size, DELETE_CHUNK_ROWS):
        with mem._writing():
            t_now = mem._index._columns._t
            chunk = [
                r
                for r in rows[start : start + DELETE_CHUNK_ROWS].tolist()
                if mem._mids[r] is not None and t_now[r] < cutoff
            ]
            deleted += mem._delete_rows(chunk)
        mem._lock.let_readers_in()  # searches waiting for this chunk run before the next one
    return deleted
