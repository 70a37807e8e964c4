"""Where a sharded batch search spends its time, against the single in-process index.

For each batch size and ef: the single index's batch time with 2 threads; each shard's own
search time, measured inside its actor (1 thread, both shards at once); the ShardedIndex's
end-to-end time; and from them the ratio the remote calls cost nothing would give
(``bound``: single time / the slower shard's compute) beside the achieved ratio. Also the
cost of handing the batch to the shards: a remote call that only reads it, with the array
passed inline and put into the object store once.

    python benchmarks/bench_fanout.py [--data hierarchy] [--n 100000] [--batches 1000 10000]
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

from bench_common import best_of, machine, write_results  # noqa: E402
from datasets import DATASETS, load  # noqa: E402

import poincare_index as pi  # noqa: E402


@dataclass
class Results:
    data: str
    n: int
    machine: str
    shards: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    handover: list[dict[str, Any]] = field(default_factory=list)


def _timed_search(shard: Any, q: np.ndarray, k: int, ef: int, repeats: int) -> float:
    """Inside a shard actor: the fastest of ``repeats`` searches of its own index, in seconds."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        shard.index.search(q, k, ef)
        best = min(best, time.perf_counter() - t0)
    return best


def _shape(shard: Any, q: np.ndarray) -> tuple[int, ...]:
    return q.shape


def _hand_over(actors: list[Any], q: np.ndarray, put_once: bool) -> None:
    """One remote call per shard that only reads the batch: inline, or put into the store once."""
    import ray

    arg = ray.put(q) if put_once else q
    ray.get([a.__ray_call__.remote(_shape, arg) for a in actors])


def main() -> int:
    import ray

    from poincare_index.distributed import ShardedIndex

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="hierarchy", choices=DATASETS)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--batches", type=int, nargs="+", default=[1000, 10_000])
    ap.add_argument("--efs", type=int, nargs="+", default=[10, 16, 32])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "fanout.json"))
    args = ap.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    data = load(args.data, args.n + max(args.batches), max(args.batches), seed=0)
    db, queries = data.database, data.queries
    res = Results(args.data, len(db), machine(), args.shards)
    single = pi.PoincareIndex(data.dim, M=16, ef_construction=200, num_threads=2)
    single.add(db)
    sharded = ShardedIndex(
        data.dim, shards=args.shards, kind="hnsw", M=16, ef_construction=200, threads_per_shard=1
    )
    sharded.add(db)
    actors = sharded.actors
    for batch in args.batches:
        q = np.ascontiguousarray(queries[:batch])
        inline = best_of(args.repeats, _hand_over, actors, q, False)[0]
        stored = best_of(args.repeats, _hand_over, actors, q, True)[0]
        res.handover.append({"batch": batch, "bytes": q.nbytes, "inline_ms": inline * 1e3,
                             "put_once_ms": stored * 1e3})  # fmt: skip
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
            print({key: (round(v, 2) if isinstance(v, float) else v) for key, v in row.items()}, flush=True)
    print(f"handover: {res.handover}", flush=True)
    sharded.close()
    write_results(args.out, res)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
