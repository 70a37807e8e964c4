#!/usr/bin/env python
"""The fused walk on text-embedding-like data: GloVe rows at one depth.

GloVe 6B 50-d rows (a seeded sample) scaled to unit length and mapped with ``expmap0``, so every
point sits at norm tanh(1) = 0.76, as text embeddings do; times spread uniformly over
``--days``. For each ef, and each recall target of ``--targets`` (``recall=``):
``search_scored`` (no decay, and HalfLife(``--half-life-days``)) against the exact fused top-k
of the flat index, recall@k and recall@1, and the plain ``search`` against the exact plain
top-k, each with its 1-thread QPS (best of ``--repeats``). The fused walk walks what the plain
walk walks at the same ef: with no decay its recall must equal the plain search's.

    python benchmarks/bench_fused_glove.py --n 100000 --out benchmarks/results/fused_glove.json
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import datasets as ds
import numpy as np
from bench_common import Params
from bench_temporal import timed
from knn_report import write_result

import poincare_index as pi

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


@dataclass
class Row:
    mode: str  # "plain", "fused none", "fused halflife"
    ef: int | str  # a width, or "r=0.95": the recall target the index picks widths for
    recall_at_k: float
    recall_at_1: float
    qps_1thr: float


@dataclass
class Result:
    n: int
    queries: int
    k: int
    days: float
    half_life_days: float
    build_seconds: float
    rows: list[Row] = field(default_factory=list)
    command: list[str] = field(default_factory=list)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return sum(len(set(a) & set(b) - {-1}) for a, b in zip(found.tolist(), truth.tolist())) / truth.size


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 100_000,  # database rows (default: 100000)
    "queries": 500,  # held-out queries (default: 500)
    "k": 10,
    "days": 60.0,  # time span of the rows (default: 60)
    "half_life_days": 14.0,
    "efs": "10,16,32,64,128,256,512",
    "targets": "0.9,0.95,0.99",  # also searched at these recall targets (recall=)
    "repeats": 3,
    "seed": 0,
    "out": None,  # JSON path (default: benchmarks/results/fused_glove_<n>.json)
}


def _settings(args: Params) -> list[tuple[int | str, dict[str, Any]]]:
    """(label, search keyword) per fixed width, then per recall target."""
    widths = [(int(e), {"ef": int(e)}) for e in args.efs.split(",")]
    targets = [(f"r={t}", {"recall": float(t)}) for t in str(args.targets).split(",") if t]
    return widths + targets


def run(args: Params) -> int:
    settings = _settings(args)

    glove = ds._load_glove()
    rows = np.random.default_rng(args.seed).permutation(glove.shape[0])[: args.n + args.queries]
    unit = glove[rows].astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    x = pi.expmap0(unit).astype(np.float32)
    base, queries = np.ascontiguousarray(x[: args.n]), np.ascontiguousarray(x[args.n :])
    hours = np.random.default_rng(args.seed + 1).uniform(0, args.days * 24, args.n)
    t = np.datetime64(NOW.replace(tzinfo=None), "us") - (hours * 3.6e9).astype("timedelta64[us]")

    index = pi.PoincareIndex(50, ef_construction=200, seed=0)  # the default M
    t0 = time.perf_counter()
    index.add(base, t=t)
    build = time.perf_counter() - t0
    exact = pi.PoincareFlatIndex(50)
    exact.add(base, t=t)
    result = Result(args.n, args.queries, args.k, args.days, args.half_life_days, build, command=sys.argv)
    print(f"{args.n:,} GloVe rows at norm 0.76, {args.queries} queries; build {build:.1f} s", flush=True)

    index.num_threads = 1
    index.calibrate()  # what the first search at a target would do, kept out of its QPS
    _, plain_truth = exact.search(queries, args.k)
    for label, kw in settings:
        sec, (_, ids) = timed(lambda kw=kw: index.search(queries, args.k, **kw), args.repeats)
        result.rows.append(
            Row(
                "plain",
                label,
                recall(ids, plain_truth),
                float(np.mean(ids[:, 0] == plain_truth[:, 0])),
                args.queries / sec,
            )
        )
    for name, decay in (
        ("fused none", None),
        ("fused halflife", pi.HalfLife(hours=24 * args.half_life_days)),
    ):
        truth = exact.search_scored(queries, args.k, decay=decay, at_time=NOW).ids
        for label, kw in settings:
            sec, r = timed(
                lambda kw=kw, decay=decay: index.search_scored(
                    queries, args.k, decay=decay, at_time=NOW, **kw
                ),
                args.repeats,
            )
            result.rows.append(
                Row(
                    name,
                    label,
                    recall(r.ids, truth),
                    float(np.mean(r.ids[:, 0] == truth[:, 0])),
                    args.queries / sec,
                )
            )
    print(f"{'mode':16s} {'ef':>6s} {'R@' + str(args.k):>7s} {'R@1':>7s} {'QPS 1thr':>10s}")
    for row in result.rows:
        at_k, at_1 = row.recall_at_k, row.recall_at_1
        print(f"{row.mode:16s} {row.ef!s:>6} {at_k:7.3f} {at_1:7.3f} {row.qps_1thr:10,.0f}")
    out = args.out or os.path.join(os.path.dirname(__file__), "results", f"fused_glove_{args.n}.json")
    write_result(out, result)
    print(f"results: {out}")
    return 0
