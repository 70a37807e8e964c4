"""On-disk layout of a Memory store: one directory per namespace under the store's path.

    <path>/<namespace>/config.json        format, version, embedder (name, dim, how to rebuild it),
                                          decay policy, depth_bias, time_coef, M, storage, ...;
                                          CRC-32 inside
    <path>/<namespace>/LOCK               flock'ed (with the directory) by the one process writing
    <path>/<namespace>/CURRENT            names the live snapshot and the last sequence number in it
    <path>/<namespace>/snap-<seq>-<nonce>/ index/ (a saved PoincareIndex with its Arrow columns),
                                          rows.arrow (memory id and text per row), manifest.json
    <path>/<namespace>/log-<seq>.bin      operations after the snapshot (see log.py)

Opening = the snapshot CURRENT names + every logged operation with a higher sequence number. A
checkpoint writes a new snapshot directory under a name no other directory has (a random nonce
after the sequence number, so a checkpoint with nothing new since the last never writes over the
live snapshot), switches CURRENT (write beside, fsync, rename, fsync the directory), starts a new
log and only then deletes the snapshots and logs CURRENT no longer needs: nothing CURRENT names
is ever deleted or replaced, so a crash at any point leaves a store that opens to every
acknowledged operation.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .._checked import checked_dict, checked_float, checked_int, checked_str, checked_table
from .._core import IndexFormatError
from .._durable import file_crc32, fsync_dir, read_json_checked, write_json_atomic
from ..decay import check_future_weight
from ..embed import HashingEmbedder, MiniLMEmbedder
from ..index import STORAGE_KINDS, PoincareIndex
from ..io import read_index, write_index
from .codec import CustomDecayNeeded, policy_from_json
from .log import LogDamageError, create_log, scan_log

__all__ = ["StoreLockedError", "NamespaceDir", "valid_namespace"]

CONFIG_FORMAT = "poincare_memory"
CONFIG_VERSION = 1
_NAMESPACE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_SNAP = re.compile(r"^snap-(\d{16})(?:-[0-9a-f]{8})?$")
_LOG = re.compile(r"^log-(\d{16})\.bin$")
_ROWS_SCHEMA = pa.schema([("id", pa.string()), ("text", pa.string())])
# The Arrow types rows.metadata_columns makes from metadata values (str, int, float, bool,
# datetime, all None): a snapshot holding another one was not written by a Memory.
_METADATA_TYPES = (pa.string(), pa.int64(), pa.float64(), pa.bool_(), pa.timestamp("us", tz="UTC"), pa.null())


class StoreLockedError(RuntimeError):
    """Another process (or another Memory in this one) has the namespace open for writing."""


def valid_namespace(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"namespace must be a str, got {type(name).__name__}")
    if not _NAMESPACE.match(name):
        raise ValueError(
            f"namespace {name!r} must be 1-64 characters of letters, digits, '_', '.', '-' "
            "(not starting with '.' or '-')"
        )
    return name


def namespaces_under(root: Path) -> list[str]:
    """The namespaces stored under ``root`` (folders with a config.json)."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "config.json").exists())


