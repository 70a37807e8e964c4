"""The append-only operation log of a Memory store.

File: 6 magic bytes ``PMLOG\\x00`` + u16 format version, then records. Record: u32 payload
length, u64 sequence number, u32 CRC-32 of those 12 bytes, u32 CRC-32 of the payload, payload.
Payload: u32 length of a UTF-8 JSON header, the header, then raw little-endian float32 vector
bytes (possibly none). Each record goes to the file in one ``write`` before the operation
returns, so a killed process loses nothing acknowledged; ``fsync=True`` also survives power
loss. A log is created whole (its header written beside and renamed into place), so a log file
shorter than its header was cut, never left so by a crash.

What a read tells apart (docs/reliability.md lists it, with what cannot be told):

- a **torn tail**: what a process killed mid-append leaves at the end of the last log -- fewer
  bytes than a record header, a sound header whose payload runs past the end of the file, or a
  zero-filled remainder (a file extended by a power loss before its data reached the disk).
  That record was never acknowledged; the writer cuts it off on opening and says so.
- **damage**: anything else that fails -- a header or a complete payload failing its checksum
  (one flipped bit included, in the last record too: a kill cannot leave a whole record with a
  wrong checksum), a malformed payload, a file shorter than its header. A damaged length can
  never pass for a torn tail, because the header's own checksum covers it.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._core import IndexFormatError
from .._durable import fsync_dir

__all__ = [
    "LogWriter",
    "LogScan",
    "LogDamageError",
    "RecoveryWarning",
    "read_log",
    "scan_log",
    "create_log",
    "iter_records",
    "log_first_seq",
    "LOG_MAGIC",
    "LOG_VERSION",
]

LOG_MAGIC = b"PMLOG\x00"
LOG_VERSION = 1
_FILE_HEADER = struct.Struct("<6sH")
_RECORD = struct.Struct("<IQII")
_HEAD = struct.Struct("<IQ")

Record = tuple[int, dict[str, Any], bytes]


class RecoveryWarning(RuntimeWarning):
    """Opening a store dropped something: a torn tail (an operation that was never
    acknowledged), or, with ``recover=True``, the damaged part of a log and every operation
    after it. The message says what, from which file, and the last operation kept."""


class LogDamageError(IndexFormatError):
    """A store's log is damaged or incomplete in a way a crash cannot explain: acknowledged
    operations may be lost. ``last_seq``: the last operation that can be read back intact in
    sequence (opening with ``recover=True`` keeps the store up to it); ``path``: the damaged log
    (None when a log is missing)."""

    def __init__(self, message: str, last_seq: int, path: Path | None = None) -> None:
        super().__init__(message)
        self.last_seq = last_seq
        self.path = path


@dataclass
class LogScan:
    """What one read of a log found: the intact ``records`` from the start on, ``end`` (the
    byte where they end), the file's ``size``, and either ``damage`` (what is wrong at ``end``)
    or, when ``end < size`` without damage, a torn tail of ``size - end`` bytes."""

    records: list[Record] = field(default_factory=list)
    end: int = 0
    size: int = 0
    damage: str | None = None

    @property
    def torn_bytes(self) -> int:
        return 0 if self.damage is not None else self.size - self.end


def _encode(seq: int, header: dict[str, Any], vectors: NDArray[np.float32] | None) -> bytes:
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    body = struct.pack("<I", len(head)) + head
    if vectors is not None:
        body += np.ascontiguousarray(vectors, dtype="<f4").tobytes()
    head_crc = zlib.crc32(_HEAD.pack(len(body), seq))
    return _RECORD.pack(len(body), seq, head_crc, zlib.crc32(body)) + body


def scan_log(path: Path, start: int = 0) -> LogScan:
    """Reads a log without raising for what it finds in it (see :class:`LogScan`); ``start``:
    the byte where a record begins (the ``end`` of a previous scan), to read only what was
    appended since. OSError when the file cannot be read."""
    with open(path, "rb") as f:
        head = f.read(_FILE_HEADER.size)
        base = max(start, _FILE_HEADER.size)
        f.seek(base)
        data = f.read()  # the bytes from ``base`` on; positions below are absolute
    if len(head) < _FILE_HEADER.size:
        return LogScan(size=len(head), damage=f"the file is {len(head)} bytes, shorter than a log's header")
    magic, version = _FILE_HEADER.unpack_from(head, 0)
    if magic != LOG_MAGIC:
        return LogScan(size=base + len(data), damage="not a poincare_memory log (bad magic bytes)")
    if version != LOG_VERSION:
        return LogScan(
            size=base + len(data),
            damage=f"log format version {version} is not supported (this build reads {LOG_VERSION})",
        )
    scan = LogScan(size=base + len(data))
    pos = base
    while pos < scan.size:
        at = pos - base
        if pos + _RECORD.size > scan.size:
            break  # torn: not even a whole record header
        length, seq, head_crc, body_crc = _RECORD.unpack_from(data, at)
        if zlib.crc32(_HEAD.pack(length, seq)) != head_crc:
            if not any(data[at:]):
                break  # torn: a zero-filled remainder
            scan.damage = f"the record header at byte {pos} fails its checksum"
            break
        end = pos + _RECORD.size + length
        if end > scan.size:
            break  # torn: the header is sound, the payload was cut short
        body = data[at + _RECORD.size : end - base]
        if zlib.crc32(body) != body_crc:
            if end == scan.size and not any(body):
                break  # torn: the last payload zero-filled
            scan.damage = f"the record at byte {pos} (sequence number {seq}) fails its checksum"
            break
        try:
            (head_len,) = struct.unpack_from("<I", body, 0)
            if head_len > len(body) - 4:
                raise ValueError(f"header length {head_len} runs past the record")
            header = json.loads(body[4 : 4 + head_len].decode("utf-8"))
        except (struct.error, ValueError, RecursionError) as exc:  # JSON/UTF-8 errors are ValueErrors
            scan.damage = f"the record at byte {pos} is malformed: {exc}"
            break
        scan.records.append((seq, header, body[4 + head_len :]))
        pos = end
    scan.end = pos
    return scan


def read_log(path: Path, start: int = 0) -> tuple[list[Record], int]:
    """(intact records, the byte where they end) of a log, a torn tail left unread;
    IndexFormatError when the log is damaged (see :func:`scan_log`)."""
    scan = scan_log(path, start)
    if scan.damage is not None:
        raise IndexFormatError(f"{path}: {scan.damage} (corrupted log)")
    return scan.records, scan.end


def log_first_seq(path: Path) -> int:
    """The first sequence number a log may hold, from its name (``log-<seq>.bin``)."""
    return int(path.name[4:-4])


def create_log(path: Path) -> None:
    """Creates an empty log whole: its header written beside, synced and renamed into place,
    the folder synced (a crash leaves no log or a whole one, never a short file). An existing
    log is left as it is."""
    if path.exists():
        return
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, _FILE_HEADER.pack(LOG_MAGIC, LOG_VERSION))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


class LogWriter:
    """Appends records to one log file (created whole if missing); ``fsync`` also syncs each
    record to disk. ``torn``: the bytes of a torn tail cut off on opening (0: none), and
    ``last_seq`` the last intact record's sequence number then (None: no record)."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = path
        self._fsync = fsync
        create_log(path)
        scan = scan_log(path)
        if scan.damage is not None:
            last = scan.records[-1][0] if scan.records else 0
            raise LogDamageError(f"{path}: {scan.damage} (corrupted log)", last, path)
        self.torn = scan.torn_bytes
        self.last_seq = scan.records[-1][0] if scan.records else None
        self._fd = os.open(path, os.O_WRONLY)
        try:
            if self.torn:
                os.ftruncate(self._fd, scan.end)  # the record cut short was never acknowledged
                os.fsync(self._fd)
            os.lseek(self._fd, scan.end, os.SEEK_SET)
        except BaseException:
            os.close(self._fd)
            self._fd = -1
            raise

    def append(self, seq: int, header: dict[str, Any], vectors: NDArray[np.float32] | None = None) -> None:
        record = _encode(seq, header, vectors)
        start = os.lseek(self._fd, 0, os.SEEK_CUR)
        try:
            view = memoryview(record)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self._fsync:
                os.fsync(self._fd)
        except BaseException:
            # Never leave half a record in front of the next one.
            os.ftruncate(self._fd, start)
            os.lseek(self._fd, start, os.SEEK_SET)
            raise

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def iter_records(paths: list[Path], after: int, offsets: dict[str, int] | None = None) -> Iterator[Record]:
    """The records with sequence numbers above ``after``, in order, from the given logs (those
    :meth:`NamespaceDir.log_paths` lists after ``after``).

    Sequence numbers go up by one per acknowledged operation (a failed append is cut off and
    its number reused), and a log is named by the first number it may hold: a log named past the
    next number, a gap or a step back between records, damage in any log, or a torn tail in a
    log that another one follows (the writer had moved on: that log was complete) means
    acknowledged operations are missing, and raises :class:`LogDamageError` once every intact
    record before it has been yielded. A torn tail of the last log is left unread (a reader
    tailing a live log meets a record still being written there). ``offsets`` (by
    log file name): where to start reading a log already read; updated with where each log's
    intact records end once they have all been yielded."""
    last = after
    for i, path in enumerate(paths):
        if log_first_seq(path) > last + 1:
            raise LogDamageError(
                f"{path.parent}: operations {last + 1}..{log_first_seq(path) - 1} are missing: "
                f"no log holds them before {path.name} (a log was deleted?)",
                last,
            )
        start = offsets.get(path.name, 0) if offsets is not None else 0
        scan = scan_log(path, start)
        for seq, header, blob in scan.records:
            if seq <= after:
                continue  # already in the snapshot (a log the checkpoint had not yet removed)
            if seq != last + 1:
                raise LogDamageError(
                    f"{path}: record {seq} follows record {last}: the log has lost or foreign records",
                    last,
                    path,
                )
            if not isinstance(header, dict):
                raise LogDamageError(f"{path}: record {seq} has a header that is not an object", last, path)
            last = seq
            yield seq, header, blob
        if scan.damage is not None:
            raise LogDamageError(f"{path}: {scan.damage} (corrupted log, after record {last})", last, path)
        if scan.torn_bytes and i < len(paths) - 1:
            raise LogDamageError(
                f"{path}: ends in {scan.torn_bytes} bytes of a cut record after record {last}, "
                f"but {paths[i + 1].name} follows it (a log cut short?)",
                last,
                path,
            )
        if offsets is not None:
            offsets[path.name] = scan.end
