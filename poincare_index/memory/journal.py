"""Write-side persistence of Memory: every change is logged before the call returns, replayed
on open after the snapshot, and folded into a new snapshot at checkpoints (see store.py, log.py)."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

from .. import _time
from .._checked import checked_int, checked_list, checked_str
from .._core import IndexFormatError
from .._interrupts import deferred_interrupts, fault_point
from .._progress import progress_bar
from .codec import value_from_json, value_to_json
from .log import LogWriter, iter_records
from .rows import Batch, make_batch
from .usage import save_usage

__all__ = ["MemoryJournal"]

_KEEP = object()  # _log_locked: leave what is pending as it is


class MemoryJournal:
    """Mixed into Memory; uses its _ns, _writer, _seq, _since_checkpoint and the _apply_* methods."""

    _ns: Any
    _writer: LogWriter | None
    _seq: int
    _since_checkpoint: int
    _checkpoint_every: int
    _fsync: bool
    _read_only: bool
    _log_lock: Any
    _index: Any
    _mids: list[str | None]
    _texts: list[str | None]
    _row_of: dict[str, int]
    _config: Any
    _unlogged_voids: list[int]
    _pending: Callable[[], None] | None
    _unlogged_from: int | None
    _lock: Any
    _snapshot: str | None
    _snapshot_read: str | None
    _snapshot_seq: int
    _log_offsets: dict[str, int]
    _epoch: int
    _seen: Any
    _version: int
    _closed: bool
    _usage: Any
    _progress: bool

    def _checkpoint_locked(self) -> None:
        """Snapshot at the current sequence number, then a fresh log, then the old files go.
        The new log exists before anything older is removed, so a failure at any step leaves
        every acknowledged change either in the snapshot CURRENT names or in a log after it."""
        assert self._ns is not None
        with deferred_interrupts():
            if self._unlogged_voids:  # into the log first: a snapshot's sequence number names
                # everything it holds (a reader at that number adopts it without loading it)
                none_left: list[int] = []
                self._append_record({"op": "void", "rows": self._unlogged_voids})
                self._unlogged_voids = none_left
        self._write_snapshot_and_rotate(self._index, self._mids, self._texts)

    def _write_snapshot_and_rotate(
        self, index: Any, mids: list[str | None], texts: list[str | None], renumbered: bool = False
    ) -> None:
        """``renumbered``: a compaction (rows renumbered), which starts a new row epoch; the
        logs before it are then of no use to a reader, else the previous snapshot's are kept."""
        assert self._ns is not None
        epoch = self._epoch + 1 if renumbered else self._epoch
        previous_seq = self._seq if renumbered else self._snapshot_seq
        with deferred_interrupts():  # CURRENT switched and the state that says so: both or neither
            try:
                snapshot = self._ns.write_snapshot(self._seq, index, mids, texts, epoch)
            finally:
                # Decided by what CURRENT names, not by whether the call returned (a step after
                # the switch, the directory's fsync, may fail): a snapshot at this sequence
                # number and epoch holds this state.
                if self._ns.current_state()[1:] == (self._seq, epoch):
                    none_left: list[int] = []
                    self._unlogged_voids = none_left  # the snapshot holds them (or compacted them away)
                    self._epoch, self._snapshot_seq = epoch, self._seq
        save_usage(self._ns.dir, self._usage)
        with deferred_interrupts():  # the new log exists only as the one written to
            writer = LogWriter(self._ns.log_path(self._seq + 1), fsync=self._fsync)
            old, self._writer = self._writer, writer
            self._since_checkpoint = 0
        if old is not None:
            old.close()
        self._ns.remove_stale(snapshot, previous_seq)

    def _maybe_checkpoint(self) -> None:
        """After a write (writer lock held): checkpoint when due. A failure here loses nothing
        (the changes are in the log); it is reported as a warning and retried on the next write."""
        if self._ns is None or self._since_checkpoint < self._checkpoint_every:
            return
        self._settle_pending()
        with self._log_lock:
            try:
                self._checkpoint_locked()
            except Exception as exc:
                warnings.warn(
                    f"memory store {self._ns.dir}: checkpoint failed ({exc}); every change is safe "
                    "in the log and the next write retries",
                    RuntimeWarning,
                    stacklevel=3,
                )

    def _log(self, header: dict[str, Any], vecs: Any = None, then: Any = _KEEP) -> None:
        with self._log_lock:
            self._log_locked(header, vecs, then)

    def _log_locked(self, header: dict[str, Any], vecs: Any = None, then: Any = _KEEP) -> None:
        """Acknowledges one operation: ``_seq`` counts it once its record is in the log (a Memory
        without a path counts it all the same), and in the same step what is pending becomes
        ``then`` (what is left to apply of it, or None; a touch leaves it alone): so whether an
        operation was logged is read from the state (``_pending``), never from where an exception
        landed. Rows voided since the last record are logged first."""
        with deferred_interrupts():
            if self._ns is not None:
                if self._unlogged_voids:
                    none_left: list[int] = []
                    self._append_record({"op": "void", "rows": self._unlogged_voids})
                    self._unlogged_voids = none_left
                self._append_record(header, vecs)
            else:
                self._seq = self._seq + 1
            if then is not _KEEP:
                self._pending, self._unlogged_from = then, None

    def _append_record(self, header: dict[str, Any], vecs: Any = None) -> None:
        """Appends one record; the counters move only once it is in the log, by assignments of
        values made before (nothing after the append can fail and leave it uncounted)."""
        assert self._writer is not None
        seq, since = self._seq + 1, self._since_checkpoint + 1
        blob = None if vecs is None else np.asarray(vecs, dtype=np.float32)
        self._writer.append(seq, header, blob)
        self._seq, self._since_checkpoint = seq, since

    def _add_logged(
        self,
        batch: Batch,
        vecs: Any,
        record: Callable[[list[int]], dict[str, Any]],
        *,
        access: list[int] | None = None,
        progress: bool = False,
        then: Callable[[], None] | None = None,
        undo: Callable[[], None] | None = None,
    ) -> list[int]:
        """Applies an add and logs ``record(rows)``; all of it or none of it. The add is
        acknowledged once its record is logged: an exception before that, at any step (a Ctrl-C
        between the index's chunks, a failing log write, MemoryError), rolls the add back
        (:meth:`_roll_back_add`, then ``undo``); after it, ``then`` (the rest of the operation,
        idempotent) is applied whatever happens."""
        first, ids = len(self._mids), list(batch.ids)
        meta_before = self._index._columns.metadata

        def roll_back() -> None:
            self._roll_back_add(first, ids, meta_before)
            if undo is not None:
                undo()

        with deferred_interrupts():
            self._pending = roll_back  # until the record is logged (_log_locked)
            self._unlogged_from = first  # reads skip these rows until then
        try:
            fault_point("memory.add:apply")
            rows = self._apply_add(batch, vecs, access=access, progress=progress)
            fault_point("memory.add:log")
            self._log(record(rows), vecs, then)
            fault_point("memory.add:logged")
            self._settle_pending()  # `then`
        except BaseException:
            self._settle_pending()  # the roll-back, or `then` once logged
            raise
        return rows

    def _settle_pending(self) -> None:
        """Finishes the operation in flight, if one was cut off: rolls back an add that was not
        logged, or applies what is left of one that was. Each is idempotent, so one cut off
        itself is finished by the next write, checkpoint or read (writer lock held)."""
        with deferred_interrupts():
            pending = self._pending
            if pending is not None:
                pending()
                self._pending, self._unlogged_from = None, None

    def _log_then_apply(self, header: dict[str, Any], apply: Callable[[], None]) -> None:
        """Logs an operation, then applies it in memory (idempotent ``apply``); once logged, it
        is applied even if this call is cut off (the log is the authority: an operation logged
        and not applied would differ on reopening)."""
        try:
            self._log(header, then=apply)
        finally:
            self._settle_pending()

    def _recover(self, ef_search: int) -> None:
        """Loads the snapshot CURRENT names and replays the logs after it. A reader pins the
        snapshot while it reads (NamespaceDir.pinned_current), so the writer's checkpoints
        cannot remove a file under it; it retries only when the store had no snapshot yet and
        the first checkpoint removed the logs it was reading."""
        assert self._ns is not None
        attempts = 3 if self._read_only else 1
        for attempt in range(attempts):
            try:
                self._load(ef_search)
                break
            except (IndexFormatError, OSError):
                if attempt == attempts - 1 or self._snapshot_read is not None:
                    raise  # a pinned snapshot that fails to load is damage, not a race
            self._init_state(self._index.num_threads, ef_search)
        if not self._read_only:
            logs = self._ns.log_paths()
            path = logs[-1] if logs else self._ns.log_path(self._seq + 1)
            self._writer = LogWriter(path, fsync=self._fsync)

    def refresh(self) -> bool:
        """A read-only Memory: take in what the writer acknowledged since the last look (tail the
        log; after a checkpoint, load the new snapshot). Returns whether anything changed. Called
        on its own before every search, get, list, to_arrow, stats, ``in`` and ``len``, so a
        reader never answers from a state older than the writes acknowledged before the call
        began. Never blocks the writer (it only reads files) and never reads a torn record (a
        record still being written is taken at the next call). A writer that checkpoints
        faster than a snapshot can be read leaves the reader on its last state until a read
        completes (no error). A writer's Memory is always current: refresh() returns False."""
        if self._closed:
            return False
        if not self._read_only:
            # A writer's read first finishes an operation that was cut off (a roll-back cut off
            # itself), so no read shows, or a touch logs, rows of an add that was not logged.
            if self._pending is not None and not getattr(self._lock._local, "depth", 0):
                with self._lock.writing():
                    self._settle_pending()
            return False
        if self._ns is None:
            return False
        if getattr(self._lock._local, "depth", 0):
            return False  # inside this Memory's own read (a filter callable): keep its state
        signature = self._ns.signature()
        if signature is not None and signature == self._seen:
            return False
        with self._lock.writing():
            snapshot, snap_seq, epoch = self._ns.current_state()
            if snapshot == self._snapshot and self._tailed(snapshot):
                self._seen = signature
                self._version += 1
                return True
            # A checkpoint with the same row numbering: the logs since our state are kept for a
            # checkpoint more, so a reader that keeps up follows them without a reload.
            if epoch == self._epoch and self._tailed(snapshot, crossing=True) and self._seq >= snap_seq:
                self._snapshot, self._snapshot_seq = snapshot, snap_seq
                self._seen = signature
                self._version += 1
                return True
            # A checkpoint (now, or while the logs were read): the logs we tailed may be gone.
            try:
                fresh = type(self)(path=self._ns.dir.parent, namespace=self._ns.dir.name,
                                   read_only=True, num_threads=self._index.num_threads,
                                   ef_search=self._index.ef_search)  # fmt: skip
            except (IndexFormatError, OSError):
                if self._ns.current()[0] == snapshot:
                    raise  # the store stood still and still does not load: damage, not a race
                # The writer checkpointed again while we read (faster than one snapshot read):
                # keep answering from the state we have and try at the next call.
                self._seen = None
                return False
            self._reload_from(fresh)
            self._seen = signature
            self._version += 1
        return True

    def _tailed(self, snapshot: str | None, crossing: bool = False) -> bool:
        """Applies the log records after our sequence number; False when a checkpoint moved the
        logs meanwhile (a log gone, or a gap where its records were), so the caller reloads.
        ``crossing``: following the logs past a checkpoint, where a missing log only means we
        are too far behind (never damage: the reload that follows checks the store)."""
        try:
            paths = self._ns.log_paths(after=self._seq)
            # Only what was appended since the last look is read (per log, from its last end).
            self._log_offsets = {
                p.name: self._log_offsets[p.name] for p in paths if p.name in self._log_offsets
            }
            for seq, header, blob in iter_records(paths, self._seq, self._log_offsets):
                self._replay(seq, header, blob)
                self._seq = seq
        except (FileNotFoundError, IndexFormatError):
            if not crossing and self._ns.current()[0] == snapshot:
                raise  # nothing moved: the log itself is damaged
            return False
        return True

    def _reload_from(self, fresh: Any) -> None:
        """Takes over the state of a freshly opened reader of the same store."""
        self._index, self._mids, self._texts, self._row_of = (
            fresh._index,
            fresh._mids,
            fresh._texts,
            fresh._row_of,
        )
        self._seq, self._snapshot, self._config = fresh._seq, fresh._snapshot, fresh._config
        self._snapshot_seq, self._epoch = fresh._snapshot_seq, fresh._epoch
        self._log_offsets = fresh._log_offsets
        self._keyword.close()
        self._keyword = fresh._keyword
        fresh._closed = True

    def _load(self, ef_search: int) -> None:
        assert self._ns is not None
        self._snapshot_read = None
        with self._ns.pinned_current() as (snapshot, snap_seq, epoch):
            if snapshot is not None:
                self._snapshot_read = snapshot
                self._index, self._mids, self._texts = self._ns.read_snapshot(
                    snapshot, snap_seq, self._index.num_threads, progress=self._progress
                )
                self._tune_index(ef_search)
                self._row_of = {m: r for r, m in enumerate(self._mids) if m is not None}
            self._seq, self._snapshot_seq, self._epoch = snap_seq, snap_seq, epoch
            self._seen = self._ns.signature()  # taken before the logs are read: never newer
            self._log_offsets = {}
            records = iter_records(self._ns.log_paths(after=snap_seq), snap_seq, self._log_offsets)
            with progress_bar(self._progress, None, "replay log", unit="op") as bar:
                for seq, header, blob in records:
                    self._replay(seq, header, blob)
                    self._seq = seq
                    self._since_checkpoint += 1
                    bar.update(1)
        self._snapshot = snapshot

    def _replay(self, seq: int, header: dict[str, Any], blob: bytes) -> None:
        """Applies one logged operation after checking it as the call that logged it checked
        its arguments (the same validators, then the same state checks: ids not held, rows
        that hold a memory), so a crafted log cannot build a state no sequence of calls
        builds. Anything wrong is an IndexFormatError naming the record."""
        where = f"{self._ns.dir}: log record {seq}"
        try:
            self._replay_checked(where, header, blob)
        except IndexFormatError:
            raise
        except (ValueError, TypeError) as exc:  # what the public API's validators raise
            raise IndexFormatError(f"{where}: {exc}") from None

    def _replay_checked(self, where: str, header: dict[str, Any], blob: bytes) -> None:
        op = checked_str(header, "op", where, _OPS)
        n_rows = len(self._mids)
        if op in ("add", "update"):
            batch = batch_from_json(header, where)
            dim = self._config.embedder.dim
            if len(batch) == 0 or len(blob) != len(batch) * dim * 4:
                raise IndexFormatError(
                    f"{where}: {len(batch)} memories with {len(blob)} bytes of vectors "
                    f"(expected {len(batch) * dim * 4})"
                )
            vecs = np.frombuffer(blob, dtype="<f4").reshape(len(batch), dim)
            rows = checked_list(header, "rows", where, len(batch))
            if rows != list(range(n_rows, n_rows + len(batch))):
                raise IndexFormatError(f"{where}: the log does not follow its snapshot (rows {rows[:3]}...)")
            access = None
            if op == "update":
                old = self._live_row(checked_int(header, "old", where, 0, n_rows - 1), where)
                if batch.ids != [self._mids[old]]:
                    raise IndexFormatError(f"{where}: an update of row {old} names another memory")
                (count,) = checked_list(header, "access", where, 1)
                access = [checked_int({"access": count}, "access", where, 0, 2**32 - 1)]
            else:
                for mid in batch.ids:
                    if mid in self._row_of:
                        raise IndexFormatError(f"{where}: adds memory id {mid!r}, which is already held")
            self._apply_add(batch, vecs, access=access)
            if op == "update":
                self._apply_delete([old], forget_id=False)
        elif op == "set":
            batch = batch_from_json(header, where)
            row = self._live_row(checked_int(header, "row", where, -1), where)
            if len(batch) != 1 or self._mids[row] != batch.ids[0]:
                raise IndexFormatError(f"{where}: a log record updates a row it does not hold")
            self._apply_set(row, batch, self._row_metadata(row, batch))
        elif op == "void":
            rows = _row_list(header, where)
            if not rows or rows != list(range(n_rows, n_rows + len(rows))):
                raise IndexFormatError(f"{where}: voids rows {rows[:3]}... not following the {n_rows} rows")
            self._apply_void(rows)
        elif op == "delete":
            rows = [self._live_row(r, where) for r in _row_list(header, where)]
            if len(set(rows)) != len(rows):
                raise IndexFormatError(f"{where}: deletes a row twice")
            self._apply_delete(rows)
        elif op == "invalidate":
            row = self._live_row(checked_int(header, "row", where, -1), where)
            until = checked_int(header, "until", where, _time.MIN_TIME_US, _time.MAX_TIME_US)
            if until <= int(self._index._columns.valid_from_of(np.array([row]))[0]):
                raise IndexFormatError(f"{where}: closes row {row}'s window before it opens")
            self._apply_invalidate(row, until)
        else:  # touch: rows deleted since the search that touched them are counted all the same
            rows = _row_list(header, where)
            if any(not 0 <= r < n_rows for r in rows):
                raise IndexFormatError(f"{where}: touches a row past the {n_rows} rows")
            self._apply_touch(rows)

    def _live_row(self, row: Any, where: str) -> int:
        """``row`` if it is an int naming a row that holds a memory."""
        if type(row) is not int or not 0 <= row < len(self._mids) or self._mids[row] is None:
            raise IndexFormatError(f"{where}: row {row!r} holds no memory")
        return row


