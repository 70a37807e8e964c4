"""Build time and recall of our HNSW on one dataset, with FAISS's lifted build in the same process:
the quick A/B for construction changes (the full comparison is bench_knn.py).

    python benchmarks/bench_build.py --dataset glove-boundary [--n N] [--threads 2] [--no-faiss]

Prints the build time (and FAISS IndexHNSWFlat's on the lifted vectors, as a ratio), then
recall@10 and 1-thread QPS at a few ef against the exact float64 truth (cached under
benchmarks/results/ by dataset and size).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params  # noqa: E402
from datasets import load  # noqa: E402
from truth import exact_knn  # noqa: E402

import poincare_index as pi  # noqa: E402

EFS = {"hierarchy": (10, 16, 32), "glove-boundary": (16, 32, 48, 64), "glove-095": (64, 128, 192)}


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "dataset": "glove-boundary",
    "n": None,  # database rows (default: the dataset's full size)
    "threads": 2,
    "no_faiss": False,
}


def run(args: Params) -> int:
    ds = load(args.dataset, args.n, 1000, seed=0)
    n = len(ds.database)
    cache = os.path.join(HERE, "results", f"truth_{args.dataset}_{n}.npz")
    if os.path.exists(cache):
        truth = np.load(cache)["ids"]
    else:
        truth = exact_knn(ds.database, ds.queries, 10, "poincare").ids
        np.savez(cache, ids=truth)
    index = pi.PoincareIndex(
        ds.database.shape[1], M=16, ef_construction=200, seed=0, num_threads=args.threads
    )
    t0 = time.perf_counter()
    index.add(ds.database)
    build = time.perf_counter() - t0
    print(
        f"{args.dataset} n={n:,}: build {build:.1f} s ({args.threads} threads, load {os.getloadavg()[0]:.2f})"
    )
    if not args.no_faiss:
        from adapters import FaissHNSWLifted

        faiss_index = FaissHNSWLifted()
        t0 = time.perf_counter()
        faiss_index.build(ds.database, args.threads)
        faiss_s = time.perf_counter() - t0
        print(f"FAISS IndexHNSWFlat lifted: {faiss_s:.1f} s -> ours / FAISS {build / faiss_s:.2f}x")
    index.num_threads = 1
    for ef in EFS[args.dataset]:
        t0 = time.perf_counter()
        _, found = index.search(ds.queries, 10, ef=ef)
        dt = time.perf_counter() - t0
        hits = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found.tolist(), truth.tolist())])
        print(f"  ef={ef:<4d} recall@10 {hits:.4f}  {len(ds.queries) / dt:,.0f} q/s (1 thread)")
    return 0
