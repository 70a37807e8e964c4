"""Write-side persistence of Memory: every change is logged before the call returns, replayed
on open after the snapshot, and folded into a new snapshot at checkpoints (see store.py, log.py)."""

from __future__ import annotations

import threading
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
from .log import LogDamageError, LogWriter, RecoveryWarning, iter_records, log_first_seq
from .result import Result
from .rows import Batch, make_batch
from .state import MemoryRows
from .usage import save_usage

__all__ = ["Journal", "batch_json"]

_KEEP = object()  # log_locked: leave what is pending as it is


class Journal:
    """The log and the snapshots of one Memory (``ns``, the namespace's files; None: a Memory
    without a path, whose operations are counted and applied all the same), applied to ``rows``
    (the Memory's state; replaced in place, never rebound) under ``lock`` (the Memory's
    readers-writer lock)."""

    def __init__(
        self, ns: Any, rows: MemoryRows, lock: Any, *, read_only: bool, fsync: bool,
        checkpoint_every: int, usage: Any, progress: bool,
    ) -> None:  # fmt: skip
        self.ns = ns
        self.rows = rows
        self.lock = lock
        self.read_only = read_only
        self.fsync = fsync
        self.checkpoint_every = checkpoint_every
        self.usage = usage  # saved with every checkpoint
        self.progress = progress  # bars (tqdm) for opening a store
        self.log_lock = threading.Lock()  # log appends and the touch counters
        self.writer: LogWriter | None = None
        self.seq = 0  # operations acknowledged (logged, with a path)
        self.since_checkpoint = 0
        self.unlogged_voids: list[int] = []  # rows of rolled-back adds the log has yet to name
        self.pending: Callable[[], None] | None = None  # the cut-off operation's end (settle_pending)
        self.snapshot: str | None = None  # the snapshot the state was loaded from
        self.snapshot_read: str | None = None
        self.snapshot_seq = 0  # its sequence number (the writer's: the last one it wrote)
        self.epoch = 0  # compactions since the store began (store.NamespaceDir.current_state)
        self.log_offsets: dict[str, int] = {}  # a reader's position in each log it tails
        self.seen: Any = None  # the store's signature when the state was last brought up to date

    def checkpoint(self) -> None:
        """A checkpoint now (a Memory with a path, opened for writing): under the writer lock."""
        if self.ns is None or self.read_only:
            return
        with self.lock.writing():
            self.settle_pending()  # before the log lock: a roll-back takes it
            with self.log_lock:
                self.checkpoint_locked()

    def touch(self, results: list[Result]) -> list[Result]:
        """Counts an access on each result's memory: logged and counted, or neither; the results'
        ``access_count`` set to the new counts."""
        rows = [self.rows.row_of[r.id] for r in results]
        with self.log_lock, deferred_interrupts():
            self.log_locked({"op": "touch", "rows": rows})
            self.rows.apply_touch(rows)
            access = self.rows.index._columns.access_counts(np.asarray(rows, dtype=np.int64))
        # The results were built by this call and nobody holds them yet: their counts are set in
        # place (a dataclasses.replace per result cost ~0.25 ms of a 10-result search).
        for r, c in zip(results, access.tolist()):
            object.__setattr__(r, "access_count", c)
        return results

    def maybe_compact(self, min_rows: int) -> None:
        """When more than half of a large store's rows are deleted memories, rebuild the index
        from the live rows (deleted rows keep their slots in the graph otherwise). A persistent
        store writes the compacted snapshot first and switches to it only once that succeeded,
        so the log after it always speaks of the rows on disk."""
        if not self.rows.compaction_due(min_rows):
            return
        index, mids, texts = self.rows.compacted()
        if self.ns is not None:
            with self.log_lock:
                epoch = self.epoch
                try:
                    self.write_snapshot_and_rotate(index, mids, texts, renumbered=True)
                except BaseException as exc:
                    # Decided by the state: once CURRENT names the compacted snapshot (the epoch
                    # moved), the log follows its rows and so must this Memory.
                    switched = self.epoch != epoch
                    if switched:
                        self.rows.adopt_compacted(index, mids, texts)
                    if not isinstance(exc, Exception):
                        raise
                    what = "compacted, but cleaning up after it failed" if switched else "compaction skipped"
                    warnings.warn(f"memory store {self.ns.dir}: {what} ({exc})", RuntimeWarning, stacklevel=3)
                    return
        self.rows.adopt_compacted(index, mids, texts)

    def checkpoint_locked(self) -> None:
        """Snapshot at the current sequence number, then a fresh log, then the old files go.
        The new log exists before anything older is removed, so a failure at any step leaves
        every acknowledged change either in the snapshot CURRENT names or in a log after it."""
        assert self.ns is not None
        with deferred_interrupts():
            if self.unlogged_voids:  # into the log first: a snapshot's sequence number names
                # everything it holds (a reader at that number adopts it without loading it)
                none_left: list[int] = []
                self.append_record({"op": "void", "rows": self.unlogged_voids})
                self.unlogged_voids = none_left
        self.write_snapshot_and_rotate(self.rows.index, self.rows.mids, self.rows.texts)

    def write_snapshot_and_rotate(
        self, index: Any, mids: list[str | None], texts: list[str | None], renumbered: bool = False
    ) -> None:
        """``renumbered``: a compaction (rows renumbered), which starts a new row epoch; the
        logs before it are then of no use to a reader, else the previous snapshot's are kept."""
        assert self.ns is not None
        epoch = self.epoch + 1 if renumbered else self.epoch
        previous_seq = self.seq if renumbered else self.snapshot_seq
        # The log after the snapshot exists before CURRENT names the snapshot, and the records
        # after it go there from now on, whether or not the switch below happens: so a log
        # that CURRENT's snapshot needs can be missing only when something deleted it, which
        # opening then refuses (store.NamespaceDir.logs_after).
        with deferred_interrupts():  # the new log exists only as the one written to
            writer = LogWriter(self.ns.log_path(self.seq + 1), fsync=self.fsync)
            old, self.writer = self.writer, writer
        if old is not None:
            old.close()
        with deferred_interrupts():  # CURRENT switched and the state that says so: both or neither
            try:
                snapshot = self.ns.write_snapshot(self.seq, index, mids, texts, epoch)
            finally:
                # Decided by what CURRENT names, not by whether the call returned (a step after
                # the switch, the directory's fsync, may fail): a snapshot at this sequence
                # number and epoch holds this state.
                if self.ns.current_state()[1:] == (self.seq, epoch):
                    none_left: list[int] = []
                    self.unlogged_voids = none_left  # the snapshot holds them (or compacted them away)
                    self.epoch, self.snapshot_seq = epoch, self.seq
                    self.since_checkpoint = 0
        save_usage(self.ns.dir, self.usage)
        self.ns.remove_stale(snapshot, previous_seq)

    def maybe_checkpoint(self) -> None:
        """After a write (writer lock held): checkpoint when due. A failure here loses nothing
        (the changes are in the log); it is reported as a warning and retried on the next write."""
        if self.ns is None or self.since_checkpoint < self.checkpoint_every:
            return
        self.settle_pending()
        with self.log_lock:
            try:
                self.checkpoint_locked()
            except Exception as exc:
                warnings.warn(
                    f"memory store {self.ns.dir}: checkpoint failed ({exc}); every change is safe "
                    "in the log and the next write retries",
                    RuntimeWarning,
                    stacklevel=3,
                )

    def log(self, header: dict[str, Any], vecs: Any = None, then: Any = _KEEP) -> None:
        with self.log_lock:
            self.log_locked(header, vecs, then)

    def log_locked(self, header: dict[str, Any], vecs: Any = None, then: Any = _KEEP) -> None:
        """Acknowledges one operation: ``_seq`` counts it once its record is in the log (a Memory
        without a path counts it all the same), and in the same step what is pending becomes
        ``then`` (what is left to apply of it, or None; a touch leaves it alone): so whether an
        operation was logged is read from the state (``pending``), never from where an exception
        landed. Rows voided since the last record are logged first."""
        with deferred_interrupts():
            if self.ns is not None:
                if self.unlogged_voids:
                    none_left: list[int] = []
                    self.append_record({"op": "void", "rows": self.unlogged_voids})
                    self.unlogged_voids = none_left
                self.append_record(header, vecs)
            else:
                self.seq = self.seq + 1
            if then is not _KEEP:
                self.pending, self.rows.unlogged_from = then, None

    def append_record(self, header: dict[str, Any], vecs: Any = None) -> None:
        """Appends one record; the counters move only once it is in the log, by assignments of
        values made before (nothing after the append can fail and leave it uncounted)."""
        assert self.writer is not None
        seq, since = self.seq + 1, self.since_checkpoint + 1
        blob = None if vecs is None else np.asarray(vecs, dtype=np.float32)
        self.writer.append(seq, header, blob)
        self.seq, self.since_checkpoint = seq, since

    def add_logged(
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
        (:meth:`MemoryRows.roll_back_add`, its rows then logged as void before the next record,
        then ``undo``); after it, ``then`` (the rest of the operation, idempotent) is applied
        whatever happens."""
        first, ids = len(self.rows.mids), list(batch.ids)
        meta_before = self.rows.index._columns.metadata

        def roll_back() -> None:
            voided = self.rows.roll_back_add(first, ids, meta_before)
            if self.ns is not None:
                with self.log_lock:  # a search's touch may be logging (and flushing voids)
                    self.unlogged_voids = sorted(set(self.unlogged_voids).union(voided))
            if undo is not None:
                undo()

        with deferred_interrupts():
            self.pending = roll_back  # until the record is logged (log_locked)
            self.rows.unlogged_from = first  # reads skip these rows until then
        try:
            fault_point("memory.add:apply")
            rows = self.rows.apply_add(batch, vecs, access=access, progress=progress)
            fault_point("memory.add:log")
            self.log(record(rows), vecs, then)
            fault_point("memory.add:logged")
            self.settle_pending()  # `then`
        except BaseException:
            self.settle_pending()  # the roll-back, or `then` once logged
            raise
        return rows

    def settle_pending(self) -> None:
        """Finishes the operation in flight, if one was cut off: rolls back an add that was not
        logged, or applies what is left of one that was. Each is idempotent, so one cut off
        itself is finished by the next write, checkpoint or read (writer lock held)."""
        with deferred_interrupts():
            pending = self.pending
            if pending is not None:
                pending()
                self.pending, self.rows.unlogged_from = None, None

    def log_then_apply(self, header: dict[str, Any], apply: Callable[[], None]) -> None:
        """Logs an operation, then applies it in memory (idempotent ``apply``); once logged, it
        is applied even if this call is cut off (the log is the authority: an operation logged
        and not applied would differ on reopening)."""
        try:
            self.log(header, then=apply)
        finally:
            self.settle_pending()

    def recover(self, ef_search: int | None, repair: bool = False) -> None:
        """Loads the snapshot CURRENT names and replays the logs after it. A reader pins the
        snapshot while it reads (NamespaceDir.pinned_current), so the writer's checkpoints
        cannot remove a file under it; it retries only when the store had no snapshot yet and
        the first checkpoint removed the logs it was reading. A torn tail is cut off and
        reported (RecoveryWarning). Damage refuses to open (LogDamageError), unless ``repair``
        (``Memory(recover=True)``): then the store keeps every operation up to the damage, the
        damaged logs are set aside and a checkpoint makes that state the store's, reported."""
        assert self.ns is not None
        attempts = 3 if self.read_only else 1
        damage: LogDamageError | None = None
        for attempt in range(attempts):
            try:
                damage = self.load(ef_search, repair)
                break
            except (IndexFormatError, OSError):
                if attempt == attempts - 1 or self.snapshot_read is not None:
                    raise  # a pinned snapshot that fails to load is damage, not a race
            # Start again from nothing: a blank state, no record counted.
            blank = MemoryRows(self.rows.config, self.rows.index.num_threads, ef_search, self.progress)
            self.rows.take_over(blank)
            self.since_checkpoint = 0
        if self.read_only:
            return
        if damage is not None:
            self.set_damage_aside(damage)
            return
        # The newest log (load found at least the one after the snapshot: logs_after).
        self.writer = LogWriter(self.ns.log_paths()[-1], fsync=self.fsync)
        if self.writer.torn:
            warnings.warn(
                RecoveryWarning(
                    f"memory store {self.ns.dir}: {self.writer.path.name} ended in {self.writer.torn} bytes "
                    f"of a record cut short (what a crash in the middle of a write leaves; that "
                    f"operation was never acknowledged): dropped; the store holds every operation up "
                    f"to number {self.seq}"
                ),
                stacklevel=3,  # the call that opened the Memory
            )

    def set_damage_aside(self, damage: LogDamageError) -> None:
        """``recover=True`` after ``damage``: the state holds every operation up to
        ``damage.last_seq``. The logs that hold anything after it (and the damaged one) are
        renamed aside, kept for inspection, then a checkpoint makes this state the store's."""
        assert self.ns is not None
        aside = [p for p in self.ns.log_paths() if log_first_seq(p) > self.seq or p == damage.path]
        moved = self.ns.move_aside(aside)
        with self.log_lock:
            self.checkpoint_locked()
        kept = ", ".join(f"{p.name} ({p.stat().st_size} bytes)" for p in moved) or "none"
        warnings.warn(
            RecoveryWarning(
                f"memory store {self.ns.dir} opened with recover=True: {damage}. It now holds every "
                f"operation up to number {self.seq}; whatever was logged after that is dropped. "
                f"Logs set aside for inspection: {kept}"
            ),
            stacklevel=4,  # the call that opened the Memory
        )

    def refresh(self, reopen: Callable[[], Any]) -> bool:
        """A read-only Memory: take in what the writer acknowledged since the last look (tail the
        log; after a checkpoint, load the new snapshot). Returns whether anything changed. Called
        on its own before every search, get, list, to_arrow, stats, ``in`` and ``len``, so a
        reader never answers from a state older than the writes acknowledged before the call
        began. Never blocks the writer (it only reads files) and never reads a torn record (a
        record still being written is taken at the next call). A writer that checkpoints
        faster than a snapshot can be read leaves the reader on its last state until a read
        completes (no error). A writer's Memory is always current: refresh() returns False.
        ``reopen`` opens a fresh read-only Memory of the same store (after a checkpoint)."""
        if not self.read_only:
            # A writer's read first finishes an operation that was cut off (a roll-back cut off
            # itself), so no read shows, or a touch logs, rows of an add that was not logged.
            if self.pending is not None and not getattr(self.lock._local, "depth", 0):
                with self.lock.writing():
                    self.settle_pending()
            return False
        if self.ns is None:
            return False
        if getattr(self.lock._local, "depth", 0):
            return False  # inside this Memory's own read (a filter callable): keep its state
        signature = self.ns.signature()
        if signature is not None and signature == self.seen:
            return False
        with self.lock.writing():
            snapshot, snap_seq, epoch = self.ns.current_state()
            if snapshot == self.snapshot and self.tailed(snapshot):
                self.seen = signature
                self.rows.version += 1
                return True
            # A checkpoint with the same row numbering: the logs since our state are kept for a
            # checkpoint more, so a reader that keeps up follows them without a reload.
            if epoch == self.epoch and self.tailed(snapshot, crossing=True) and self.seq >= snap_seq:
                self.snapshot, self.snapshot_seq = snapshot, snap_seq
                self.seen = signature
                self.rows.version += 1
                return True
            # A checkpoint (now, or while the logs were read): the logs we tailed may be gone.
            try:
                fresh = reopen()
            except (IndexFormatError, OSError):
                if self.ns.current()[0] == snapshot:
                    raise  # the store stood still and still does not load: damage, not a race
                # The writer checkpointed again while we read (faster than one snapshot read):
                # keep answering from the state we have and try at the next call.
                self.seen = None
                return False
            self.reload_from(fresh)
            self.seen = signature
            self.rows.version += 1
        return True

    def tailed(self, snapshot: str | None, crossing: bool = False) -> bool:
        """Applies the log records after our sequence number; False when a checkpoint moved the
        logs meanwhile (a log gone, or a gap where its records were), so the caller reloads.
        ``crossing``: following the logs past a checkpoint, where a missing log only means we
        are too far behind (never damage: the reload that follows checks the store)."""
        try:
            paths = self.ns.log_paths(after=self.seq)
            # Only what was appended since the last look is read (per log, from its last end).
            self.log_offsets = {p.name: self.log_offsets[p.name] for p in paths if p.name in self.log_offsets}
            for seq, header, blob in iter_records(paths, self.seq, self.log_offsets):
                self.replay(seq, header, blob)
                self.seq = seq
        except (FileNotFoundError, IndexFormatError):
            if not crossing and self.ns.current()[0] == snapshot:
                raise  # nothing moved: the log itself is damaged
            return False
        return True

    def reload_from(self, fresh: Any) -> None:
        """Takes over the state of a freshly opened reader of the same store (a Memory)."""
        other: Journal = fresh._journal
        self.rows.take_over(fresh._rows)
        self.seq, self.snapshot = other.seq, other.snapshot
        self.snapshot_seq, self.epoch = other.snapshot_seq, other.epoch
        self.log_offsets = other.log_offsets
        fresh._closed = True

    def load(self, ef_search: int | None, repair: bool = False) -> LogDamageError | None:
        """The snapshot and the logs after it. Damage in the logs raises LogDamageError, or
        with ``repair`` ends the replay there and is returned."""
        assert self.ns is not None
        self.snapshot_read = None
        damage = None
        with self.ns.pinned_current() as (snapshot, snap_seq, epoch):
            if snapshot is not None:
                self.snapshot_read = snapshot
                index, mids, texts = self.ns.read_snapshot(
                    snapshot, snap_seq, self.rows.index.num_threads, progress=self.progress
                )
                self.rows.loaded(index, mids, texts, ef_search)
            self.seq, self.snapshot_seq, self.epoch = snap_seq, snap_seq, epoch
            self.seen = self.ns.signature()  # taken before the logs are read: never newer
            self.log_offsets = {}
            try:
                records = iter_records(self.ns.logs_after(snap_seq), snap_seq, self.log_offsets)
                with progress_bar(self.progress, None, "replay log", unit="op") as bar:
                    for seq, header, blob in records:
                        try:
                            self.replay(seq, header, blob)
                        except IndexFormatError as exc:  # intact, but no call could have logged it
                            raise LogDamageError(
                                str(exc), self.seq, self.ns.log_paths(after=self.seq)[0]
                            ) from None
                        self.seq = seq
                        self.since_checkpoint += 1
                        bar.update(1)
            except LogDamageError as exc:
                if not repair:
                    raise LogDamageError(
                        f"{exc}. The store was not opened: operations it acknowledged may be lost. "
                        f"Memory(..., recover=True) opens it with every operation up to number "
                        f"{exc.last_seq} and sets the damaged logs aside",
                        exc.last_seq,
                        exc.path,
                    ) from None
                damage = exc
        self.snapshot = snapshot
        return damage

    def replay(self, seq: int, header: dict[str, Any], blob: bytes) -> None:
        """Applies one logged operation after checking it as the call that logged it checked
        its arguments (the same validators, then the same state checks: ids not held, rows
        that hold a memory), so a crafted log cannot build a state no sequence of calls
        builds. Anything wrong is an IndexFormatError naming the record."""
        where = f"{self.ns.dir}: log record {seq}"
        try:
            self.replay_checked(where, header, blob)
        except IndexFormatError:
            raise
        except (ValueError, TypeError) as exc:  # what the public API's validators raise
            raise IndexFormatError(f"{where}: {exc}") from None

    def replay_checked(self, where: str, header: dict[str, Any], blob: bytes) -> None:
        op = checked_str(header, "op", where, _OPS)
        n_rows = len(self.rows.mids)
        if op in ("add", "update"):
            batch = batch_from_json(header, where)
            dim = self.rows.config.embedder.dim
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
                old = self.live_row(checked_int(header, "old", where, 0, n_rows - 1), where)
                if batch.ids != [self.rows.mids[old]]:
                    raise IndexFormatError(f"{where}: an update of row {old} names another memory")
                (count,) = checked_list(header, "access", where, 1)
                access = [checked_int({"access": count}, "access", where, 0, 2**32 - 1)]
            else:
                for mid in batch.ids:
                    if mid in self.rows.row_of:
                        raise IndexFormatError(f"{where}: adds memory id {mid!r}, which is already held")
            self.rows.apply_add(batch, vecs, access=access)
            if op == "update":
                self.rows.apply_delete([old], forget_id=False)
        elif op == "set":
            batch = batch_from_json(header, where)
            row = self.live_row(checked_int(header, "row", where, -1), where)
            if len(batch) != 1 or self.rows.mids[row] != batch.ids[0]:
                raise IndexFormatError(f"{where}: a log record updates a row it does not hold")
            self.rows.apply_set(row, batch, self.rows.row_metadata(row, batch))
        elif op == "void":
            rows = _row_list(header, where)
            if not rows or rows != list(range(n_rows, n_rows + len(rows))):
                raise IndexFormatError(f"{where}: voids rows {rows[:3]}... not following the {n_rows} rows")
            self.rows.apply_void(rows)
        elif op == "delete":
            rows = [self.live_row(r, where) for r in _row_list(header, where)]
            if len(set(rows)) != len(rows):
                raise IndexFormatError(f"{where}: deletes a row twice")
            self.rows.apply_delete(rows)
        elif op == "invalidate":
            row = self.live_row(checked_int(header, "row", where, -1), where)
            until = checked_int(header, "until", where, _time.MIN_TIME_US, _time.MAX_TIME_US)
            if until <= int(self.rows.index._columns.valid_from_of(np.array([row]))[0]):
                raise IndexFormatError(f"{where}: closes row {row}'s window before it opens")
            self.rows.apply_invalidate(row, until)
        else:  # touch: rows deleted since the search that touched them are counted all the same
            rows = _row_list(header, where)
            if any(not 0 <= r < n_rows for r in rows):
                raise IndexFormatError(f"{where}: touches a row past the {n_rows} rows")
            self.rows.apply_touch(rows)

    def live_row(self, row: Any, where: str) -> int:
        """``row`` if it is an int naming a row that holds a memory."""
        if type(row) is not int or not 0 <= row < len(self.rows.mids) or self.rows.mids[row] is None:
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
