"""Time partitions: one year of stamps in 12 monthly shards, fused search with HalfLife(7 d).

The same ShardedIndex is searched with pruning (newest shard first; a shard is skipped for a
query once its score bound cannot reach that query's k-th score) and without (every shard, one
wave). Reported: the share of shards read per query, batch time and single-query latency of
both, and recall of the fused top-10 against the exact fused top-10 of a single flat index.

    python benchmarks/bench_time_shards.py [--n 100000] [--queries 1000] [--kind hnsw]
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, machine, percentiles_ms, recall_at_k, write_results  # noqa: E402
from datasets import load  # noqa: E402

import poincare_index as pi  # noqa: E402


@dataclass
class Results:
    data: str
    n: int
    queries: int
    kind: str
    machine: str
    parameters: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "data": "hierarchy",
    "n": 100_000,
    "queries": 1000,
    "kind": "hnsw",
    "ef": 64,
    "half_life_days": 7.0,
    "time_coef": [1.0, 0.3],
    "latency_queries": 200,
    "out": None,
}


def run(args: Params) -> int:
    import ray

    from poincare_index.distributed import ShardedIndex

    out = args.out or os.path.join(HERE, "results", f"time_shards_{args.kind}.json")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    data = load(args.data, args.n, args.queries, seed=0)
    db, q = data.database, data.queries
    rng = np.random.default_rng(0)
    start = np.datetime64("2025-01-01T00:00:00", "us")
    year_us = 365 * 24 * 3_600_000_000
    t = start + np.sort(rng.integers(0, year_us, len(db))).astype("timedelta64[us]")
    t = t[rng.permutation(len(db))]  # stamps independent of the points
    span = timedelta(days=365 / 12)
    res = Results(args.data, len(db), len(q), args.kind, machine(), {
        "time_span_days": 365 / 12, "half_life_days": args.half_life_days, "ef": args.ef, "k": 10,
        "stamps": "uniform over 2025, independent of the points", "at_time": "2026-01-01",
    })  # fmt: skip
    s = ShardedIndex(data.dim, kind=args.kind, partition="time", time_span=span, time_origin=start)
    t0 = time.perf_counter()
    for lo in range(0, len(db), 20_000):
        s.add(db[lo : lo + 20_000], t=t[lo : lo + 20_000])
    build = time.perf_counter() - t0
    print(f"{s.shards} shards, built in {build:.1f} s", flush=True)
    single = pi.PoincareFlatIndex(data.dim, num_threads=2)
    single.add(db, t=t)
    at = np.datetime64("2026-01-01T00:00:00", "us")
    decay = pi.HalfLife(hours=24 * args.half_life_days)
    for coef in args.time_coef:
        kw = dict(decay=decay, at_time=at, time_coef=coef, ef=args.ef)
        truth = single.search_scored(q, 10, decay=decay, at_time=at, time_coef=coef).ids
        row: dict[str, Any] = {"time_coef": coef, "shards": s.shards}
        for prune in (True, False):
            s.search_scored(q[:50], 10, prune=prune, **kw)  # warm
            t0 = time.perf_counter()
            r = s.search_scored(q, 10, prune=prune, **kw)
            batch = time.perf_counter() - t0
            lat = []
            for i in range(min(args.latency_queries, len(q))):
                t1 = time.perf_counter()
                s.search_scored(q[i : i + 1], 10, prune=prune, **kw)
                lat.append(time.perf_counter() - t1)
            name = "pruned" if prune else "all"
            row[name] = {
                "share_of_shards_read_per_query": float(r.reads_per_query.mean() / s.shards),
                "shards_called": r.shards_read, "batch_s": batch, "batch_qps": len(q) / batch,
                "latency_ms": percentiles_ms(lat), "recall_at_10": recall_at_k(r.ids, truth),
                "recall_at_1": float(np.mean(r.ids[:, 0] == truth[:, 0])),
            }  # fmt: skip
        row["batch_speedup"] = row["all"]["batch_s"] / row["pruned"]["batch_s"]
        row["latency_p50_speedup"] = row["all"]["latency_ms"]["p50"] / row["pruned"]["latency_ms"]["p50"]
        print(row, flush=True)
        res.runs.append(row)
    s.close()
    write_results(out, res)
    ray.shutdown()
    return 0
