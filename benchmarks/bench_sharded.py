"""ShardedIndex on a local Ray cluster against the single in-process index, same data.

1. Exactness: flat shards (2 and 4) against the single flat index: ids and distances equal for
   every query, and ``search_scored`` (HalfLife) against the single exact fused top-k.
2. Recall: HNSW shards (2) against the single HNSW at the same ef (recall@10 and recall@1 on
   exact ground truth).
3. Overhead: batch QPS of 2 HNSW shards (one search thread each) against the single index with 2
   threads, over the same ef sweep, compared at the same ef and at equal recall@10 (each sharded
   point against the single index's QPS at its recall: ``single_qps_at``), for plain remote
   calls and for ``low_latency=True`` (the compiled graph); and the single-query latency p50/p99
   of the single index, the sharded one and the sharded one with ``low_latency=True``, i.e.
   what the remote calls add.

    python benchmarks/bench_sharded.py [--data hierarchy] [--n 100000] [--queries 1000]
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, best_of, machine, percentiles_ms, recall_at_k, write_results  # noqa: E402
from datasets import load  # noqa: E402

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


def single_qps_at(single: list[dict[str, float]], r: float) -> float | None:
    """The single index's QPS at recall@10 ``r``: linear between the two neighbouring points of
    its curve where r falls between them, and never below the fastest point that reaches r (on a
    plateau, where several efs give the same recall, the cheapest of them); None above it."""
    reaching = [c["qps"] for c in single if c["recall_at_10"] >= r]
    if not reaching:
        return None
    best = max(reaching)
    ordered = sorted(single, key=lambda c: c["recall_at_10"])
    for lo, hi in zip(ordered, ordered[1:]):
        if lo["recall_at_10"] <= r <= hi["recall_at_10"] and hi["recall_at_10"] > lo["recall_at_10"]:
            w = (r - lo["recall_at_10"]) / (hi["recall_at_10"] - lo["recall_at_10"])
            return max(best, lo["qps"] + w * (hi["qps"] - lo["qps"]))
    return best


def equal_recall_ratios(
    curve: dict[str, list[dict[str, float]]], name: str = "sharded"
) -> list[dict[str, float]]:
    """For each point of ``curve[name]`` whose recall@10 the single index reaches, the single
    index's QPS at that recall (single_qps_at) and the ratio of the sharded QPS to it."""
    out = []
    for point in curve[name]:
        qps = single_qps_at(curve["single"], point["recall_at_10"])
        if qps is not None:
            out.append({"sharded_ef": point["ef"], "recall_at_10": point["recall_at_10"], "single_qps": qps,
                        "sharded_qps": point["qps"], "qps_ratio": point["qps"] / qps})  # fmt: skip
    return out


def sweep_point(index: Any, q: np.ndarray, ef: int, truth: np.ndarray, repeats: int) -> dict[str, float]:
    """One point of a QPS-recall curve: recall@10 against ``truth`` and batch QPS at ``ef``."""
    _, found = index.search(q, 10, ef=ef)
    qps = len(q) / best_of(repeats, index.search, q, 10, ef)[0]
    return {"ef": ef, "recall_at_10": recall_at_k(found, truth), "qps": qps}


def warm_up(n: int, q: np.ndarray, ef: int, *searches: Any) -> None:
    """``n`` untimed single-query searches on each of ``searches``: the latency runs follow the
    batch sweeps, whose results Ray is still releasing, and measure the steady state after."""
    for i in range(min(n, len(q))):
        for search in searches:
            search(q[i : i + 1], 10, ef=ef)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "data": "hierarchy",
    "n": 100_000,
    "queries": 1000,
    "ef": 64,
    "efs": [10, 12, 16, 24, 32, 48, 64, 96],
    "repeats": 3,
    "latency_queries": 300,
    "latency_warmup": 50,  # untimed queries before each latency run (Ray frees the sweep's batches)
    "out": os.path.join(HERE, "results", "sharded.json"),
}


