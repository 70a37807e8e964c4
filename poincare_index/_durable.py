"""Durable small files: fsync of a folder, CRC-32 of a file, JSON documents written atomically
with a checksum inside and read back checked, and the lock that keeps two saves to one folder
apart. Shared by the saved index, the Memory store and the sharded index's files (one place, so
every format gets the same crash behaviour)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._core import IndexFormatError

__all__ = [
    "fsync_dir", "file_crc32", "json_checksum", "write_json_atomic", "read_json_checked", "folder_lock",
    "load_json",
]  # fmt: skip

# File systems without flock (some network mounts) answer these: the folder is then not locked.
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


@contextmanager
def folder_lock(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Holds a flock on the folder ``path`` itself (no lock file is left behind): exclusive for
    a save, ``shared`` for a load. Saves to one folder from several threads or processes run one
    after the other, each complete, and a load never reads a folder a save is changing (the
    save deletes the files the manifest it replaced named). A process that dies lets go of its
    lock. Where the file system cannot flock, or a load may not open the folder (execute
    permission without read), nothing is locked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except PermissionError:
        if not shared:
            raise
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in _NO_FLOCK:
                raise
        yield
    finally:
        os.close(fd)  # closing the descriptor lets go of the flock


def fsync_dir(path: Path) -> None:
    """Flushes a folder's entries (a rename or a new file in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_crc32(path: Path) -> int:
    """CRC-32 of a whole file, read in 1 MiB pieces."""
    crc = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def json_checksum(body: dict[str, Any]) -> int:
    """CRC-32 of a JSON document in its canonical form (sorted keys, no spaces)."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return zlib.crc32(canonical)


def write_json_atomic(path: Path, body: dict[str, Any], *, indent: int = 1, tmp: Path | None = None) -> None:
    """Writes ``body`` plus its ``checksum`` to ``path`` so that a crash leaves the old file or the
    new one: written beside (``tmp``, default ``<name>.tmp``), fsynced, renamed over, the folder
    fsynced."""
    doc = dict(body, checksum=json_checksum(body))
    tmp = path.with_name(path.name + ".tmp") if tmp is None else tmp
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=indent, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


_EXCERPT = 24  # characters of a broken JSON file quoted around the error


def load_json(path: Path, what: str) -> Any:
    """The JSON document in ``path``; IndexFormatError "<path> is not a valid <what>" saying why
    (not UTF-8: the first bad byte; not JSON: where, with a short excerpt; nested too deeply),
    never a dump of its bytes. FileNotFoundError and other OSErrors pass through."""
    what = what.removeprefix("the ")  # "the store configuration" reads as "a valid store configuration"
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IndexFormatError(
            f"{path} is not a valid {what}: it is not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x})"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        excerpt = text[max(0, exc.pos - _EXCERPT // 2) : exc.pos + _EXCERPT // 2]
        raise IndexFormatError(
            f"{path} is not a valid {what}: it is not JSON ({exc.msg} at line {exc.lineno}, "
            f"column {exc.colno}, near {excerpt!r})"
        ) from None
    except RecursionError:
        raise IndexFormatError(f"{path} is not a valid {what}: its JSON nests too deeply") from None


def read_json_checked(path: Path, what: str) -> dict[str, Any]:
    """The document :func:`write_json_atomic` wrote, without its checksum; IndexFormatError naming
    ``what`` when it is missing, unreadable, not an object or fails its checksum."""
    try:
        doc = load_json(path, what)
    except FileNotFoundError:
        raise IndexFormatError(f"{path}: {what} is missing") from None
    except OSError as exc:
        raise IndexFormatError(f"{path}: {what} is unreadable: {exc.strerror or exc}") from None
    if not isinstance(doc, dict) or "checksum" not in doc:
        raise IndexFormatError(f"{path}: {what} has no checksum")
    stored = doc.pop("checksum")
    if stored != json_checksum(doc):
        raise IndexFormatError(f"{path}: {what} fails its checksum (corrupted)")
    return doc
