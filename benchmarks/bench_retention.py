"""Retention on a large Memory while it serves searches: how long is a search ever held up?

A Memory of ``--n`` memories (generated notes spread over a year, the hashing embedder at
``--dim`` dimensions, HalfLife(30 days), in memory) gets a Retention policy whose max_age makes
``--fraction`` of them too old; one thread searches without pause (vector mode, k=10,
touch=False, a query from the held-out notes each time) while the main thread runs
``apply_retention()``, which archives the old memories to one Parquet file and deletes them.
Reported: the run's duration, what it archived and deleted, and the searches' latency before,
during and after the run (p50, p99, max); the longest search during the run is the longest stall
a search saw.

    python benchmarks/bench_retention.py [--n 1000000] [--fraction 0.1] [--dim 256] [--out ...]
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, machine, percentiles_ms, write_results  # noqa: E402
from text_data import generated_items  # noqa: E402

from poincare_index.embed import HashingEmbedder  # noqa: E402
from poincare_index.memory.retention import RetentionRun  # noqa: E402
from poincare_memory import HalfLife, Memory, Retention  # noqa: E402


@dataclass
class Results:
    n: int
    fraction: float
    dim: int
    machine: str
    build_s: float = 0.0
    run_s: float = 0.0
    deleted: int = 0
    archive_bytes: int = 0
    searches: dict[str, dict[str, Any]] = field(default_factory=dict)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 1_000_000,
    "fraction": 0.1,
    "queries": 1000,
    "baseline_s": 10.0,  # searches timed before the run
    "dim": 256,  # the hashing embedder's dimension (default 256)
    "seed": 0,
    "out": os.path.join(HERE, "results", "retention.json"),
}


def run(args: Params) -> int:
    res = Results(args.n, args.fraction, args.dim, machine())
    items = generated_items(args.n + args.queries, args.seed, None)
    texts, times = items.texts[: args.n], items.t[: args.n]
    mem = Memory(decay=HalfLife(hours=24 * 30), embedder=HashingEmbedder(dim=args.dim))
    t0 = time.perf_counter()
    step = 20_000
    for s in range(0, args.n, step):
        mem.add_many(
            texts[s : s + step], [f"m{i}" for i in range(s, min(s + step, args.n))], t=times[s : s + step]
        )
        print(f"\rbuilt {min(s + step, args.n):,}", end="", flush=True)
    res.build_s = time.perf_counter() - t0
    print(f"\nbuilt {args.n:,} memories in {res.build_s:.0f} s", flush=True)
    qvecs = mem.embedder.embed(items.texts[args.n :])
    stamps = np.sort(np.array([t.timestamp() for t in times]))
    cutoff = stamps[int(args.fraction * args.n)]  # this share is older
    newest = stamps[-1]
    now = max(times)
    max_age = timedelta(seconds=float(newest - cutoff))

    phase = {"name": "before"}
    samples: dict[str, list[float]] = {"before": [], "during": [], "after": []}
    stop = threading.Event()

    def search_forever() -> None:
        i = 0
        while not stop.is_set():
            name = phase["name"]
            t_start = time.perf_counter()
            mem.search(vector=qvecs[i % len(qvecs)], k=10, touch=False, at_time=now)
            samples[name].append(time.perf_counter() - t_start)
            i += 1

    searcher = threading.Thread(target=search_forever)
    searcher.start()
    time.sleep(args.baseline_s)
    with tempfile.TemporaryDirectory() as archive:
        mem._retention = RetentionRun(
            Retention(max_age=max_age, archive_dir=archive, every=timedelta(days=1))
        )
        phase["name"] = "during"
        t0 = time.perf_counter()
        res.deleted = mem.apply_retention(now)
        res.run_s = time.perf_counter() - t0
        phase["name"] = "after"
        res.archive_bytes = sum(os.path.getsize(os.path.join(archive, f)) for f in os.listdir(archive))
        time.sleep(min(args.baseline_s, 5.0))
    stop.set()
    searcher.join()
    res.searches = {name: {"count": len(v), **percentiles_ms(v)} for name, v in samples.items() if v}
    print(
        f"retention: {res.deleted:,} memories archived ({res.archive_bytes / 1e6:.1f} MB) and deleted "
        f"in {res.run_s:.2f} s",
        flush=True,
    )
    for name, s in res.searches.items():
        print(f"  searches {name:6s}: {s['count']:6d}, p50 {s['p50']:.2f} ms, p99 {s['p99']:.2f} ms, "
              f"max {s['max']:.1f} ms")  # fmt: skip
    write_results(args.out, res)
    return 0
