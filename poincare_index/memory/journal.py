"""Write-side persistence of Memory: every change is logged before the call returns, replayed
on open after the snapshot, and folded into a new snapshot at checkpoints (see store.py, log.py)."""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import _time
from .._core import IndexFormatError
from .codec import value_from_json, value_to_json
from .log import LogWriter, iter_records
from .rows import Batch

__all__ = ["MemoryJournal"]


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

    def _checkpoint_locked(self) -> None:
        """Snapshot at the current sequence number, then a fresh log, then the old files go.
        The new log exists before anything older is removed, so a failure at any step leaves
        every acknowledged change either in the snapshot CURRENT names or in a log after it."""
        assert self._ns is not None
        self._write_snapshot_and_rotate(self._index, self._mids, self._texts)

    def _write_snapshot_and_rotate(self, index: Any, mids: list[str | None], texts: list[str | None]) -> None:
        assert self._ns is not None
        snapshot = self._ns.write_snapshot(self._seq, index, mids, texts)
        writer = LogWriter(self._ns.log_path(self._seq + 1), fsync=self._fsync)
        old, self._writer = self._writer, writer
        if old is not None:
            old.close()
        self._since_checkpoint = 0
        self._ns.remove_stale(snapshot, self._seq)

    def _maybe_checkpoint(self) -> None:
        """After a write (writer lock held): checkpoint when due. A failure here loses nothing
        (the changes are in the log); it is reported as a warning and retried on the next write."""
        if self._ns is None or self._since_checkpoint < self._checkpoint_every:
            return
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

    def _log(self, header: dict[str, Any], vecs: Any = None) -> None:
        with self._log_lock:
            self._log_locked(header, vecs)

    def _log_locked(self, header: dict[str, Any], vecs: Any = None) -> None:
        if self._ns is None:
            return
        assert self._writer is not None
        self._seq += 1
        try:
            self._writer.append(
                self._seq, header, None if vecs is None else np.asarray(vecs, dtype=np.float32)
            )
        except BaseException:
            self._seq -= 1
            raise
        self._since_checkpoint += 1

    def _log_or_undo(self, header: dict[str, Any], vecs: Any, rows: list[int]) -> None:
        """Logs an applied add; if the log write fails, the add is undone."""
        try:
            self._log(header, vecs)
        except BaseException:
            self._apply_delete(rows)
            raise

    def _recover(self, ef_search: int) -> None:
        """Loads the snapshot CURRENT names and replays the logs after it. A read-only opener
        can race the writer's checkpoint (which removes the files it supersedes): it retries
        until CURRENT is the same before and after its read."""
        assert self._ns is not None
        attempts = 10 if self._read_only else 1
        for attempt in range(attempts):
            try:
                snapshot = self._load(ef_search)
                if not self._read_only or self._ns.current()[0] == snapshot:
                    break
            except (IndexFormatError, OSError):
                if attempt == attempts - 1:
                    raise
            self._init_state(self._index.num_threads, ef_search)
            time.sleep(0.02 * (attempt + 1))
        else:
            raise IndexFormatError(f"{self._ns.dir}: the store kept changing while being read")
        if not self._read_only:
            logs = self._ns.log_paths()
            path = logs[-1] if logs else self._ns.log_path(self._seq + 1)
            self._writer = LogWriter(path, fsync=self._fsync)

    def _load(self, ef_search: int) -> str | None:
        assert self._ns is not None
        snapshot, snap_seq = self._ns.current()
        if snapshot is not None:
            self._index, self._mids, self._texts = self._ns.read_snapshot(snapshot, self._index.num_threads)
            self._tune_index(ef_search)
            self._row_of = {m: r for r, m in enumerate(self._mids) if m is not None}
        self._seq = snap_seq
        for seq, header, blob in iter_records(self._ns.log_paths(), snap_seq):
            self._replay(header, blob)
            self._seq = seq
            self._since_checkpoint += 1
        return snapshot

    def _replay(self, header: dict[str, Any], blob: bytes) -> None:
        op = header["op"]
        if op in ("add", "update"):
            batch = batch_from_json(header)
            vecs = np.frombuffer(blob, dtype="<f4").reshape(len(batch), self._config.embedder.dim)
            rows = self._apply_add(batch, vecs, access=header.get("access"))
            if rows != [int(r) for r in header["rows"]]:
                raise IndexFormatError(
                    f"{self._ns.dir}: the log does not follow its snapshot (rows {header['rows'][:3]}...)"
                )
            if op == "update":
                self._apply_delete([int(header["old"])], forget_id=False)
        elif op == "set":
            batch = batch_from_json(header)
            row = int(header["row"])
            if len(batch) != 1 or not 0 <= row < len(self._mids) or self._mids[row] != batch.ids[0]:
                raise IndexFormatError(f"{self._ns.dir}: a log record updates a row it does not hold")
            self._apply_set(row, batch, self._row_metadata(row, batch))
        elif op == "delete":
            self._apply_delete([int(r) for r in header["rows"]])
        elif op == "invalidate":
            self._apply_invalidate(int(header["row"]), int(header["until"]))
        elif op == "touch":
            self._apply_touch([int(r) for r in header["rows"]])
        else:
            raise ValueError(f"unknown log operation {op!r}")


def _json_time(values: NDArray[np.int64], open_end: int) -> list[int | None]:
    return [None if v == open_end else int(v) for v in values.tolist()]


def batch_json(batch: Batch) -> dict[str, Any]:
    return {
        "ids": batch.ids, "texts": batch.texts, "t": batch.t.tolist(),
        "valid_from": _json_time(batch.valid_from, _time.OPEN_START),
        "valid_until": _json_time(batch.valid_until, _time.OPEN_END),
        "metadata": [{k: value_to_json(v) for k, v in m.items()} for m in batch.metadata],
    }  # fmt: skip


def batch_from_json(h: dict[str, Any]) -> Batch:
    def times(values: list[int | None], open_end: int) -> NDArray[np.int64]:
        return np.array([open_end if v is None else v for v in values], dtype=np.int64)

    return Batch(
        list(h["ids"]), list(h["texts"]), np.asarray(h["t"], dtype=np.int64),
        times(h["valid_from"], _time.OPEN_START), times(h["valid_until"], _time.OPEN_END),
        [{k: value_from_json(v) for k, v in m.items()} for m in h["metadata"]],
    )  # fmt: skip
