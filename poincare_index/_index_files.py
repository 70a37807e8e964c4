"""Saved-index directories: binary files written by the core plus a JSON manifest (the format;
:mod:`poincare_index.io` is its public face).

Layout of a saved index directory::

    manifest.json          format name and version, kind, dim, curvature, parameters, the data
                           files with their sizes, and a CRC-32 of the manifest itself
    vectors-<token>.bin    ids, deletion flags, float32 vectors (magic, version, CRC-32 trailer)
    graph-<token>.bin      HNSW levels and links (HNSW indexes only; same framing)
    columns-<token>.arrow  the per-point columns (Arrow IPC file, memory-mapped on load); its
                           size and CRC-32 are in the manifest

Saving writes new data files under a fresh token, fsyncs them, then atomically replaces
``manifest.json`` (write beside, fsync, rename, fsync the directory) and only then deletes the
previous data files: a crash at any point leaves either the old or the new index readable.
Saves to one directory hold an exclusive flock on it, so saves from several threads or
processes take turns (each whole), and a load holds a shared one, so it never reads the data
files of a manifest a save is replacing.
No pickle anywhere; loading checks the manifest, the sizes, the magic bytes, the version and
the checksums before trusting any offset, and validates the graph.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any, Union

import numpy as np
from numpy.typing import NDArray

from . import _core
from ._checked import checked_dict, checked_float, checked_int, checked_str
from ._closing import refuse_if_closed
from ._core import IndexFormatError
from ._durable import file_crc32, folder_lock, json_checksum, load_json, write_json_atomic
from ._interrupts import fault_point
from ._progress import progress_bar
from ._validation import as_flag, as_num_threads
from .columns import ColumnStore

__all__ = ["write_index", "read_index", "register_kind", "FORMAT_NAME", "FORMAT_VERSION", "MANIFEST"]

FORMAT_NAME = "poincare_index"
FORMAT_VERSION = 2  # 2: the columns file
MANIFEST = "manifest.json"
_DATA_FILE = re.compile(r"^((vectors|graph)-[0-9a-f]{12}\.bin|columns-[0-9a-f]{12}\.arrow)$")

PathLike = Union[str, "os.PathLike[str]"]

# The index classes by the kind their manifest names. This module sits below index.py (which
# registers both classes as it is imported), so it builds an index object without importing
# the module that defines it.
_KINDS: dict[str, Any] = {}


def register_kind(kind: str, cls: Any) -> None:
    """Makes ``cls`` the class a saved index of ``kind`` loads as (``cls._from_core(core,
    **state)``) and the class ``write_index`` accepts for that kind."""
    _KINDS[kind] = cls


def write_index(index: Any, path: PathLike) -> None:
    """Save ``index`` to the directory ``path`` atomically (see the module docstring).

    An existing saved index at ``path`` is replaced; a non-empty directory that is not a saved
    index is refused with FileExistsError rather than mixed into. Saves to one directory from
    several threads or processes run one after the other, each complete (a lock on the
    directory). Nothing on disk changes when the index is closed (ClosedError), when a write cut
    off earlier left it inconsistent (InconsistentStateError), or when it was opened with
    ``verify=False`` and its files fail :meth:`verify` (IndexFormatError): a save never
    replaces a good one with a closed, broken or unchecked index.
    """
    if not isinstance(index, tuple(_KINDS.values())):
        raise TypeError(f"expected a PoincareIndex or PoincareFlatIndex, got {type(index).__name__}")
    refuse_if_closed(index, "write_index", "index")
    root = Path(path)
    if root.exists() and not root.is_dir():
        raise FileExistsError(f"{root} exists and is not a directory")
    root.mkdir(parents=True, exist_ok=True)
    with folder_lock(root):
        # A directory holding only files a save writes (data files, manifest temporaries) is
        # what a failed or killed first save left: it is ours to finish; anything else is not
        # mixed into.
        if not (root / MANIFEST).exists() and any(not _save_leftover(e) for e in root.iterdir()):
            raise FileExistsError(f"{root} is a non-empty directory that is not a saved index")
        _write_locked(index, root)


def _write_locked(index: Any, root: Path) -> None:
    """The save itself, under the directory's lock."""
    token = secrets.token_hex(6)
    vectors_name = f"vectors-{token}.bin"
    graph_name = f"graph-{token}.bin" if index.kind == "hnsw" else ""
    columns_name = f"columns-{token}.arrow"
    with index._write_lock:  # a consistent snapshot: no add or remove runs during the save
        refuse_if_closed(index, "write_index", "index")  # closed while this call waited for the locks
        # What a fast open left unchecked is checked before it is written out with fresh
        # checksums, which would make a damaged file pass every later load.
        index._core.verify()
        # An object a failed write left inconsistent is refused before a file is written, so it
        # can never replace a good save (saves replace atomically).
        index._check_consistent()
        fault_point("write_index:data")
        index._core.save(str(root / vectors_name), str(root / graph_name) if graph_name else "")
        columns_size, columns_crc = index._columns.write(root / columns_name)
        body: dict[str, Any] = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "kind": index.kind,
            "dim": index.dim,
            "curvature": index.curvature,
            "ntotal": index.ntotal,
            "slots": int(index._core.slots),
            "files": {
                "vectors": {"name": vectors_name, "size": (root / vectors_name).stat().st_size},
                "columns": {"name": columns_name, "size": columns_size, "crc32": columns_crc},
            },
        }
        params = index._saved_params()
        if params is not None:
            body["params"] = params
            body["files"]["graph"] = {"name": graph_name, "size": (root / graph_name).stat().st_size}
    fault_point("write_index:manifest")
    write_json_atomic(root / MANIFEST, body, indent=2, tmp=root / f"{MANIFEST}.tmp-{token}")
    fault_point("write_index:cleanup")
    keep = {vectors_name, graph_name, columns_name}
    for entry in root.iterdir():
        if _save_leftover(entry) and entry.name not in keep:
            entry.unlink(missing_ok=True)


