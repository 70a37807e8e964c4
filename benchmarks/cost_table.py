"""The second seed's "window size vs cost" table, computed from ``Memory.stats()``.

A support agent's year of memories (``--n`` generated notes, the default embedder, HalfLife(7
days)); for each window the same ``--queries`` retrievals (top ``--k``) are made and the table
takes its figures from the store's own counters: ``stats()`` before and after each window's
retrievals gives the retrievals made and the tokens they returned (the default approximate
token counter). Cost per month = tokens per retrieval x retrievals per agent per month x agents
x price per token (the seed's figures imply $5 per million tokens and 100 retrievals per agent
per month; both are arguments).

    python benchmarks/cost_table.py [--n 36000] [--k 5] [--price-per-million 5] [--out ...]
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params  # noqa: E402
from text_data import generated_items  # noqa: E402

from poincare_memory import HalfLife, Memory  # noqa: E402

WINDOWS: list[tuple[str, timedelta | None, int | None]] = [
    ("no window", None, None),
    ("30 days", timedelta(days=30), None),
    ("7 days", timedelta(days=7), None),
    ("24 hours", timedelta(hours=24), None),
    ("1 hour", timedelta(hours=1), None),
    ("no window, max_tokens=60", None, 60),
]


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 36_000,
    "queries": 200,
    "k": 5,
    "agents": 100,
    "retrievals_per_month": 100,
    "price_per_million": 5.0,
    "seed": 0,
    "out": os.path.join(HERE, "results", "cost_table.json"),
}


def run(args: Params) -> int:
    items = generated_items(args.n + args.queries, args.seed, None)
    mem = Memory(decay=HalfLife(hours=24 * 7))
    mem.add_many(items.texts[: args.n], [f"m{i}" for i in range(args.n)], t=items.t[: args.n])
    now = max(items.t[: args.n])
    t_us = np.array([t.timestamp() for t in items.t[: args.n]])
    queries = items.texts[args.n :]
    rows = []
    for name, window, budget in WINDOWS:
        before = mem.stats()
        for q in queries:
            mem.search(q, k=args.k, at_time=now, window=window, max_tokens=budget, touch=False)
        after = mem.stats()
        retrievals = after.retrievals - before.retrievals
        tokens = (after.tokens_retrieved - before.tokens_retrieved) / retrievals
        kept = (
            args.n
            if window is None
            else int(np.count_nonzero(t_us >= now.timestamp() - window.total_seconds()))
        )
        month = tokens * args.retrievals_per_month * args.agents * args.price_per_million / 1e6
        rows.append(
            {"window": name, "memories_kept": kept, "tokens_per_retrieval": tokens, "cost_per_month": month}
        )
    print(f"| window | memories kept | tokens / retrieval | cost / month ({args.agents} agents) |")
    print("|---|---|---|---|")
    for r in rows:
        kept, tokens, cost = r["memories_kept"], r["tokens_per_retrieval"], r["cost_per_month"]
        print(f"| {r['window']} | {kept:,} | {tokens:.0f} | ${cost:.2f} |")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"args": vars(args), "rows": rows}, f, indent=2)
    return 0
