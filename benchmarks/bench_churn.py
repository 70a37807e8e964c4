#!/usr/bin/env python
"""Churn: remove and re-add the same points many times; the untouched points must stay as
findable as in a fresh build, and the index must not grow.

``--n`` points (boundary-heavy GloVe rows by default, as in bench_knn's ``glove-boundary``; or
``--data one-depth``), of which the last ``--churn`` are removed and added back with the same
ids in each cycle. Every ``--every`` cycles: self-recall@1 of the untouched points (each
searched by its own vector) at ef 16 and 64, slots, RSS. At the end the same for a fresh build of
the same points, and hnswlib (L2, ``mark_deleted`` + ``replace_deleted``) through the same
cycles as the reference.

    python benchmarks/bench_churn.py --cycles 10000 --out benchmarks/results/churn.json
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import datasets as ds
import numpy as np
from bench_common import Params
from knn_report import write_result

import poincare_index as pi
from poincare_index.datasets import one_depth


@dataclass
class Checkpoint:
    cycle: int
    self_recall_ef16: float
    self_recall_ef64: float
    slots: int
    rss_bytes: int
    seconds: float


@dataclass
class Result:
    data: str
    n: int
    churn: int
    cycles: int
    ours: list[Checkpoint] = field(default_factory=list)
    fresh_self_recall_ef16: float = 0.0
    fresh_self_recall_ef64: float = 0.0
    hnswlib_start: dict[str, float] = field(default_factory=dict)
    hnswlib_end: dict[str, float] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def self_recall(search, x: np.ndarray, rows: np.ndarray, ef: int) -> float:
    return float(np.mean(search(x[rows], ef) == rows))


# Data of this suite's own (not in registry.py's dataset registry).
OWN_DATA = ("one-depth",)

# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "data": "glove-boundary",
    "n": 1100,
    "churn": 100,
    "cycles": 10_000,
    "every": 1000,
    "out": None,
}


def run(args: Params) -> int:
    if args.data == "glove-boundary":
        x = ds.load("glove-boundary", args.n + 1, 1).database
    else:
        x = one_depth(args.n, 32, seed=3)
    n, dim = x.shape
    churn = np.arange(n - args.churn, n)
    untouched = np.arange(n - args.churn)
    result = Result(args.data, n, args.churn, args.cycles, command=sys.argv)

    index = pi.PoincareIndex(dim, M=16, ef_construction=200, seed=0, num_threads=1)
    index.add(x)

    def ours(q: np.ndarray, ef: int) -> np.ndarray:
        return index.search(q, 1, ef=ef)[1][:, 0]

    t0 = time.perf_counter()

    def checkpoint(cycle: int) -> None:
        cp = Checkpoint(
            cycle, self_recall(ours, x, untouched, 16), self_recall(ours, x, untouched, 64),
            index._core.slots, rss_bytes(), time.perf_counter() - t0,
        )  # fmt: skip
        result.ours.append(cp)
        print(f"cycle {cycle:6d}: self@1 ef16 {cp.self_recall_ef16:.3f} ef64 {cp.self_recall_ef64:.3f} "
              f"slots {cp.slots} RSS {cp.rss_bytes / 2**20:.1f} MiB", flush=True)  # fmt: skip

    checkpoint(0)
    for c in range(1, args.cycles + 1):
        index.remove_ids(churn)
        index.add_with_ids(x[churn], churn)
        if c % args.every == 0 or c == args.cycles:
            checkpoint(c)
    assert index.check_integrity()["unreachable"] == 0
    fresh = pi.PoincareIndex(dim, M=16, ef_construction=200, seed=0, num_threads=1)
    fresh.add(x)
    result.fresh_self_recall_ef16 = self_recall(
        lambda q, ef: fresh.search(q, 1, ef=ef)[1][:, 0], x, untouched, 16
    )
    result.fresh_self_recall_ef64 = self_recall(
        lambda q, ef: fresh.search(q, 1, ef=ef)[1][:, 0], x, untouched, 64
    )
    print(
        f"fresh build: self@1 ef16 {result.fresh_self_recall_ef16:.3f} "
        f"ef64 {result.fresh_self_recall_ef64:.3f}"
    )

    try:
        import hnswlib
    except ImportError:
        print("hnswlib not installed (pip install '.[bench]'): no reference run")
    else:
        h = hnswlib.Index("l2", dim)
        h.init_index(max_elements=n, ef_construction=200, M=16, allow_replace_deleted=True)
        h.set_num_threads(1)
        h.add_items(x, np.arange(n))

        def theirs(q: np.ndarray, ef: int) -> np.ndarray:
            h.set_ef(ef)
            return h.knn_query(q, 1)[0][:, 0].astype(np.int64)

        result.hnswlib_start = {f"ef{e}": self_recall(theirs, x, untouched, e) for e in (16, 64)}
        labels = churn
        for c in range(1, args.cycles + 1):  # hnswlib reuses a deleted slot for a new label
            for i in labels:
                h.mark_deleted(int(i))
            labels = n + c * args.churn + np.arange(args.churn)
            h.add_items(x[churn], labels, replace_deleted=True)
        result.hnswlib_end = {f"ef{e}": self_recall(theirs, x, untouched, e) for e in (16, 64)}
        print(f"hnswlib L2: start {result.hnswlib_start}, after {args.cycles} cycles {result.hnswlib_end}")
    out = args.out or os.path.join(os.path.dirname(__file__), "results", f"churn_{args.data}.json")
    write_result(out, result)
    print(f"results: {out}")
    return 0