def run(args: Params) -> int:
    import ray

    from poincare_index.distributed import ShardedIndex

    if args.ef not in args.efs:  # the same-ef figures and the latency runs are taken at --ef
        raise ValueError(f"ef {args.ef} must be one of efs {args.efs}")
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
        "sharded_recall_at_10": recall_at_k(Is, I1), "single_recall_at_10": recall_at_k(I1s, I1),
        "sharded_recall_at_1": float(np.mean(Is[:, 0] == I1[:, 0])),
        "single_recall_at_1": float(np.mean(I1s[:, 0] == I1[:, 0])),
        "single_build_s": single_build, "sharded_build_s": sharded_build,
    }  # fmt: skip
    print(f"recall: {res.recall}", flush=True)
    # QPS against recall: the same ef sweep on both; compared at equal recall@10.
    curve: dict[str, list[dict[str, float]]] = {"single": [], "sharded": []}
    for ef in args.efs:
        for name, index in (("single", single), ("sharded", sharded)):
            curve[name].append(sweep_point(index, q, ef, I1, args.repeats))
        print(f"ef={ef}: single {curve['single'][-1]}, sharded {curve['sharded'][-1]}", flush=True)
    base_point = next(c for c in curve["single"] if c["ef"] == args.ef)
    # Latency, one query at a time, alternating with the single index; the plain sharded index
    # is closed before the low-latency one starts, so each runs with only its own two actors.
    lat_single, lat_sharded, lat_single_2, lat_fast = [], [], [], []
    n_lat = min(args.latency_queries, len(q))
    warm_up(args.latency_warmup, q, args.ef, single.search, sharded.search)
    for i in range(n_lat):
        for fn, out in ((single.search, lat_single), (sharded.search, lat_sharded)):
            t0 = time.perf_counter()
            fn(q[i : i + 1], 10, ef=args.ef)
            out.append(time.perf_counter() - t0)
    qps_sharded = next(c for c in curve["sharded"] if c["ef"] == args.ef)["qps"]
    sharded.close()
    fast = ShardedIndex(
        data.dim, shards=2, kind="hnsw", M=16, ef_construction=200, threads_per_shard=1, low_latency=True
    )
    fast.add(db)
    fast.search(q[:1], 10, ef=args.ef)  # the first call compiles the graph
    curve["sharded_low_latency"] = []
    for ef in args.efs:
        curve["sharded_low_latency"].append(sweep_point(fast, q, ef, I1, args.repeats))
        print(f"ef={ef}: sharded, low_latency {curve['sharded_low_latency'][-1]}", flush=True)
    warm_up(args.latency_warmup, q, args.ef, single.search, fast.search)
    for i in range(n_lat):
        for fn, out in ((single.search, lat_single_2), (fast.search, lat_fast)):
            t0 = time.perf_counter()
            fn(q[i : i + 1], 10, ef=args.ef)
            out.append(time.perf_counter() - t0)
    fast.close()
    qps_single = base_point["qps"]
    res.overhead = {
        "curve": curve,
        "batch_qps_single_2_threads": qps_single, "batch_qps_2_shards_same_ef": qps_sharded,
        "qps_ratio_same_ef": qps_sharded / qps_single,
        "equal_recall_curve": equal_recall_ratios(curve),
        "equal_recall_curve_low_latency": equal_recall_ratios(curve, "sharded_low_latency"),
        "latency_single_ms": percentiles_ms(lat_single), "latency_sharded_ms": percentiles_ms(lat_sharded),
        "latency_sharded_low_latency_ms": percentiles_ms(lat_fast),
        "added_latency_p50_ms": float(np.median(lat_sharded) - np.median(lat_single)) * 1e3,
        "latency_single_ms_second_phase": percentiles_ms(lat_single_2),
        "added_latency_p50_ms_low_latency": float(np.median(lat_fast) - np.median(lat_single_2)) * 1e3,
    }  # fmt: skip
    print(f"overhead: { {k: v for k, v in res.overhead.items() if k != 'curve'} }", flush=True)
    write_results(args.out, res)
    ray.shutdown()
    return 0
