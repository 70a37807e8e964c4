"""What a saved index or a Memory store holds, for ``poincare-index info PATH``: kind, size,
dimension, time range, namespaces, configuration and format versions. Everything is read the
way the loaders read it (validated), and nothing is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from . import _time
from ._durable import load_json

__all__ = ["describe", "check_json_file"]


def check_json_file(path: Path, what: str) -> None:
    """IndexFormatError naming ``path`` when it is not JSON text (see _durable.load_json);
    whether it holds the right fields, or can be read at all, is the loaders' check."""
    try:
        load_json(path, what)
    except OSError:
        return


def _bytes_under(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _time_range(t_us: np.ndarray) -> dict[str, str] | None:
    if t_us.shape[0] == 0:
        return None
    return {
        "first": _time.micros_to_datetime(int(t_us.min())).isoformat(),
        "last": _time.micros_to_datetime(int(t_us.max())).isoformat(),
    }


def describe_index(path: Path) -> dict[str, Any]:
    from .io import FORMAT_VERSION, read_index

    index = read_index(path, num_threads=1)
    cols = index._columns
    live = index._core.live_slots()
    out: dict[str, Any] = {
        "path": str(path),
        "kind": f"saved index ({type(index).__name__})",
        "format_version": FORMAT_VERSION,
        "points": index.ntotal,
        "slots": int(index._core.slots),
        "dim": index.dim,
        "curvature": index.curvature,
        "bytes_on_disk": _bytes_under(path),
        "time_range": _time_range(cols._t[: len(cols)][live]),
        "metadata_columns": [] if cols.metadata is None else cols.metadata.column_names,
    }
    if hasattr(index, "M"):
        out["hnsw"] = {
            "M": index.M, "ef_construction": index.ef_construction, "ef_search": index.ef_search,
            "recall_target": index.recall_target,
        }  # fmt: skip
    return out


def describe_store(root: Path) -> dict[str, Any]:
    from .memory import Memory
    from .memory.store import CONFIG_VERSION

    names = Memory.namespaces(root)
    spaces = []
    for name in names:
        with Memory(path=root, namespace=name, read_only=True, num_threads=1) as mem:
            table = mem.to_arrow()
            t_us = table.column("t").cast("int64").to_numpy() if table.num_rows else np.zeros(0, np.int64)
            spaces.append(
                {
                    "namespace": name,
                    "memories": len(mem),
                    "time_range": _time_range(t_us),
                    "bytes_on_disk": _bytes_under(root / name),
                    **mem._rows.config.to_json(),
                    "snapshot_seq": mem._ns.current()[1],
                    "last_seq": mem._journal.seq,
                }
            )
    return {
        "path": str(root),
        "kind": "memory store",
        "store_format_version": CONFIG_VERSION,
        "namespaces": spaces,
    }


def describe(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A description of the saved index or Memory store (its root or one namespace) at ``path``;
    FileNotFoundError if there is neither, IndexFormatError if it is damaged."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"nothing at {root}")
    if (root / "manifest.json").is_file():
        return describe_index(root)
    if (root / "config.json").is_file():  # one namespace directory
        store = describe_store(root.parent)
        store["namespaces"] = [s for s in store["namespaces"] if s["namespace"] == root.name]
        return store
    from .memory import Memory

    if not Memory.namespaces(root):
        raise FileNotFoundError(f"{root} holds neither a saved index nor a memory store")
    return describe_store(root)
