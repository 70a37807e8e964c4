"""ShardedIndex on a local Ray cluster against the single in-process index, same data.

1. Exactness: flat shards (2 and 4) against the single flat index: ids and distances equal for
   every query, and ``search_scored`` (HalfLife) against the single exact fused top-k.
2. Recall: HNSW shards (2) against the single HNSW at the same ef (recall@10 and recall@1 on
   exact ground truth).
3. Overhead: batch QPS of 2 HNSW shards (one search thread each) against the single index with 2
   threads, at the same ef; and the single-query latency p50/p99 of both, i.e. what the remote
   calls add.

    python benchmarks/bench_sharded.py [--data hierarchy] [--n 100000] [--queries 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import machine, percentiles_ms, write_results  # noqa: E402
from datasets import DATASETS, load  # noqa: E402

import poincare_index as pi  # noqa: E402


@dataclass
class Results:
    data: str
    n: int
    queries: int
    machine: str
    exact: dict[str, Any] = field(default_factory=dict)
    recall: dict[str, Any] = field(default_factory=dict)
    overhead: dict[str, Any] = field(default_factory=dict)


def _recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found.tolist(), truth.tolist())]))


def _best_qps(fn: Any, q: np.ndarray, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(q)
        best = min(best, time.perf_counter() - t0)
    return q.shape[0] / best


def main() -> int:
    import ray

    from poincare_index.distributed import ShardedIndex

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="hierarchy", choices=DATASETS)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--ef", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--latency-queries", type=int, default=300)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "sharded.json"))
    args = ap.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    data = load(args.data, args.n, args.queries, seed=0)
    db, q = data.database, data.queries
    res = Results(args.data, len(db), len(q), machine())
    t = np.datetime64("2025-01-01", "us") + (np.arange(len(db)) * 300_000_000).astype("timedelta64[us]")
    at = t[-1] + np.timedelta64(1, "D")

    single_flat = pi.PoincareFlatIndex(data.dim, num_threads=2)
    single_flat.add(db, t=t)
    D1, I1 = single_flat.search(q, 10)
    scored_kw = {"decay": pi.HalfLife(hours=24 * 7), "at_time": at}
    s1 = single_flat.search_scored(q, 10, **scored_kw)
    for shards in (2, 4):
        sharded = ShardedIndex(data.dim, shards=shards, kind="flat")
        sharded.add(db, t=t)
        D, I = sharded.search(q, 10)
        s = sharded.search_scored(q, 10, **scored_kw)
        res.exact[f"flat_{shards}_shards"] = {
            "ids_equal": bool(np.array_equal(I, I1)), "distances_equal": bool(np.array_equal(D, D1)),
            "scored_ids_equal": bool(np.array_equal(s.ids, s1.ids)),
            "scored_max_abs_diff": float(np.max(np.abs(s.scores - s1.scores))),
        }  # fmt: skip
        print(f"flat x{shards}: {res.exact[f'flat_{shards}_shards']}", flush=True)
        sharded.close()

    single = pi.PoincareIndex(data.dim, M=16, ef_construction=200, num_threads=2)
    t0 = time.perf_counter()
    single.add(db)
    single_build = time.perf_counter() - t0
    sharded = ShardedIndex(data.dim, shards=2, kind="hnsw", M=16, ef_construction=200, threads_per_shard=1)
    t0 = time.perf_counter()
    sharded.add(db)
    sharded_build = time.perf_counter() - t0
    _, Is = sharded.search(q, 10, ef=args.ef)
    _, I1s = single.search(q, 10, ef=args.ef)
    res.recall = {
        "ef": args.ef,
        "sharded_recall_at_10": _recall(Is, I1), "single_recall_at_10": _recall(I1s, I1),
        "sharded_recall_at_1": float(np.mean(Is[:, 0] == I1[:, 0])),
        "single_recall_at_1": float(np.mean(I1s[:, 0] == I1[:, 0])),
        "single_build_s": single_build, "sharded_build_s": sharded_build,
    }  # fmt: skip
    print(f"recall: {res.recall}", flush=True)
    qps_single = _best_qps(lambda b: single.search(b, 10, ef=args.ef), q, args.repeats)
    qps_sharded = _best_qps(lambda b: sharded.search(b, 10, ef=args.ef), q, args.repeats)
    lat_single, lat_sharded = [], []
    for i in range(min(args.latency_queries, len(q))):  # alternating, one query at a time
        for fn, out in ((single.search, lat_single), (sharded.search, lat_sharded)):
            t0 = time.perf_counter()
            fn(q[i : i + 1], 10, ef=args.ef)
            out.append(time.perf_counter() - t0)
    res.overhead = {
        "batch_qps_single_2_threads": qps_single, "batch_qps_2_shards": qps_sharded,
        "qps_ratio": qps_sharded / qps_single,
        "latency_single_ms": percentiles_ms(lat_single), "latency_sharded_ms": percentiles_ms(lat_sharded),
        "added_latency_p50_ms": float(np.median(lat_sharded) - np.median(lat_single)) * 1e3,
    }  # fmt: skip
    print(f"overhead: {res.overhead}", flush=True)
    sharded.close()
    write_results(args.out, res)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