class NamespaceDir:
    """Files of one namespace; ``lock()`` takes the writer lock (non-blocking)."""

    def __init__(self, root: Path, namespace: str) -> None:
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise FileExistsError(f"{root} is a file, not a memory store directory")
        if (root / "manifest.json").is_file():  # a saved index (write_index), not a store
            raise FileExistsError(
                f"{root} holds a saved index (manifest.json); open it with read_index(), or give "
                "Memory a directory of its own"
            )
        self.dir = root / valid_namespace(namespace)
        self._lock_fds: list[int] = []

    @property
    def exists(self) -> bool:
        """Whether a store was created here. A directory holding a store's files but no
        configuration lost it: IndexFormatError, never a fresh store written over the data."""
        if (self.dir / "config.json").exists():
            return True
        found = [
            p for p in (self.dir.iterdir() if self.dir.is_dir() else ())
            if p.name == "CURRENT" or _SNAP.match(p.name) or _LOG.match(p.name)
        ]  # fmt: skip
        # A store is created by its first log, then config.json: a first log holding nothing
        # alone is a creation cut short, which the next one finishes.
        if found and not (found == [self.log_path(1)] and _holds_no_record(found[0])):
            raise IndexFormatError(f"{self.dir} holds a memory store's data but no config.json")
        return False

    # ---- the writer lock ---------------------------------------------------------------------
    def lock(self) -> None:
        """Takes the writer lock: an exclusive flock on the namespace directory itself (which
        cannot be deleted while it holds the store, so a second writer is kept out even if LOCK
        is removed), and on LOCK (what versions before it lock)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fds: list[int] = []
        try:
            fds.append(os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY))
            fds.append(os.open(self.dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644))
            for fd in fds:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StoreLockedError(
                    f"memory store {self.dir} is open for writing elsewhere (another process, or "
                    "another Memory in this one); close it first or open with read_only=True"
                ) from None
            raise
        self._lock_fds = fds

    def unlock(self) -> None:
        for fd in self._lock_fds:
            os.close(fd)  # closing the descriptor releases the flock
        self._lock_fds = []

    # ---- configuration -----------------------------------------------------------------------
    def stored_embedder(self) -> tuple[str, int]:
        """(name, dim) of the embedder this namespace was built with; FileNotFoundError when
        there is no store here, IndexFormatError for a bad config."""
        if not self.exists:
            raise FileNotFoundError(f"no memory store at {self.dir}")
        spec = self.read_config()["embedder"]
        return str(spec["name"]), int(spec["dim"])

    def read_config(self) -> dict[str, Any]:
        """The saved configuration, every field checked (IndexFormatError naming it)."""
        doc = read_json_checked(self.dir / "config.json", "the store configuration")
        if doc.get("format") != CONFIG_FORMAT:
            raise IndexFormatError(f"{self.dir}: not a poincare_memory store")
        if doc.get("version") != CONFIG_VERSION:
            raise IndexFormatError(
                f"{self.dir}: store format version {doc.get('version')} is not supported "
                f"(this build reads {CONFIG_VERSION})"
            )
        where = f"{self.dir}/config.json"
        spec = checked_dict(doc, "embedder", where)
        checked_str(spec, "name", f"{where} embedder")
        kind = checked_str(spec, "kind", f"{where} embedder", ("hashing", "minilm", "custom"))
        dim = checked_int(spec, "dim", f"{where} embedder", 1, 1 << 20)
        if kind == "hashing":
            checked_float(spec, "radius", f"{where} embedder", positive=True)
        elif kind == "minilm":
            checked_float(spec, "scale", f"{where} embedder", positive=True)
        for key in ("depth_bias", "time_coef", "future_weight"):
            checked_float(doc, key, where)
        if "future_tolerance_s" in doc:  # absent in stores written before step 7: the default
            if not 0 <= checked_float(doc, "future_tolerance_s", where) <= 86_400:
                raise IndexFormatError(f"{where}: field 'future_tolerance_s' is outside [0, 86400]")
        checked_int(doc, "M", where, 2, 256)
        checked_int(doc, "ef_construction", where, 1, 2**31 - 1)
        if "storage" in doc:  # absent in stores written before storage=: "f32"
            checked_str(doc, "storage", where, STORAGE_KINDS)
        if "decay" not in doc:
            raise IndexFormatError(f"{where}: field 'decay' is missing")
        try:
            check_future_weight(doc["future_weight"])
            try:
                policy_from_json(doc["decay"])
            except CustomDecayNeeded:
                pass  # a well-formed reference to the user's own policy
            rebuilt: Any = None  # the built-in embedders are rebuilt from their parameters
            if kind == "hashing":
                rebuilt = HashingEmbedder(dim=dim, radius=float(spec["radius"]))
            elif kind == "minilm":
                rebuilt = MiniLMEmbedder(scale=float(spec["scale"]))  # the model loads on first use
        except (ValueError, TypeError) as exc:
            raise IndexFormatError(f"{where}: {exc}") from None
        if rebuilt is not None and (rebuilt.name, rebuilt.dim) != (spec["name"], dim):
            raise IndexFormatError(
                f"{where}: the embedder is named {spec['name']!r} (dim {dim}) but its parameters "
                f"make {rebuilt.name!r} (dim {rebuilt.dim})"
            )
        return doc

    def write_config(self, body: dict[str, Any]) -> None:
        """Writes config.json; a new store's first log is created before it, so that a store
        with a configuration and no snapshot has lost its first log if it has none."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if not (self.dir / "config.json").exists():
            create_log(self.log_path(1))
        write_json_atomic(self.dir / "config.json", dict(body, format=CONFIG_FORMAT, version=CONFIG_VERSION))

    # ---- snapshots ---------------------------------------------------------------------------
    def current(self) -> tuple[str | None, int]:
        """(snapshot directory name or None, last sequence number it holds)."""
        name, seq, _ = self.current_state()
        return name, seq

    def current_state(self) -> tuple[str | None, int, int]:
        """(snapshot name or None, its sequence number, its row epoch). The epoch counts the
        compactions (which renumber rows) since the store began: a reader whose state has the
        same epoch can follow the logs across checkpoints without loading the snapshot."""
        path = self.dir / "CURRENT"
        if not path.exists():
            return None, 0, 0
        doc = read_json_checked(path, "CURRENT")
        name, seq, epoch = doc.get("snapshot"), doc.get("seq"), doc.get("epoch", 0)
        # The name becomes a path: only a snapshot directory of this namespace is accepted.
        m = _SNAP.match(name) if isinstance(name, str) else None
        if m is None or type(seq) is not int or int(m.group(1)) != seq:
            raise IndexFormatError(f"{path}: CURRENT names no valid snapshot ({name!r}, seq {seq!r})")
        if type(epoch) is not int or not 0 <= epoch < 2**63:
            raise IndexFormatError(f"{path}: field 'epoch' must be a non-negative integer, got {epoch!r}")
        return name, seq, epoch

    def write_snapshot(
        self, seq: int, index: PoincareIndex, mids: list[str | None], texts: list[str | None], epoch: int = 0
    ) -> str:
        """Writes a snapshot under a fresh name and makes CURRENT name it (with the row epoch,
        see current_state); returns the name."""
        while True:  # a name no directory has: never the live snapshot, even at the same seq
            name = f"snap-{seq:016d}-{secrets.token_hex(4)}"
            if not (self.dir / name).exists() and not (self.dir / (name + ".tmp")).exists():
                break
        tmp = self.dir / (name + ".tmp")
        final = self.dir / name
        tmp.mkdir(parents=True)
        write_index(index, tmp / "index")
        rows = pa.table({"id": pa.array(mids, pa.string()), "text": pa.array(texts, pa.string())})
        with pa.OSFile(str(tmp / "rows.arrow"), "wb") as sink:
            with pa.ipc.new_file(sink, rows.schema) as writer:
                writer.write_table(rows)
        with open(tmp / "rows.arrow", "rb+") as f:
            os.fsync(f.fileno())
        write_json_atomic(
            tmp / "manifest.json",
            {"seq": seq, "rows": len(mids), "rows_crc32": file_crc32(tmp / "rows.arrow")},
        )
        os.replace(tmp, final)
        fsync_dir(self.dir)
        write_json_atomic(self.dir / "CURRENT", {"snapshot": name, "seq": seq, "epoch": epoch})
        return name

    def read_snapshot(
        self, name: str, seq: int, num_threads: int | None, progress: bool = False
    ) -> tuple[PoincareIndex, list[str | None], list[str | None]]:
        """The snapshot ``name`` that CURRENT names at ``seq``, every part checked: the manifest's
        fields, the rows file in full (Arrow validation, schema, one live memory per id), and
        the index, whose live rows must be exactly the rows holding a memory."""
        snap = self.dir / name
        where = f"{snap}/manifest.json"
        manifest = read_json_checked(snap / "manifest.json", "the snapshot manifest")
        if checked_int(manifest, "seq", where, 0) != seq:
            raise IndexFormatError(f"{where}: sequence number {manifest['seq']} is not CURRENT's {seq}")
        n_rows = checked_int(manifest, "rows", where, 0, 2**32 - 1)
        rows_crc = checked_int(manifest, "rows_crc32", where, 0, 2**32 - 1)
        rows_path = snap / "rows.arrow"
        if not rows_path.is_file() or file_crc32(rows_path) != rows_crc:
            raise IndexFormatError(f"{rows_path}: missing or fails its checksum (corrupted snapshot)")
        try:
            with pa.memory_map(str(rows_path)) as source:
                rows = pa.ipc.open_file(source).read_all()
        except (pa.ArrowException, OSError) as exc:
            raise IndexFormatError(f"{rows_path}: unreadable: {exc}") from None
        checked_table(rows, str(rows_path))
        if rows.schema != _ROWS_SCHEMA or rows.num_rows != n_rows:
            raise IndexFormatError(
                f"{rows_path}: expected {n_rows} rows of {_ROWS_SCHEMA.names} strings, got "
                f"{rows.num_rows} rows of {rows.schema}"
            )
        mids, texts = rows.column("id").to_pylist(), rows.column("text").to_pylist()
        index = read_index(snap / "index", num_threads=num_threads, progress=progress)
        if not isinstance(index, PoincareIndex) or len(index.columns) != n_rows:
            raise IndexFormatError(f"{snap}: the index and the rows file disagree (corrupted snapshot)")
        meta = index._columns.metadata
        for field in meta.schema if meta is not None else ():
            if field.type not in _METADATA_TYPES:
                raise IndexFormatError(
                    f"{snap}: metadata column {field.name!r} has type {field.type}, which a Memory never "
                    f"writes ({', '.join(map(str, _METADATA_TYPES))})"
                )
        held = [m is not None for m in mids]
        if held != [t is not None for t in texts]:
            raise IndexFormatError(f"{rows_path}: a row has a memory id without a text, or the reverse")
        if not np.array_equal(index._core.slot_ids(), np.arange(n_rows)):
            raise IndexFormatError(f"{snap}: the index's ids are not its rows")
        if not np.array_equal(index._core.live_slots(), np.array(held, dtype=bool)):
            raise IndexFormatError(f"{snap}: the index's live rows are not the rows holding a memory")
        ids = [m for m in mids if m is not None]
        if len(set(ids)) != len(ids):
            raise IndexFormatError(f"{rows_path}: a memory id is held by two rows")
        return index, mids, texts

    # ---- logs --------------------------------------------------------------------------------
    def log_paths(self, after: int | None = None) -> list[Path]:
        """The logs in sequence order; with ``after``, only those that can hold a record with a
        higher sequence number (a log's records run up to the next log's first), so a reader
        never opens a log a checkpoint may remove because the snapshot covers it."""
        found = []
        for p in self.dir.iterdir() if self.dir.exists() else ():
            m = _LOG.match(p.name)
            if m:
                if p.is_file():
                    found.append((int(m.group(1)), p))
                elif p.exists():  # not gone under a checkpoint's cleanup, but not a file either
                    raise IndexFormatError(f"{p}: a log that is not a regular file")
        found.sort()
        if after is not None:
            nexts = [first for first, _ in found[1:]] + [None]
            found = [f for f, nxt in zip(found, nexts) if nxt is None or nxt - 1 > after]
        return [p for _, p in found]

    def logs_after(self, snap_seq: int) -> list[Path]:
        """The logs to replay after the snapshot at ``snap_seq`` (0: none). The first of them,
        ``log-<snap_seq + 1>``, was created before CURRENT named the snapshot (a new store's
        first log before its configuration), so its absence is a deletion, never a crash:
        LogDamageError, whose ``last_seq`` is the snapshot's."""
        paths = self.log_paths(after=snap_seq)
        first = self.log_path(snap_seq + 1)
        if first not in paths:
            raise LogDamageError(
                f"{first}: the log after the snapshot at operation {snap_seq} is missing (deleted?): "
                "operations acknowledged after that snapshot cannot be read",
                snap_seq,
            )
        return paths

    def move_aside(self, logs: list[Path]) -> list[Path]:
        """Renames damaged logs out of the store's way (``<name>.damaged``, numbered when taken),
        kept for inspection; returns their new paths."""
        moved = []
        for p in logs:
            target, n = p.with_name(p.name + ".damaged"), 1
            while target.exists():
                target, n = p.with_name(f"{p.name}.damaged-{n}"), n + 1
            os.replace(p, target)
            moved.append(target)
        if moved:
            fsync_dir(self.dir)
        return moved

    def signature(self) -> tuple[Any, ...] | None:
        """What changes whenever the writer acknowledges an operation or checkpoints: CURRENT's
        identity and the logs' names and sizes (None while files move under a checkpoint)."""
        try:
            st = (self.dir / "CURRENT").stat()
            current = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            current = None
        try:
            return current, tuple((p.name, p.stat().st_size) for p in self.log_paths())
        except (FileNotFoundError, IndexFormatError):
            return None

    def log_path(self, first_seq: int) -> Path:
        return self.dir / f"log-{first_seq:016d}.bin"

    def remove_stale(self, keep: str, logs_after: int) -> None:
        """Snapshots other than ``keep`` (the one CURRENT names), unfinished ones, and the logs
        holding only records <= ``logs_after`` (called after CURRENT names ``keep`` and the log
        after it exists; the writer passes the previous snapshot's sequence number, so a reader
        less than a checkpoint behind can still follow the logs across it). A snapshot a reader
        has pinned (see ``pinned_current``) stays, with every log it needs; a later checkpoint
        removes them once the pin is released."""
        keep_after = logs_after
        for p in self.dir.iterdir():
            if p.name.endswith(".tmp"):
                shutil.rmtree(p, ignore_errors=True)
                continue
            m = _SNAP.match(p.name)
            if m and p.name != keep and not _remove_unless_pinned(p):
                keep_after = min(keep_after, int(m.group(1)))
        needed = set(self.log_paths(after=keep_after))  # the last log always: the writer's own
        for p in self.log_paths():
            if p not in needed:
                p.unlink(missing_ok=True)

    @contextmanager
    def pinned_current(self) -> Iterator[tuple[str | None, int, int]]:
        """(snapshot, seq, epoch) that CURRENT names, pinned for the duration of the block: the writer's
        checkpoint removes neither it nor a log it needs until the block ends, so a reader never
        sees a file vanish under its read. The pin is a shared flock on the snapshot's
        directory, taken before CURRENT is read again to check it still names that snapshot;
        the writer removes a stale snapshot only holding the exclusive lock on it. Readers need
        no write access. A store with no snapshot yet has nothing to pin (None, 0, 0)."""
        for _ in range(1000):  # each try is a few system calls; only a checkpoint landing in
            name, seq, epoch = self.current_state()  # between them makes one fail
            if name is None:
                yield None, 0, 0
                return
            try:
                fd = os.open(self.dir / name, os.O_RDONLY | os.O_DIRECTORY)
            except (FileNotFoundError, NotADirectoryError) as exc:
                # A checkpoint never removes what CURRENT names: if it still names this one,
                # the snapshot was lost outside the store (deleted, replaced by a file).
                if self.current()[0] == name:
                    raise _snapshot_missing(self.dir / name, exc) from None
                continue  # removed by a checkpoint since we read CURRENT
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a writer is removing it
                if self.current()[0] != name:
                    continue  # superseded meanwhile (perhaps removed): pin the new one
                yield name, seq, epoch
                return
            finally:
                os.close(fd)  # releases the pin
        raise IndexFormatError(f"{self.dir}: CURRENT kept changing while a reader pinned it")


def _holds_no_record(log: Path) -> bool:
    try:
        scan = scan_log(log)
    except OSError:
        return False
    return scan.damage is None and not scan.records and scan.torn_bytes == 0


def _snapshot_missing(snapshot: Path, exc: OSError) -> IndexFormatError:
    what = "is not a directory" if isinstance(exc, NotADirectoryError) else "does not exist (deleted?)"
    return IndexFormatError(f"{snapshot}: the snapshot CURRENT names {what}; the store cannot be opened")


def _remove_unless_pinned(snapshot: Path) -> bool:
    """Removes a stale snapshot directory unless a reader holds a pin on it; True if removed."""
    try:
        fd = os.open(snapshot, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        shutil.rmtree(snapshot, ignore_errors=True)  # under the exclusive lock: no reader pins it now
        return True
    finally:
        os.close(fd)
