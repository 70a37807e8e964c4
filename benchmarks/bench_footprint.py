"""Memory per vector: ours against FAISS IndexHNSWFlat on the lifted vectors and hnswlib L2, on the
same generated hierarchy, each contender built in a process of its own (so one's freed heap does
not flatter the next one's RSS).

Per contender and size: build time, RSS added by the build (after ``malloc_trim``) per vector,
and the analytic bytes per vector (ours: ``memory_usage()``, the allocated capacity of every
array; the others: their layout, see adapters.py). efConstruction=200 for all; M=16 for the
peers, ours at its default (adapters.py).

    python benchmarks/bench_footprint.py [--dims 16 64] [--sizes 100000 1000000] [--threads 2]
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import Params, machine, write_results  # noqa: E402
from child_process import call_in_child  # noqa: E402

CONTENDERS = ("ours-hnsw", "faiss-hnsw-lifted", "hnswlib-l2")


@dataclass
class Point:
    contender: str
    dim: int
    n: int
    build_seconds: float
    rss_bytes_per_vector: float
    analytic_bytes_per_vector: float
    analytic_parts: dict[str, float]


@dataclass
class Results:
    machine: str
    threads: int
    points: list[Point] = field(default_factory=list)
    ratios: list[dict[str, Any]] = field(default_factory=list)


def measure(contender: str, dim: int, n: int, threads: int) -> dict[str, Any]:
    """Runs in the child process: generate, build, measure."""
    import adapters as ad
    from bench_common import rss_bytes

    from poincare_index.datasets import hierarchy

    x = hierarchy(n, dim, seed=0).points
    adapter = ad.CONTENDERS[contender]()
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    adapter.build(x, threads)
    seconds = time.perf_counter() - t0
    rss = rss_bytes() - rss0
    parts = adapter.analytic_bytes()
    per_vector = {k: v for k, v in parts.items() if not k.endswith(("_per_thread", "_fixed"))}
    return {
        "build_seconds": seconds,
        "rss_bytes_per_vector": rss / n,
        "analytic_bytes_per_vector": float(sum(per_vector.values())),
        "analytic_parts": per_vector,
    }


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "dims": [16, 64],
    "sizes": [100_000, 1_000_000],
    "threads": 2,
    "contenders": ",".join(CONTENDERS),
    "out": "benchmarks/results/footprint.json",
}


def run(args: Params) -> int:
    res = Results(machine(), args.threads)
    for n in args.sizes:
        for dim in args.dims:
            row: dict[str, Point] = {}
            for contender in args.contenders.split(","):
                measured = call_in_child(
                    "bench_footprint", "measure", contender=contender, dim=dim, n=n, threads=args.threads
                )
                point = Point(contender, dim, n, **measured)
                row[contender] = point
                res.points.append(point)
                print(f"n={n} d={dim} {contender}: build {point.build_seconds:.1f} s, RSS "
                      f"{point.rss_bytes_per_vector:.0f} B/vector, analytic "
                      f"{point.analytic_bytes_per_vector:.0f} B", flush=True)  # fmt: skip
            ours = row.get("ours-hnsw")
            for other in (c for c in row if c != "ours-hnsw"):
                if ours is None:
                    break
                res.ratios.append({
                    "n": n, "dim": dim, "vs": other,
                    "rss_ratio": ours.rss_bytes_per_vector / row[other].rss_bytes_per_vector,
                    "analytic_ratio": ours.analytic_bytes_per_vector / row[other].analytic_bytes_per_vector,
                    "build_ratio": ours.build_seconds / row[other].build_seconds,
                })  # fmt: skip
                print(f"  ours / {other}: {res.ratios[-1]}", flush=True)
    write_results(args.out, res)
    return 0
