"""Whether an HNSW graph finds what it holds, on all of a data set and on one hash half of it
(what a shard of a two-shard ShardedIndex holds), in process, no Ray.

Per data set and part: build time (2 threads), level-0 links and relocated lists
(``check_integrity``), how many stored rows a search for their own coordinates (top 10, beam
10) misses, and recall@10 / recall@1 and one-thread QPS of the held-out queries at each ef,
against the exact top-10 of a flat index over the same part. Run it on two builds to compare
them (the figures in BENCHMARKS.md, Step 9, compare the build before ``link_unfound`` with
the one after). With ``--graphs DIR`` each graph is saved there on the first run and loaded on
later ones (no build time then), so that two builds' searches are compared on the same graphs.
``--scored`` times ``search_scored`` (the fused walk, no decay) beside ``search``.

    python benchmarks/bench_findable.py [--data hierarchy glove-boundary tree-16 ...] [--n 100000]
"""

from __future__ import annotations

import functools
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, best_of, machine, recall_at_k, write_results  # noqa: E402
from datasets import TREE_N, TREES, load  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index.distributed.routing import shard_of  # noqa: E402


@dataclass
class Results:
    machine: str
    queries: int
    efs: list[int]
    rows: list[dict[str, Any]] = field(default_factory=list)


def not_found_by_themselves(index: pi.PoincareIndex, x: np.ndarray, ids: np.ndarray) -> int:
    """Stored rows that a search for their own coordinates (top 10, ef=10) does not return."""
    _, found = index.search(x, 10, ef=10)
    return int(np.sum(~np.any(found == ids[:, None], axis=1)))


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "data": ["hierarchy", "glove-boundary", *TREES],
    "n": 100_000,  # rows of hierarchy and GloVe (trees: 20,000)
    "queries": 1000,
    "efs": [10, 16, 32, 64],
    "repeats": 5,
    "out": os.path.join(HERE, "results", "findable.json"),
    "graphs": None,  # save each graph here, or load it when it is there already
    "scored": False,  # time search_scored (the fused walk) too
}


def run(args: Params) -> int:
    res = Results(machine(), args.queries, args.efs)
    for name in args.data:
        data = load(name, TREE_N if name in TREES else args.n, args.queries, seed=0)
        db, q = data.database, data.queries
        all_ids = np.arange(len(db), dtype=np.int64)
        for part in ("all", "hash half 0"):
            keep = np.ones(len(db), bool) if part == "all" else shard_of(all_ids, 2) == 0
            x, ids = db[keep], all_ids[keep]
            flat = pi.PoincareFlatIndex(data.dim, num_threads=2)
            flat.add_with_ids(x, ids)
            _, truth = flat.search(q, 10)
            tag = f"{name}_{len(db)}_{part.replace(' ', '_')}"
            saved = args.graphs and os.path.join(args.graphs, f"{tag}.pidx")
            build: float | None = None
            if saved and os.path.exists(saved):
                index = pi.PoincareIndex.load(saved)
            else:
                index = pi.PoincareIndex(data.dim, M=16, ef_construction=200, num_threads=2)
                t0 = time.perf_counter()
                index.add_with_ids(x, ids)
                build = time.perf_counter() - t0
                if saved:
                    os.makedirs(args.graphs, exist_ok=True)
                    index.save(saved)
            stats = index.check_integrity()
            row: dict[str, Any] = {
                "data": name, "part": part, "rows": len(x), "build_s": build, "links": stats["links"],
                "relocated_lists": stats["relocated_lists"],
                "not_found_by_themselves": not_found_by_themselves(index, x, ids), "curve": [],
            }  # fmt: skip
            index.num_threads = 1
            for ef in args.efs:
                _, found = index.search(q, 10, ef=ef)
                missing = [len(set(f.tolist()) & set(t.tolist())) < 10 for f, t in zip(found, truth)]
                row["curve"].append({
                    "ef": ef, "recall_at_10": recall_at_k(found, truth),
                    "recall_at_1": float(np.mean(found[:, 0] == truth[:, 0])),
                    "queries_missing_a_top10_id": int(np.sum(missing)),
                    "qps": len(q) / best_of(args.repeats, index.search, q, 10, ef)[0],
                })  # fmt: skip
                if args.scored:  # the fused walk, no decay: the same top-10 by distance
                    scored_search = functools.partial(index.search_scored, q, 10, ef=ef)
                    row["curve"][-1].update({
                        "scored_recall_at_10": recall_at_k(scored_search().ids, truth),
                        "scored_qps": len(q) / best_of(args.repeats, scored_search)[0],
                    })  # fmt: skip
            res.rows.append(row)
            curve = " ".join(
                f"ef{c['ef']}: {c['recall_at_10']:.4f}/{c['recall_at_1']:.3f} "
                f"({c['queries_missing_a_top10_id']} missing) {c['qps']:,.0f} q/s"
                + (
                    f", scored {c['scored_recall_at_10']:.4f} {c['scored_qps']:,.0f} q/s"
                    if "scored_qps" in c
                    else ""
                )
                for c in row["curve"]
            )
            built = "loaded" if build is None else f"build {build:.1f} s"
            print(f"{name} {part}: {built}, links {stats['links']:,}, relocated "
                  f"{stats['relocated_lists']}, missed by themselves {row['not_found_by_themselves']}; "
                  f"{curve}", flush=True)  # fmt: skip
    write_results(args.out, res)
    return 0
