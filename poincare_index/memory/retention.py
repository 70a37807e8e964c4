"""Retention: a policy the writer applies on its own schedule, and archiving before deleting (a
Parquet file made durable before anything is removed)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


class RetentionRun:
    """A Memory's retention policy at work: when the writer's next run is due (None: at the first
    write) and whether one is in progress (its deletes are writes of their own, which neither
    start another run nor compact the rows it is deleting)."""

    def __init__(self, policy: Retention) -> None:
        self.policy = policy
        self.next_us: int | None = None
        self.in_progress = False

    @contextmanager
    def running(self) -> Iterator[None]:
        was, self.in_progress = self.in_progress, True
        try:
            yield
        finally:
            self.in_progress = was

    def when_due(self, run: Callable[[int], Any]) -> None:
        """Calls ``run(now_us)`` when a run is due by the policy's clock and none is in progress;
        the next is due ``policy.every`` later, whatever this one did."""
        if self.in_progress:
            return
        now_us = self.policy.now_us()
        if self.next_us is not None and now_us < self.next_us:
            return
        try:
            run(now_us)
        finally:
            self.next_us = now_us + self.policy.every // timedelta(microseconds=1)


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


def run_retention(
    rows: Any,
    lock: Any,
    writing: Callable[[], Any],
    delete_rows: Callable[[list[int]], int],
    policy: Retention,
    at_us: int,
) -> int:
    """Deletes the memories of ``rows`` (a Memory's MemoryRows, under its readers-writer
    ``lock``) stamped before at_us - policy.max_age, archived first when the policy has an
    archive_dir; each chunk is deleted by ``delete_rows`` (the Memory's logged delete) inside
    ``writing()`` (its write scope). Returns how many.

    Searches are never blocked for the run: the rows are chosen and their table taken under the
    read lock (searches go on, writers wait), the archive is written under no lock, and the
    deletes go in chunks of DELETE_CHUNK_ROWS, each its own write (logged, then applied) under
    the writer lock. A row that changed since it was chosen (deleted, updated, re-stamped
    younger) is left alone. A crash between the archive and the last chunk leaves rows both
    archived and held: the next run archives them again (a second file), nothing is lost."""
    import numpy as np

    archive_dir = policy.archive_dir
    cutoff = at_us - policy.max_age // timedelta(microseconds=1)
    with lock.reading():
        n = len(rows.mids)
        t = rows.index._columns._t[:n]
        held = np.asarray(rows.index._core.live_slots()[:n], dtype=bool)
        found = np.flatnonzero(held & (t < cutoff))
        if found.size == 0:
            return 0
        archive = None
        if archive_dir is not None:
            stamps = t[found]
            archive = (rows.table_in_chunks(found.tolist()), int(stamps.min()), int(stamps.max()))
    if archive is not None:
        table, first_us, last_us = archive
        make_archive_dir(archive_dir)  # made when the policy was; again if removed since
        write_parquet_durably(table, archive_path(archive_dir, first_us, last_us))
    deleted = 0
    for start in range(0, found.size, DELETE_CHUNK_ROWS):
        with writing():
            t_now = rows.index._columns._t
            chunk = [
                r
                for r in found[start : start + DELETE_CHUNK_ROWS].tolist()
                if rows.mids[r] is not None and t_now[r] < cutoff
            ]
            deleted += delete_rows(chunk)
        lock.let_readers_in()  # searches waiting for this chunk run before the next one
    return deleted