def _save_leftover(entry: Path) -> bool:
    """A file a save writes: a data file or a manifest temporary (ours to replace or remove)."""
    return entry.is_file() and (
        _DATA_FILE.match(entry.name) is not None or entry.name.startswith(f"{MANIFEST}.tmp-")
    )


def _read_manifest(root: Path) -> dict[str, Any]:
    if not root.exists():
        raise FileNotFoundError(f"no saved index at {root}")
    if not root.is_dir():
        raise IndexFormatError(f"{root} is not a saved index (a saved index is a directory)")
    mpath = root / MANIFEST
    if not mpath.is_file():
        raise IndexFormatError(f"{root} has no {MANIFEST}: not a saved poincare_index")
    manifest = load_json(mpath, "manifest of a saved index")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise IndexFormatError(f"{mpath} is not a poincare_index manifest")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise IndexFormatError(
            f"{mpath}: format version {version!r} is not supported (this version reads {FORMAT_VERSION})"
        )
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    if manifest.get("checksum") != json_checksum(body):
        raise IndexFormatError(f"{mpath}: checksum mismatch, the manifest is corrupted")
    return manifest


def _data_file(root: Path, manifest: dict[str, Any], role: str) -> str:
    where = f"{root}/{MANIFEST} files"
    entry = checked_dict(checked_dict(manifest, "files", f"{root}/{MANIFEST}"), role, where)
    name = checked_str(entry, "name", f"{where}.{role}")
    size = checked_int(entry, "size", f"{where}.{role}", 0)
    if not _DATA_FILE.match(name) or not name.startswith(role + "-"):
        raise IndexFormatError(f"{root}/{MANIFEST} names an invalid {role} file {name!r}")
    fpath = root / name
    if not fpath.is_file():
        raise IndexFormatError(f"{fpath} is missing")
    actual = fpath.stat().st_size
    if actual != size:
        raise IndexFormatError(f"{fpath} has {actual} bytes, the manifest says {size}: truncated or replaced")
    return str(fpath)


def _read_columns(root: Path, manifest: dict[str, Any], slot_ids: NDArray[np.int64]) -> ColumnStore:
    path = Path(_data_file(root, manifest, "columns"))
    expected = checked_int(
        manifest["files"]["columns"], "crc32", f"{root}/{MANIFEST} files.columns", 0, 2**32 - 1
    )
    if file_crc32(path) != expected:
        raise IndexFormatError(f"{path}: checksum mismatch, the columns file is corrupted")
    return ColumnStore.read(path, slot_ids)


