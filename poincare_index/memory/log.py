"""The append-only operation log of a Memory store.

File: 6 magic bytes ``PMLOG\\x00`` + u16 format version, then records. Record: u32 payload
length, u64 sequence number, u32 CRC-32 of those 12 bytes, u32 CRC-32 of the payload, payload.
Payload: u32 length of a UTF-8 JSON header, the header, then raw little-endian float32 vector
bytes (possibly none). Each record goes to the file in one ``write`` before the operation returns, so a killed
process loses nothing acknowledged; ``fsync=True`` also survives power loss.

Reading stops at a torn tail (a record cut short by a crash mid-write, which was never
acknowledged: fewer bytes than a record header, or a header whose own checksum holds but whose
payload runs past the end of the file or fails its checksum as the file's last record) and
truncates it away when opened for appending. Anything else that fails a checksum -- a header, or
a payload followed by more data -- is corruption and raises
:class:`poincare_index.IndexFormatError`: a damaged length can never pass for a torn tail.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._core import IndexFormatError
from .._durable import fsync_dir

__all__ = ["LogWriter", "read_log", "LOG_MAGIC", "LOG_VERSION"]

LOG_MAGIC = b"PMLOG\x00"
LOG_VERSION = 1
_FILE_HEADER = struct.Struct("<6sH")
_RECORD = struct.Struct("<IQII")
_HEAD = struct.Struct("<IQ")


def _encode(seq: int, header: dict[str, Any], vectors: NDArray[np.float32] | None) -> bytes:
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    body = struct.pack("<I", len(head)) + head
    if vectors is not None:
        body += np.ascontiguousarray(vectors, dtype="<f4").tobytes()
    head_crc = zlib.crc32(_HEAD.pack(len(body), seq))
    return _RECORD.pack(len(body), seq, head_crc, zlib.crc32(body)) + body


def read_log(path: Path, start: int = 0) -> tuple[list[tuple[int, dict[str, Any], bytes]], int]:
    """(records as (seq, header, vector bytes), length of the valid prefix in bytes). ``start``:
    the byte where a record begins (the valid prefix a previous read returned), to read only
    what was appended since: a reader tailing a growing log reads each record once."""
    with open(path, "rb") as f:
        head = f.read(_FILE_HEADER.size)
        if len(head) < _FILE_HEADER.size:
            return [], 0  # created but never written (crash right after creation)
        base = max(start, _FILE_HEADER.size)
        f.seek(base)
        data = f.read()  # the bytes from ``base`` on; positions below are absolute
    magic, version = _FILE_HEADER.unpack_from(head, 0)
    if magic != LOG_MAGIC:
        raise IndexFormatError(f"{path}: not a poincare_memory log (bad magic bytes)")
    if version != LOG_VERSION:
        raise IndexFormatError(
            f"{path}: log format version {version} is not supported (this build reads {LOG_VERSION})"
        )
    size = base + len(data)
    pos = base
    out: list[tuple[int, dict[str, Any], bytes]] = []
    while pos < size:
        at = pos - base
        if pos + _RECORD.size > size:
            break  # torn tail: not even a whole record header
        length, seq, head_crc, body_crc = _RECORD.unpack_from(data, at)
        if zlib.crc32(_HEAD.pack(length, seq)) != head_crc:
            if not any(data[at:]):
                break  # a zero-filled tail (file extended, data never written): torn
            raise IndexFormatError(f"{path}: record header at byte {pos} fails its checksum (corrupted log)")
        end = pos + _RECORD.size + length
        if end > size:
            break  # torn tail: the header is sound, the payload was cut short
        body = data[at + _RECORD.size : end - base]
        if zlib.crc32(body) != body_crc:
            if end < size:
                raise IndexFormatError(f"{path}: record at byte {pos} fails its checksum (corrupted log)")
            break  # the last record, torn
        try:
            (head_len,) = struct.unpack_from("<I", body, 0)
            if head_len > len(body) - 4:
                raise ValueError(f"header length {head_len} runs past the record")
            header = json.loads(body[4 : 4 + head_len].decode("utf-8"))
        except (struct.error, ValueError, RecursionError) as exc:  # JSON/UTF-8 errors are ValueErrors
            raise IndexFormatError(f"{path}: record at byte {pos} is malformed: {exc}") from None
        out.append((seq, header, body[4 + head_len :]))
        pos = end
    return out, pos


class LogWriter:
    """Appends records to one log file; ``fsync`` also syncs each record to disk."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = path
        self._fsync = fsync
        exists = path.exists()
        valid = read_log(path)[1] if exists else 0
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if not exists or valid == 0:
                os.ftruncate(self._fd, 0)
                os.write(self._fd, _FILE_HEADER.pack(LOG_MAGIC, LOG_VERSION))
                valid = _FILE_HEADER.size
            os.ftruncate(self._fd, valid)  # drop a torn tail
            os.lseek(self._fd, valid, os.SEEK_SET)
            if fsync or not exists:
                os.fsync(self._fd)
            if not exists:  # the new file's name must survive a power loss too
                fsync_dir(path.parent)
        except BaseException:
            # A new log that is not set up goes again: while it exists, a reader takes it as
            # where the records after its first sequence number are (the old log would be
            # skipped), so a writer that keeps its old log would lose what it appends there.
            os.close(self._fd)
            self._fd = -1
            if not exists:
                path.unlink(missing_ok=True)
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


def iter_records(
    paths: list[Path], after: int, offsets: dict[str, int] | None = None
) -> Iterator[tuple[int, dict[str, Any], bytes]]:
    """The records with sequence numbers above ``after``, in order, from the given logs.

    Sequence numbers go up by one per acknowledged operation (a failed append is cut off and
    its number reused), so past ``after`` each record must be the next number: a gap or a step
    back means records were lost or spliced in, and is an IndexFormatError. ``offsets`` (by log
    file name): where to start reading a log already read (read_log's ``start``); updated with
    where each log's valid records end once they have all been yielded."""
    last = after
    for path in paths:
        records, end = read_log(path, offsets.get(path.name, 0) if offsets is not None else 0)
        for seq, header, blob in records:
            if seq <= after:
                continue  # already in the snapshot (a log the checkpoint had not yet removed)
            if seq != last + 1:
                raise IndexFormatError(
                    f"{path}: record {seq} follows record {last}: the log has lost or foreign records"
                )
            if not isinstance(header, dict):
                raise IndexFormatError(f"{path}: record {seq} has a header that is not an object")
            last = seq
            yield seq, header, blob
        if offsets is not None:
            offsets[path.name] = end
