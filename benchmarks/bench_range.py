"""range_search: the flat index's exact range search against its own k-NN search, and the HNSW
range search's recall against the exact range result, per radius.

Radii are quantiles over the queries of the exact distance to their ``--hits``-th neighbour, so
a query returns about that many points at the median radius. The flat k-NN search at
``k=--hits`` is the time the range search is compared with (the target: within 2x). FAISS's
``IndexFlatL2.range_search`` on the same float32 vectors (Euclidean, radius set to return as
many points) is timed beside it for scale.

    python benchmarks/bench_range.py [--data hierarchy] [--n 100000] [--queries 200]
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, best_of, machine, write_results  # noqa: E402
from datasets import load  # noqa: E402

import poincare_index as pi  # noqa: E402


@dataclass
class Results:
    data: str
    n: int
    dim: int
    queries: int
    hits: int
    threads: int
    machine: str
    flat_knn_ms_per_query: float = 0.0
    flat_range: list[dict[str, Any]] = field(default_factory=list)
    hnsw_range: list[dict[str, Any]] = field(default_factory=list)
    faiss_flat_l2_range: dict[str, Any] = field(default_factory=dict)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "data": "hierarchy",
    "n": 100_000,
    "queries": 200,
    "hits": 10,  # points a median query returns
    "threads": 1,
    "repeats": 3,
    "out": os.path.join(HERE, "results", "range.json"),
}


def run(args: Params) -> int:
    data = load(args.data, args.n, args.queries, seed=0)
    db, q = data.database, data.queries
    res = Results(args.data, len(db), data.dim, len(q), args.hits, args.threads, machine())
    flat = pi.PoincareFlatIndex(data.dim, num_threads=args.threads)
    flat.add(db)
    hnsw = pi.PoincareIndex(data.dim, M=16, ef_construction=200, num_threads=args.threads)
    hnsw.add(db)
    D, _ = flat.search(q, args.hits + 1)
    kth = D[:, args.hits - 1].astype(np.float64)
    res.flat_knn_ms_per_query = best_of(args.repeats, flat.search, q, args.hits)[0] / len(q) * 1e3
    for quantile in (0.1, 0.5, 0.9):
        radius = float(np.quantile(kth, quantile))
        t, (lims, _, exact_ids) = best_of(args.repeats, flat.range_search, q, radius)
        per_query = np.diff(lims.astype(np.int64))
        res.flat_range.append({
            "radius_quantile": quantile, "radius": radius,
            "hits_mean": float(per_query.mean()), "hits_median": float(np.median(per_query)),
            "ms_per_query": t / len(q) * 1e3, "vs_flat_knn": t / len(q) * 1e3 / res.flat_knn_ms_per_query,
        })  # fmt: skip
        exact = [set(exact_ids[lims[i] : lims[i + 1]].tolist()) for i in range(len(q))]
        for ef in (16, 64, 256):
            hnsw.ef_search = ef
            t, (hl, _, hi) = best_of(args.repeats, hnsw.range_search, q, radius)
            found = sum(len(exact[i] & set(hi[hl[i] : hl[i + 1]].tolist())) for i in range(len(q)))
            total = sum(len(e) for e in exact)
            # recall@1 of the range: is each query's nearest in-range point found? (The exact
            # hits come nearest first.)
            nonempty = [i for i in range(len(q)) if lims[i + 1] > lims[i]]
            nearest_found = sum(
                int(exact_ids[lims[i]]) in set(hi[hl[i] : hl[i + 1]].tolist()) for i in nonempty
            )
            res.hnsw_range.append({
                "radius_quantile": quantile, "radius": radius, "ef_search": ef,
                "recall": found / max(total, 1), "recall_at_1": nearest_found / max(len(nonempty), 1),
                "ms_per_query": t / len(q) * 1e3,
            })  # fmt: skip
        print(
            f"radius q{quantile:.1f} = {radius:.4f}: {per_query.mean():.1f} hits/query, flat range "
            f"{res.flat_range[-1]['ms_per_query']:.3f} ms/q ({res.flat_range[-1]['vs_flat_knn']:.2f}x "
            f"flat k-NN {res.flat_knn_ms_per_query:.3f}); HNSW recall "
            + ", ".join(
                f"ef {h['ef_search']}: {h['recall']:.4f}, @1 {h['recall_at_1']:.4f} "
                f"({h['ms_per_query']:.3f} ms)"
                for h in res.hnsw_range[-3:]
            ),  # fmt: skip
            flush=True,
        )
    try:
        import faiss
    except ImportError:
        print("faiss not installed: its range search is not timed")
    else:
        faiss.omp_set_num_threads(args.threads)
        fl = faiss.IndexFlatL2(data.dim)
        fl.add(db)
        DL, _ = fl.search(q, args.hits + 1)
        radius = float(np.median((DL[:, args.hits - 1] + DL[:, args.hits]) / 2))
        t_knn, _ = best_of(args.repeats, fl.search, q, args.hits)
        t, (faiss_lims, _, _) = best_of(args.repeats, fl.range_search, q, radius)
        res.faiss_flat_l2_range = {
            "squared_radius": radius, "hits_mean": float(np.diff(faiss_lims.astype(np.int64)).mean()),
            "ms_per_query": t / len(q) * 1e3, "knn_ms_per_query": t_knn / len(q) * 1e3,
            "range_vs_knn": t / t_knn,
        }  # fmt: skip
        print(f"faiss IndexFlatL2: range {t / len(q) * 1e3:.3f} ms/q, k-NN {t_knn / len(q) * 1e3:.3f} ms/q")
    write_results(args.out, res)
    return 0
