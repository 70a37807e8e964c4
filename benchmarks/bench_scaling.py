"""What one shard costs, measured at two sizes, and what that implies for 100M and 1B vectors.

A shard of a ShardedIndex is a local PoincareIndex in one Ray actor with one search thread, so
this measures exactly that, in this process: build rate (points/s, one thread), resident memory
per vector (RSS growth over the build, so graph, vectors, columns and allocator slack), and
one-thread batch QPS with recall@10 / recall@1 against the exact float64 truth at a few ef.
Then Ray's cost per remote call (an idle actor round trip, and a 1-query search on a 1-shard
ShardedIndex minus the same search in process). The model (``--model``) combines them; its
assumptions are arguments and are written with the results.

    python benchmarks/bench_scaling.py [--sizes 100000 1000000] [--queries 200]
    python benchmarks/bench_scaling.py --model-only benchmarks/results/scaling.json [--ray-only]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, machine, percentiles_ms, recall_at_k, write_results  # noqa: E402
from datasets import load  # noqa: E402
from truth import exact_knn  # noqa: E402

import poincare_index as pi  # noqa: E402


@dataclass
class Results:
    data: str
    dim: int
    machine: str
    shards: list[dict[str, Any]] = field(default_factory=list)
    ray: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_shard(n: int, n_queries: int, efs: list[int]) -> dict[str, Any]:
    ds = load("hierarchy", n + n_queries, n_queries, seed=0)
    db, q = ds.database, ds.queries
    cache = os.path.join(HERE, "results", f"truth_hierarchy_{len(db)}_{n_queries}q.npz")
    if os.path.exists(cache):
        truth = np.load(cache)["ids"]
    else:
        truth = exact_knn(db, q, 10, "poincare").ids
        np.savez(cache, ids=truth)
    rss0 = _rss_bytes()
    index = pi.PoincareIndex(db.shape[1], M=16, ef_construction=200, seed=0, num_threads=1)
    t0 = time.perf_counter()
    index.add(db)
    build = time.perf_counter() - t0
    rss = _rss_bytes() - rss0
    out: dict[str, Any] = {
        "n": len(db), "build_s": build, "build_points_per_s": len(db) / build,
        "rss_bytes_per_vector": rss / len(db), "raw_vector_bytes": 4 * db.shape[1], "search": [],
    }  # fmt: skip
    for ef in efs:
        index.search(q[:20], 10, ef=ef)  # warm
        best = math.inf
        for _ in range(3):
            t0 = time.perf_counter()
            _, I = index.search(q, 10, ef=ef)
            best = min(best, time.perf_counter() - t0)
        out["search"].append({
            "ef": ef, "qps_1_thread": len(q) / best, "recall_at_10": recall_at_k(I, truth),
            "recall_at_1": float(np.mean(I[:, 0] == truth[:, 0])),
        })  # fmt: skip
        print(f"n={len(db):,} ef={ef}: {out['search'][-1]}", flush=True)
    print(f"n={len(db):,}: build {build:.1f} s ({out['build_points_per_s']:.0f}/s), "
          f"{out['rss_bytes_per_vector']:.0f} B/vector RSS", flush=True)  # fmt: skip
    return out


def measure_ray(dim: int, calls: int) -> dict[str, Any]:
    import ray

    from poincare_index.distributed import ShardedIndex

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    x = pi.datasets.hierarchy(20_000, dim, seed=1).points.astype(np.float32)
    local = pi.PoincareIndex(dim, num_threads=1)
    local.add(x)
    sharded = ShardedIndex(dim, shards=1, kind="hnsw")
    sharded.add(x)
    actor = sharded.actors[0]
    ray.get(actor.ntotal.remote())
    rtt, remote, inproc = [], [], []
    for i in range(calls):
        t0 = time.perf_counter()
        ray.get(actor.ntotal.remote())
        rtt.append(time.perf_counter() - t0)
        qi = x[i : i + 1]
        t0 = time.perf_counter()
        sharded.search(qi, 10)
        remote.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        local.search(qi, 10)
        inproc.append(time.perf_counter() - t0)
    # What the driver spends per shard a query fans out to: submitting the call, and merging.
    t0 = time.perf_counter()
    refs = [actor.ntotal.remote() for _ in range(calls)]
    submit = (time.perf_counter() - t0) / calls
    ray.get(refs)
    D = np.random.default_rng(0).random((1, 100 * 10)).astype(np.float32)
    I = np.arange(100 * 10, dtype=np.int64)[None, :]
    t0 = time.perf_counter()
    for _ in range(200):
        order = np.lexsort((I, D), axis=1)[:, :10]
        np.take_along_axis(D, order, axis=1), np.take_along_axis(I, order, axis=1)
    merge_100 = (time.perf_counter() - t0) / 200
    sharded.close()
    ray.shutdown()
    return {
        "idle_round_trip_ms": percentiles_ms(rtt), "one_shard_search_ms": percentiles_ms(remote),
        "in_process_search_ms": percentiles_ms(inproc), "submit_ms_per_call": submit * 1e3,
        "merge_ms_per_100_shards": merge_100 * 1e3,
    }  # fmt: skip


def model(res: Results, args: argparse.Namespace) -> dict[str, Any]:
    """Hash-partitioned HNSW shards of ``shard_size`` vectors (a size measured here, or
    extrapolated in log n from the two measured ones), every query sent to every shard; as many
    nodes as a core per shard and the shards' memory need. Cluster batch QPS = all cores * the
    one-thread per-shard QPS / shards (each query costs one shard search on every shard; a node
    with fewer shards than cores gives each shard several threads); single-query latency = the
    per-shard one-query time + the measured remote-call overhead + the driver's merge."""
    small, large = res.shards[0], res.shards[-1]

    # One ef for both sizes: the smallest that reaches the target recall at the larger size.
    good = [s for s in large["search"] if s["recall_at_10"] >= args.target_recall]
    s_large = good[0] if good else large["search"][-1]
    s_small = next(s for s in small["search"] if s["ef"] == s_large["ef"])
    # QPS falls roughly like 1 / log n in a navigable graph: fit a + b ln n through the two sizes.
    inv = [1.0 / s_small["qps_1_thread"], 1.0 / s_large["qps_1_thread"]]
    ln = [math.log(small["n"]), math.log(large["n"])]
    slope = (inv[1] - inv[0]) / (ln[1] - ln[0]) if ln[1] > ln[0] else 0.0

    def qps_at(n: float) -> float:
        return 1.0 / (inv[1] + slope * (math.log(n) - ln[1]))

    overhead_ms = res.ray["one_shard_search_ms"]["p50"] - res.ray["in_process_search_ms"]["p50"]
    per_shard_ms = res.ray["submit_ms_per_call"] + res.ray["merge_ms_per_100_shards"] / 100
    rows = []
    for total in (100e6, 1e9):
        for shard_size in (1e6, 1e7):
            shards = math.ceil(total / shard_size)
            bytes_per_shard = large["rss_bytes_per_vector"] * shard_size
            usable = args.memory_per_node_gb * 1e9 * 0.8
            # Enough nodes for a core per shard and for the shards' memory.
            nodes = max(math.ceil(shards / args.cores_per_node), math.ceil(shards * bytes_per_shard / usable))
            per_node = math.ceil(shards / nodes)
            q = qps_at(shard_size)
            rows.append({
                "vectors": total, "shard_size": shard_size, "shards": shards, "nodes": nodes,
                "shards_per_node": per_node, "threads_per_shard": max(1, args.cores_per_node // per_node),
                "memory_per_node_gb": per_node * bytes_per_shard / 1e9,
                "build_hours_per_shard_1_thread": shard_size / large["build_points_per_s"] / 3600,
                "per_shard_qps_1_thread": q,
                "cluster_batch_qps": nodes * args.cores_per_node * q / shards,
                "latency_ms_estimate": 1e3 / q + overhead_ms + per_shard_ms * shards,
            })  # fmt: skip
    return {
        "assumptions": {
            "cores_per_node": args.cores_per_node, "memory_per_node_gb": args.memory_per_node_gb,
            "target_recall_at_10": args.target_recall, "ef_small": s_small["ef"], "ef_large": s_large["ef"],
            "remote_overhead_ms": overhead_ms, "driver_ms_per_shard_per_query": per_shard_ms,
            "memory_use": "80 % of a node's memory for shards",
            "placement": "one shard per core, one search thread each",
        },
        "rows": rows,
    }  # fmt: skip


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "sizes": [100_000, 1_000_000],
    "queries": 200,
    "ef": [16, 32, 64, 128],
    "ray_calls": 300,
    "cores_per_node": 32,
    "memory_per_node_gb": 256.0,
    "target_recall": 0.95,
    "ray_only": False,  # with --model-only: measure Ray again
    "model_only": None,  # recompute the model from a results file
    "out": os.path.join(HERE, "results", "scaling.json"),
}


def run(args: Params) -> int:
    if args.model_only:
        with open(args.model_only) as f:
            res = Results(**{k: v for k, v in json.load(f).items() if k != "model"})
        if args.ray_only:
            res.ray = measure_ray(res.dim, args.ray_calls)
    else:
        res = Results("hierarchy", 64, machine())
        for n in args.sizes:
            res.shards.append(measure_shard(n, args.queries, args.ef))
            write_results(args.out, res)
        res.ray = measure_ray(res.dim, args.ray_calls)
        print(f"ray: {res.ray}", flush=True)
    res.model = model(res, args)
    for row in res.model["rows"]:
        print(json.dumps(row), flush=True)
    write_results(args.out, res)
    return 0
