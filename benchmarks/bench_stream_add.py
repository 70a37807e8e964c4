"""Peak memory of a large add from a memory-mapped file: ``add_from(path.npy)`` against
``add(np.load(path))`` (the whole array in memory), each in a process of its own.

The points (a generated hierarchy) are written to a .npy file by a first child process, so
generating them does not count in the measured processes' peak. Per mode: the peak RSS of the
process (getrusage) minus its RSS before the add, beside the index's own size
(``memory_usage()``); the target is peak <= index size + 10 %.

    python benchmarks/bench_stream_add.py [--n 1000000] [--dim 16] [--threads 2]
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import Params, machine, write_results  # noqa: E402
from child_process import call_in_child  # noqa: E402


@dataclass
class Mode:
    mode: str
    seconds: float
    index_bytes: int
    rss_before_bytes: int
    peak_added_bytes: int
    peak_over_index: float  # peak added RSS / index bytes


@dataclass
class Results:
    machine: str
    n: int
    dim: int
    threads: int
    chunk_rows: int
    modes: list[Mode] = field(default_factory=list)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def generate(path: str, n: int, dim: int) -> None:
    """In a first child: the points (a generated hierarchy) written to ``path`` (.npy)."""
    import numpy as np

    from poincare_index.datasets import hierarchy

    np.save(path, hierarchy(n, dim, seed=0).points)


def child(mode: str, path: str, dim: int, threads: int, chunk_rows: int) -> dict[str, Any]:
    import numpy as np

    import poincare_index as pi

    index = pi.PoincareIndex(dim, num_threads=threads)
    at = np.datetime64("2026-06-01T00:00", "us")
    before = _rss()
    if _peak() - before > 64 << 20:
        raise RuntimeError("the child's peak before the add is far above its RSS: no baseline")
    t0 = time.perf_counter()
    if mode == "add_from":
        index.add_from(path, chunk_rows=chunk_rows, t=at)
    else:
        index.add(np.load(path), t=at)
    seconds = time.perf_counter() - t0
    index_bytes = sum(index.memory_usage().values())
    peak_added = _peak() - before
    return asdict(Mode(mode, seconds, index_bytes, before, peak_added, peak_added / index_bytes))


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 1_000_000,
    "dim": 16,
    "threads": 2,
    "chunk_rows": 65_536,
    "modes": ["add_from", "add_in_memory"],
    "out": None,
}


def run(args: Params) -> int:
    res = Results(machine(), args.n, args.dim, args.threads, args.chunk_rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "points.npy")
        call_in_child("bench_stream_add", "generate", path=path, n=args.n, dim=args.dim)
        for mode in args.modes:
            m = Mode(
                **call_in_child(
                    "bench_stream_add", "child", mode=mode, path=path, dim=args.dim,
                    threads=args.threads, chunk_rows=args.chunk_rows,
                )
            )  # fmt: skip
            res.modes.append(m)
            print(
                f"{m.mode:14s} n={args.n} d={args.dim}: {m.seconds:7.1f} s, "
                f"index {m.index_bytes / 2**20:7.1f} MiB, "
                f"peak added {m.peak_added_bytes / 2**20:7.1f} MiB = {m.peak_over_index:.3f}x the index",
                flush=True,
            )
    name = f"stream_add_{args.n // 1000}k_{args.dim}d.json"
    write_results(args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name), res)