_OPS = ("add", "update", "set", "delete", "invalidate", "touch", "void")


def _row_list(header: dict[str, Any], where: str) -> list[int]:
    rows = checked_list(header, "rows", where)
    if any(type(r) is not int for r in rows):
        raise IndexFormatError(f"{where}: field 'rows' must hold integers")
    return rows


def _json_time(values: NDArray[np.int64], open_end: int) -> list[int | None]:
    return [None if v == open_end else int(v) for v in values.tolist()]


def batch_json(batch: Batch) -> dict[str, Any]:
    return {
        "ids": batch.ids, "texts": batch.texts, "t": batch.t.tolist(),
        "valid_from": _json_time(batch.valid_from, _time.OPEN_START),
        "valid_until": _json_time(batch.valid_until, _time.OPEN_END),
        "metadata": [{k: value_to_json(v) for k, v in m.items()} for m in batch.metadata],
    }  # fmt: skip


def batch_from_json(h: dict[str, Any], where: str) -> Batch:
    """The batch a log record holds, through the validator the public calls use (make_batch):
    TypeError/ValueError for a value no call would have logged."""
    ids = checked_list(h, "ids", where)
    n = len(ids)
    if any(not isinstance(i, str) for i in ids):
        raise IndexFormatError(f"{where}: field 'ids' must hold strings")

    def times(key: str, nullable: bool) -> NDArray[np.datetime64]:
        values = checked_list(h, key, where, n)
        if any(not (type(v) is int or (nullable and v is None)) for v in values):
            raise IndexFormatError(
                f"{where}: field {key!r} must hold integers{' or null' if nullable else ''}"
            )
        if any(v is not None and not _time.MIN_TIME_US <= v <= _time.MAX_TIME_US for v in values):
            raise IndexFormatError(f"{where}: field {key!r} holds a time outside 1678..2261")
        return np.array(["NaT" if v is None else v for v in values], dtype="datetime64[us]").reshape(n)

    t, vf, vu = times("t", False), times("valid_from", True), times("valid_until", True)
    metas = checked_list(h, "metadata", where, n)
    if any(not isinstance(m, dict) for m in metas):
        raise IndexFormatError(f"{where}: field 'metadata' must hold objects")
    decoded = [{k: value_from_json(v) for k, v in m.items()} for m in metas]
    return make_batch(checked_list(h, "texts", where, n), ids, t, vf, vu, decoded, 0)
