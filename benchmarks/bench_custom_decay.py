"""CustomDecay (a numba cfunc the core calls per candidate) against the built-in HalfLife at the
same parameters, in search_scored: QPS and whether the results are the same.

The custom policy is the half-life formula written by hand, ``2 ** (-age_hours / hours)``;
``--bound`` says how it declares its bound (``age`` by default: the fused search's time buckets
are then bounded as HalfLife's are). Data: the generated hierarchy (default 100,000 points,
64-d) stamped uniformly over one year; queries held out; one search thread.

    python benchmarks/bench_custom_decay.py [--n 100000] [--queries 1000] [--hours 168]
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, best_of, machine, write_results  # noqa: E402
from datasets import load  # noqa: E402

import poincare_index as pi  # noqa: E402

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass
class Results:
    data: str
    n: int
    queries: int
    machine: str
    params: dict[str, Any] = field(default_factory=dict)
    runs: list[dict[str, Any]] = field(default_factory=list)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 100_000,
    "queries": 1000,
    "hours": 168.0,
    "time_coef": [1.0, 0.3],
    "bound": "age",
    "ef": 64,
    "repeats": 3,
    "out": os.path.join(HERE, "results", "custom_decay.json"),
}


def run(args: Params) -> int:

    data = load("hierarchy", args.n, args.queries)
    x, q = data.database, data.queries
    rng = np.random.default_rng(0)
    year_us = 365 * 86_400_000_000
    t = np.datetime64(NOW.replace(tzinfo=None), "us") - rng.integers(0, year_us, len(x)).astype(
        "timedelta64[us]"
    )
    hours = args.hours

    def half_life(age_hours: float, access_count: float) -> float:
        return 2.0 ** (-age_hours / hours)

    builtin = pi.HalfLife(hours=hours)
    custom = pi.CustomDecay(half_life, bound=args.bound)
    res = Results(data="hierarchy", n=len(x), queries=len(q), machine=machine(), params=vars(args).copy())
    for kind in ("flat", "hnsw"):
        index = pi.PoincareFlatIndex(x.shape[1]) if kind == "flat" else pi.PoincareIndex(x.shape[1], M=16)
        index.add(x, t=t)
        index.num_threads = 1  # searches on one thread: the cost per candidate is what differs
        for coef in args.time_coef:
            run: dict[str, Any] = {"kind": kind, "time_coef": coef}
            out = {}
            for name, policy in (("HalfLife", builtin), ("CustomDecay", custom)):

                def search(policy: Any, index: Any = index, coef: float = coef) -> Any:
                    return index.search_scored(q, 10, decay=policy, at_time=NOW, time_coef=coef, ef=args.ef)

                seconds, found = best_of(args.repeats, search, policy)
                out[name] = found
                run[f"qps_{name}"] = len(q) / seconds
            run["qps_ratio"] = run["qps_CustomDecay"] / run["qps_HalfLife"]
            run["ids_equal"] = bool(np.array_equal(out["HalfLife"].ids, out["CustomDecay"].ids))
            run["max_score_diff"] = float(np.max(np.abs(out["HalfLife"].scores - out["CustomDecay"].scores)))
            res.runs.append(run)
            print(run, flush=True)
    write_results(args.out, res)
    return 0
