#!/usr/bin/env python
"""The figures behind the recall target's two mechanisms (docs/recall.md):

* ``standins``: does each query kind the index calibrates on (``recall.QUERY_KINDS``) measure
  what real held-out queries reach? Per member and dimension, the table's recall@10 per kind at
  each width beside the held-out queries' own, and beside midpoints of a stored point and one of
  its ten nearest (the stand-in not kept).
* ``scan_cost``: one query's walk at a few widths against its exact scan of every point, per
  dimension and size (what ``recall.SCAN_POINTS_PER_EF`` is set from).

    python benchmarks/run.py benchmarks/configs/recall_calibration.toml
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

import families  # noqa: E402
from bench_common import Params, machine, write_results  # noqa: E402
from truth import exact_knn  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index.recall import QUERY_KINDS  # noqa: E402

K = 10


def recall_by_distance(found_d: np.ndarray, truth_d: np.ndarray) -> float:
    """Mean recall@K, a result counting when it is no farther than the exact K-th."""
    kth = truth_d[:, K - 1 : K] * (1 + 1e-5) + 1e-6
    return float(np.mean(np.minimum((found_d[:, :K] <= kth).sum(axis=1), K) / K))


def standins(name: str, n: int, dim: int, queries: int, widths: list[int], seed: int) -> dict[str, Any]:
    fam = families.make(name, n, queries, dim, seed=seed)
    index = pi.PoincareIndex(fam.dim, seed=0)
    index.add(fam.points)
    table = index.calibrate()
    if table is None:
        return {"member": name, "dim": fam.dim, "n": n, "table": None}
    held_truth = exact_knn(fam.points, fam.held_out, K, "poincare").distances()
    rng = np.random.default_rng([seed, 7])
    rows = rng.choice(n, queries, replace=False)
    neighbours = exact_knn(fam.points, fam.points[rows], 11, "poincare").ids
    partner = neighbours[np.arange(queries), 1 + rng.integers(0, 10, queries)]
    mid = (0.5 * (fam.points[rows].astype(np.float64) + fam.points[partner])).astype(np.float32)
    mid_truth = exact_knn(fam.points, mid, K, "poincare").distances()
    j = table.ks.index(K)
    out: dict[str, Any] = {"member": name, "dim": fam.dim, "n": n, "widths": widths, "rows": {}}
    for kind_i, kind in enumerate(QUERY_KINDS):
        out["rows"][kind] = [float(table.recall[kind_i, j, table.efs.index(w)]) for w in widths]
    out["rows"]["midpoint"] = [recall_by_distance(index.search(mid, K, w)[0], mid_truth) for w in widths]
    out["rows"]["held-out"] = [
        recall_by_distance(index.search(fam.held_out, K, w)[0], held_truth) for w in widths
    ]
    return out


def scan_cost(dim: int, n: int, queries: int, widths: list[int], seed: int) -> dict[str, Any]:
    fam = families.make("uniform_radius", n, queries, dim, seed=seed)
    index = pi.PoincareIndex(dim, seed=0, num_threads=1)
    index.add(fam.points)
    walk = {}
    for w in widths:
        t0 = time.perf_counter()
        for i in range(queries):
            index.search(fam.held_out[i : i + 1], K, w)
        walk[w] = (time.perf_counter() - t0) / queries * 1e6
    t0 = time.perf_counter()
    for i in range(queries):
        index._exact_search(fam.held_out[i : i + 1], K)
    scan = (time.perf_counter() - t0) / queries * 1e6
    return {
        "dim": dim, "n": n, "walk_us": walk, "scan_us": scan,
        # A walk of width w costs what scanning this many points per unit of width does.
        "points_per_width": {w: walk[w] / scan * n / w for w in widths},
    }  # fmt: skip


DEFAULTS: dict[str, Any] = {
    "families": ["gauss-s0.15", "clusters", "uniform_radius", "loguniform_depth", "hierarchy"],
    "dims": [32, 128],
    "n": 6000,
    "queries": 200,
    "widths": [10, 16, 24, 32, 48, 64, 100, 128, 200],
    "cost_dims": [16, 64, 256],
    "cost_sizes": [2000, 20000, 100000],
    "cost_widths": [16, 64, 256],
    "seed": 1,
    "out": os.path.join(HERE, "results", "recall_calibration.json"),
}


@dataclass
class Results:
    machine: str
    command: list[str]
    settings: dict[str, Any]
    standins: list[dict[str, Any]] = field(default_factory=list)
    scan_cost: list[dict[str, Any]] = field(default_factory=list)


def run(args: Params) -> int:
    res = Results(machine(), [sys.executable, *sys.argv], {k: v for k, v in vars(args).items() if k != "out"})
    for name, dim in families.jobs(args.families, args.dims):
        row = standins(name, args.n, dim, args.queries, args.widths, args.seed)
        res.standins.append(row)
        print(f"{name} {row['dim']}-d, recall@10 by width {args.widths}")
        for kind, values in (row.get("rows") or {}).items():
            print(f"  {kind:<9} " + " ".join(f"{v:.3f}" for v in values), flush=True)
    for dim in args.cost_dims:
        for n in args.cost_sizes:
            row = scan_cost(dim, n, min(args.queries, n), args.cost_widths, args.seed)
            res.scan_cost.append(row)
            walk = " / ".join(f"{row['walk_us'][w]:.0f}" for w in args.cost_widths)
            per = ", ".join(f"{row['points_per_width'][w]:.0f}" for w in args.cost_widths)
            print(f"{dim}-d {n:>7,} points: walk {walk} us, scan {row['scan_us']:.0f} us; "
                  f"a walk costs a scan of {per} points per unit of width", flush=True)  # fmt: skip
    write_results(args.out, res)
    print(f"wrote {args.out}")
    return 0
