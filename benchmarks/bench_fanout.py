"""Where a sharded batch search spends its time, and the batch QPS ratio at equal recall by batch
size, against the single in-process index.

For each batch size and ef: the single index's batch time with 2 threads; each shard's own
search time, measured inside its actor (1 thread, both shards at once); the ShardedIndex's
end-to-end time; and from them the ratio the remote calls cost nothing would give
(``bound``: single time / the slower shard's compute) beside the achieved ratio. Recall@10 of
every ef is measured on all queries (exact ground truth), and each sharded point is compared
with the single index's QPS at its recall (``equal_recall``, as bench_sharded.py does). Last,
how a large batch is best handed to the shards: the sharded search with the batch sent inline
in chunks under 100 KB and put into the object store once (``handover``).

    python benchmarks/bench_fanout.py [--data hierarchy] [--n 100000] [--batches 1000 4000 10000]
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

from bench_common import Params, best_of, machine, recall_at_k, write_results  # noqa: E402
from bench_sharded import equal_recall_ratios  # noqa: E402
from datasets import load  # noqa: E402

import poincare_index as pi  # noqa: E402


@dataclass
class Results:
    data: str
    n: int
    machine: str
    shards: int
    recall: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    equal_recall: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    handover: list[dict[str, Any]] = field(default_factory=list)


def _timed_search(shard: Any, q: np.ndarray, k: int, ef: int, repeats: int) -> float:
    """Inside a shard actor: the fastest of ``repeats`` searches of its own index, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        shard.index.search(q, k, ef)
        best = min(best, time.perf_counter() - t0)
    return best


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "data": "hierarchy",
    "n": 100_000,
    "shards": 2,
    "batches": [1000, 4000, 10_000],
    "efs": [10, 12, 16, 24],
    "k": 10,
    "repeats": 5,
    "out": os.path.join(HERE, "results", "fanout.json"),
}


def run(args: Params) -> int:
    import ray

    from poincare_index.distributed import ShardedIndex
    from poincare_index.distributed import sharded as sharded_module

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    data = load(args.data, args.n + max(args.batches), max(args.batches), seed=0)
    db, queries = data.database, np.ascontiguousarray(data.queries)
    res = Results(args.data, len(db), machine(), args.shards)
    flat = pi.PoincareFlatIndex(data.dim, num_threads=2)
    flat.add(db)
    truth = flat.search(queries, args.k)[1]
    del flat
    single = pi.PoincareIndex(data.dim, M=16, ef_construction=200, num_threads=2)
    single.add(db)
    sharded = ShardedIndex(
        data.dim, shards=args.shards, kind="hnsw", M=16, ef_construction=200, threads_per_shard=1
    )
    sharded.add(db)
    actors = sharded.actors
    recall = {}
    for ef in args.efs:
        recall[ef] = {name: recall_at_k(index.search(queries, args.k, ef)[1], truth)
                      for name, index in (("single", single), ("sharded", sharded))}  # fmt: skip
        res.recall.append({"ef": ef, **recall[ef]})
    print(f"recall@10 on {len(queries)} queries: {res.recall}", flush=True)
    for batch in args.batches:
        q = queries[:batch]
        curve: dict[str, list[dict[str, float]]] = {"single": [], "sharded": []}
        for ef in args.efs:
            single_s = best_of(args.repeats, single.search, q, args.k, ef)[0]
            refs = [a.__ray_call__.remote(_timed_search, q, args.k, ef, args.repeats) for a in actors]
            compute = [float(s) for s in ray.get(refs)]
            sharded_s = best_of(args.repeats, sharded.search, q, args.k, ef)[0]
            row = {
                "batch": batch, "ef": ef, "single_2_threads_ms": single_s * 1e3,
                "shard_compute_ms": [c * 1e3 for c in compute], "sharded_ms": sharded_s * 1e3,
                "work_ratio": sum(compute) / (2 * single_s), "bound": single_s / max(compute),
                "ratio": single_s / sharded_s, "overhead_ms": (sharded_s - max(compute)) * 1e3,
            }  # fmt: skip
            res.rows.append(row)
            for name, seconds in (("single", single_s), ("sharded", sharded_s)):
                curve[name].append({"ef": ef, "recall_at_10": recall[ef][name], "qps": batch / seconds})
            print({key: (round(v, 2) if isinstance(v, float) else v) for key, v in row.items()}, flush=True)
        res.equal_recall[str(batch)] = equal_recall_ratios(curve)
        print(f"batch {batch}, equal recall: {res.equal_recall[str(batch)]}", flush=True)
    # The hand-over: one ef, the batch in inline chunks (the split limit raised above it) or put
    # into the object store once (the limit at 0), timed alternately.
    ef = args.efs[0]
    default_limit = sharded_module._SPLIT_LIMIT
    for batch in args.batches:
        q = queries[:batch]
        if q.nbytes < sharded_module._INLINE_LIMIT:  # sent inline as it is either way
            continue
        times: dict[str, list[float]] = {"chunks": [], "put_once": []}
        for _ in range(args.repeats):
            for mode, limit in (("chunks", q.nbytes), ("put_once", 0)):
                sharded_module._SPLIT_LIMIT = limit
                times[mode].append(best_of(3, sharded.search, q, args.k, ef)[0])
        sharded_module._SPLIT_LIMIT = default_limit
        default = "chunks" if q.nbytes <= default_limit else "put_once"
        entry: dict[str, Any] = {"batch": batch, "bytes": q.nbytes, "ef": ef, "default": default}
        entry.update({f"{mode}_ms": float(np.median(t)) * 1e3 for mode, t in times.items()})
        res.handover.append(entry)
        print(f"handover: {entry}", flush=True)
    sharded.close()
    write_results(args.out, res)
    ray.shutdown()
    return 0