def read_index(
    path: PathLike,
    num_threads: int | None = None,
    progress: bool = False,
    *,
    mmap: bool = False,
    verify: bool = True,
) -> Any:
    """Load a PoincareIndex or PoincareFlatIndex saved with :func:`write_index` (``progress``:
    a bar over the bytes of its data files as each is loaded and checked).

    ``mmap=True`` maps the vectors, rank factors and level-0 links from the files (private,
    copy-on-write: nothing is ever written back) instead of reading them into memory; pages are
    read as searches touch them. With ``verify=True`` (the default) every byte is still checked
    before this returns, as a full load does, but nothing is copied. ``verify=False`` is the
    fast open: the manifest, sizes, headers, the small arrays (ids, flags, levels, upper links)
    and each file's table of per-block checksums are checked, the big arrays are not read, and
    the call takes milliseconds whatever the size. The trade-off: until :meth:`verify` runs, a
    damaged or crafted file can give wrong results or crash the process, so use it for files
    your own service wrote. The first write (add, remove) to such an index verifies it first;
    writes then copy what they change (a page, or a whole array when it grows). Files of
    format version 1 have no checksum table and are read in full.

    Raises FileNotFoundError if nothing is at ``path`` and IndexFormatError (a ValueError) if
    it is not a valid saved index: foreign, truncated, corrupted, crafted, or from another
    format version. Every field of the manifest is checked, and must agree with the data files.
    """
    root = Path(path)
    threads = as_num_threads(num_threads)
    mmap, verify = as_flag(mmap, "mmap"), as_flag(verify, "verify")
    if not root.is_dir():
        _read_manifest(root)  # raises: nothing, or not a directory
    # A save running meanwhile finishes first: it deletes the data files of the manifest it
    # replaces, which this load may have read.
    with folder_lock(root, shared=True):
        manifest = _read_manifest(root)
        where = f"{root}/{MANIFEST}"
        kind = checked_str(manifest, "kind", where, ("flat", "hnsw"))
        expected = (
            checked_int(manifest, "dim", where, 1, 1 << 20),
            checked_float(manifest, "curvature", where, positive=True),
            checked_int(manifest, "ntotal", where, 0, 2**32 - 1),
            checked_int(manifest, "slots", where, 0, 2**32 - 1),
        )
        with progress_bar(progress, _data_bytes(root, manifest), f"load {root.name}", unit="B") as bar:
            index = _read_parts(root, manifest, kind, expected, threads, bar, bool(mmap))
    if mmap and verify:  # the mapped files stay whole if a save replaces them: it unlinks them
        index.verify()
    return index


def _data_bytes(root: Path, manifest: dict[str, Any]) -> int:
    """The data files' sizes the manifest states (the progress bar's total; checked later)."""
    files = manifest.get("files")
    entries = files.values() if isinstance(files, dict) else ()
    return sum(e["size"] for e in entries if isinstance(e, dict) and type(e.get("size")) is int)


def _read_parts(
    root: Path,
    manifest: dict[str, Any],
    kind: str,
    expected: tuple[Any, ...],
    threads: int,
    bar: Any,
    mmap: bool,
) -> Any:
    where = f"{root}/{MANIFEST}"
    vectors = _data_file(root, manifest, "vectors")
    if kind == "flat":
        core = _core.FlatIndexCore.load(vectors, threads, mmap)
        index = _KINDS["flat"]._from_core(core)
        bar.update(Path(vectors).stat().st_size)
    else:
        params = checked_dict(manifest, "params", where)
        graph_params = (
            checked_int(params, "M", f"{where} params", 2, 256),
            checked_int(params, "ef_construction", f"{where} params", 1, 2**31 - 1),
            checked_int(params, "seed", f"{where} params", 0, 2**64 - 1),
        )
        # null: searches use the recall target (manifests before it always name a width).
        ef_search = (
            None
            if params.get("ef_search", 0) is None
            else checked_int(params, "ef_search", f"{where} params", 1, 2**31 - 1)
        )
        graph = _data_file(root, manifest, "graph")
        core = _core.HnswIndexCore.load(vectors, graph, threads, mmap)
        bar.update(Path(vectors).stat().st_size + Path(graph).stat().st_size)
        if (core.M, core.ef_construction, core.seed) != graph_params:
            raise IndexFormatError(f"{root}: graph parameters disagree with the manifest")
        # Manifests before compressed storage name no storage: their vectors files hold no codes.
        storage = (
            checked_str(params, "storage", f"{where} params", ("f32", "f16", "sq8"))
            if "storage" in params
            else "f32"
        )
        if core.storage != storage:
            raise IndexFormatError(
                f"{root}: the manifest says storage {storage!r}, the vectors file holds {core.storage!r}"
            )
        index = _KINDS["hnsw"]._from_core(core, _ef_search=ef_search)
        index._restore_recall(params, f"{where} params")
    if (core.dim, core.curvature, core.ntotal, core.slots) != expected:
        raise IndexFormatError(f"{root}: data files disagree with the manifest (dim, curvature or size)")
    index._columns = _read_columns(root, manifest, core.slot_ids())
    bar.update(Path(_data_file(root, manifest, "columns")).stat().st_size)
    return index
