"""Peak memory of a large add from a memory-mapped file: ``add_from(path.npy)`` against
``add(np.load(path))`` (the whole array in memory), each in a process of its own.

The points (a generated hierarchy) are written to a .npy file by a first child process, so
generating them does not count in the measured processes' peak. Per mode: the peak RSS of the
process (getrusage) minus its RSS before the add, beside the index's own size
(``memory_usage()``); the target is peak <= index size + 10 %.

    python benchmarks/bench_stream_add.py [--n 1000000] [--dim 16] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import machine, write_results  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk-rows", type=int, default=65_536)
    ap.add_argument("--modes", nargs="+", default=["add_from", "add_in_memory"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--generate", metavar="PATH", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.generate:
        import numpy as np

        from poincare_index.datasets import hierarchy

        np.save(args.generate, hierarchy(args.n, args.dim, seed=0).points)
        return
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.dim, args.threads, args.chunk_rows)))
        return
    res = Results(machine(), args.n, args.dim, args.threads, args.chunk_rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "points.npy")
        common = [f"--n={args.n}", f"--dim={args.dim}", f"--threads={args.threads}"]
        subprocess.run([sys.executable, __file__, *common, f"--generate={path}"], check=True)
        for mode in args.modes:
            out = subprocess.run(
                [sys.executable, __file__, *common, f"--chunk-rows={args.chunk_rows}", "--child", mode, path],
                check=True,
                capture_output=True,
                text=True,
            )
            m = Mode(**json.loads(out.stdout.strip().splitlines()[-1]))
            res.modes.append(m)
            print(
                f"{m.mode:14s} n={args.n} d={args.dim}: {m.seconds:7.1f} s, "
                f"index {m.index_bytes / 2**20:7.1f} MiB, "
                f"peak added {m.peak_added_bytes / 2**20:7.1f} MiB = {m.peak_over_index:.3f}x the index",
                flush=True,
            )
    name = f"stream_add_{args.n // 1000}k_{args.dim}d.json"
    write_results(args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name), res)


if __name__ == "__main__":
    main()
