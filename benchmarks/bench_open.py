"""Opening a saved index (Step 11): a full load, load(mmap=True) (mapped, every byte verified),
the fast open load(mmap=True, verify=False), and verify() after it; with the RSS each leaves
and the first query's latency. Each mode runs in a process of its own, 1 + --runs times (the
first warms the page cache and is dropped; the figures are the fastest open and the slowest, a
warm cache, which is what a restarted service on the same machine sees; this sandbox cannot
drop the page cache).

    python benchmarks/bench_open.py --n 5000000 --dim 16 --dir /tmp/open5m
    python benchmarks/bench_open.py --dir /tmp/open5m --reuse     # the index saved before

The index is built with add_from from a generated hierarchy written to a .npy file, and saved.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import Params, machine, write_results  # noqa: E402
from child_process import call_in_child  # noqa: E402

MODES = ("full", "mmap", "fast", "fast+verify")


@dataclass
class Results:
    machine: str
    n: int
    dim: int
    file_bytes: int
    build_seconds: float | None
    save_seconds: float | None
    modes: dict[str, dict[str, float]] = field(default_factory=dict)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _open(mode: str, root: str) -> Any:
    import poincare_index as pi

    if mode == "full":
        return pi.PoincareIndex.load(root)
    if mode == "mmap":
        return pi.PoincareIndex.load(root, mmap=True)
    return pi.PoincareIndex.load(root, mmap=True, verify=False)


def child(mode: str, root: str) -> dict[str, float]:
    # A tiny index first, so the figure is the index's and not the one-time imports (pyarrow's
    # IPC and compute modules: ~0.2 s in a fresh process whatever the size).
    _open(mode, root + "_tiny")
    rss0 = _rss()
    t0 = time.perf_counter()
    index = _open(mode, root)
    opened = time.perf_counter() - t0
    out = {"open_seconds": opened, "rss_after_open_mib": (_rss() - rss0) / 2**20}
    if mode == "fast+verify":
        t = time.perf_counter()
        index.verify()
        out["verify_seconds"] = time.perf_counter() - t
    q = np.full((1, index.dim), 0.01, dtype=np.float32)
    t = time.perf_counter()
    index.search(q, 10)
    out["first_query_ms"] = (time.perf_counter() - t) * 1e3
    rng = np.random.default_rng(0)
    qs = (rng.normal(size=(200, index.dim)) * 0.02).astype(np.float32)
    t = time.perf_counter()
    index.search(qs, 10)
    out["next_200_queries_ms"] = (time.perf_counter() - t) * 1e3
    out["mapped"] = float(index.mapped)
    return out


def build(n: int, dim: int, M: int | None, root: str) -> tuple[float, float]:
    import poincare_index as pi
    from poincare_index.datasets import hierarchy

    npy = root + ".npy"
    np.save(npy, hierarchy(n, dim, seed=0).points)
    links = {} if M is None else {"M": M}  # None: the index's default
    index = pi.PoincareIndex(dim, ef_construction=200, num_threads=os.cpu_count(), **links)
    t = time.perf_counter()
    index.add_from(npy)
    built = time.perf_counter() - t
    os.remove(npy)
    t = time.perf_counter()
    index.save(root)
    return built, time.perf_counter() - t


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 1_000_000,
    "dim": 16,
    "M": None,  # None: the index's default
    "dir": None,  # where the index is saved (kept for --reuse)
    "reuse": False,
    "runs": 3,  # timed runs per mode (after one warm-up)
    "out": None,  # default: results/open_<n>_<dim>d.json
}


def run(args: Params) -> int:
    if args.dir is None:  # a throw-away directory (a quick run)
        args.dir = os.path.join(tempfile.mkdtemp(prefix="bench_open_"), "index")
    built = saved = None
    if not os.path.isdir(args.dir + "_tiny"):
        import poincare_index as pi

        tiny = pi.PoincareIndex(args.dim)
        tiny.add(np.full((10, args.dim), 0.01, dtype=np.float32) * np.arange(10)[:, None])
        tiny.save(args.dir + "_tiny")
    if not args.reuse:
        built, saved = build(args.n, args.dim, args.M, args.dir)
        print(f"built {args.n} x {args.dim} in {built:.1f} s, saved in {saved:.1f} s", flush=True)
    manifest = json.load(open(os.path.join(args.dir, "manifest.json")))
    n, dim = int(manifest["ntotal"]), int(manifest["dim"])
    size = sum(os.path.getsize(os.path.join(args.dir, f)) for f in os.listdir(args.dir))
    res = Results(machine(), n, dim, size, built, saved)
    for mode in MODES:
        runs = []
        for _ in range(1 + args.runs):  # the first warms the page cache and is dropped
            runs.append(call_in_child("bench_open", "child", mode=mode, root=args.dir))
        runs = runs[1:]
        m = dict(min(runs, key=lambda r: r["open_seconds"]))  # the run with the fastest open
        m["open_seconds_max"] = max(r["open_seconds"] for r in runs)
        m["runs"] = float(len(runs))
        res.modes[mode] = m
        extra = f", verify {m['verify_seconds']:.2f} s" if "verify_seconds" in m else ""
        slowest = m["open_seconds_max"] * 1e3
        print(
            f"{mode:12s} open {m['open_seconds'] * 1e3:7.1f} ms (max {slowest:.1f}){extra}, RSS "
            f"{m['rss_after_open_mib']:8.1f} MiB, first query {m['first_query_ms']:.1f} ms, "
            f"200 more {m['next_200_queries_ms']:.1f} ms",
            flush=True,
        )
    out = args.out or os.path.join(HERE, "results", f"open_{n // 1000}k_{dim}d.json")
    write_results(out, res)
    return 0
