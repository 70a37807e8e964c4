"""A chat loop on a Memory of 100,000 memories: every turn adds one memory, then searches.

For each mode (vector, keyword, hybrid) the loop runs ``--turns`` turns of ``add`` then
``search`` (k=10, default touch, HalfLife(30 days), the default hashing embedder); the same
searches are also timed with no write before them. Query and memory vectors are embedded before
the clock starts (``vector=``), so the figures exclude embedding; the embedding's own cost is
reported beside them. The keyword index's full rebuild, which every write cost before the
incremental index, is timed once for comparison. The modes run one after the other on the same
store, so the later loops also see background merges of the keyword delta.

    python benchmarks/bench_chat_loop.py [--n 100000] [--turns 1000] [--out results/chat_loop.json]
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, machine, percentiles_ms, write_results  # noqa: E402
from text_data import memory_items  # noqa: E402

from poincare_index.memory.keyword import KeywordIndex  # noqa: E402
from poincare_memory import HalfLife, Memory  # noqa: E402

MODES = ("vector", "keyword", "hybrid")


@dataclass
class Results:
    n: int
    turns: int
    data: str
    machine: str
    embed_ms_per_text: float = 0.0
    keyword_full_rebuild_ms: float = 0.0
    modes: dict[str, dict[str, Any]] = field(default_factory=dict)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 100_000,
    "turns": 1000,
    "seed": 0,
    "path": None,  # a directory for a persistent store (default: in memory)
    "out": os.path.join(HERE, "results", "chat_loop.json"),
}


def run(args: Params) -> int:
    n_turn_texts = args.turns * len(MODES)
    items, desc = memory_items(args.n + n_turn_texts + args.turns, seed=args.seed)
    texts, times = items.texts[: args.n], items.t[: args.n]
    turn_texts = items.texts[args.n : args.n + n_turn_texts]
    queries = items.texts[args.n + n_turn_texts :]
    res = Results(args.n, args.turns, desc, machine())
    mem = Memory(decay=HalfLife(hours=24 * 30), path=args.path, num_threads=1)
    t0 = time.perf_counter()
    vecs = mem.embedder.embed(texts)
    res.embed_ms_per_text = (time.perf_counter() - t0) / len(texts) * 1e3
    for s in range(0, len(texts), 5000):
        mem.add_many(texts[s : s + 5000], [f"m{i}" for i in range(s, min(s + 5000, len(texts)))],
                     t=times[s : s + 5000], vectors=vecs[s : s + 5000])  # fmt: skip
    now = max(times)
    turn_vecs = mem.embedder.embed(turn_texts)
    query_vecs = mem.embedder.embed(queries)
    t0 = time.perf_counter()
    mem.search(queries[0], vector=query_vecs[0], mode="keyword", touch=False, at_time=now)  # builds it
    print(f"keyword index built in {time.perf_counter() - t0:.2f} s", flush=True)
    kw = KeywordIndex(background=False)
    live = list(range(len(texts)))
    t0 = time.perf_counter()
    kw.build(live, texts)
    res.keyword_full_rebuild_ms = (time.perf_counter() - t0) * 1e3
    turn = 0
    for mode in MODES:
        quiet, loop_add, loop_search = [], [], []
        for q, qv in zip(queries, query_vecs):
            t0 = time.perf_counter()
            mem.search(None if mode == "vector" else q, k=10, vector=qv, mode=mode, at_time=now)
            quiet.append(time.perf_counter() - t0)
        merges_before = mem._rows.keyword._generation, mem._rows.keyword.pending()
        for q, qv in zip(queries, query_vecs):
            now = now + timedelta(seconds=30)
            t0 = time.perf_counter()
            mem.add(turn_texts[turn], id=f"turn{turn}", t=now, vector=turn_vecs[turn])
            t1 = time.perf_counter()
            mem.search(None if mode == "vector" else q, k=10, vector=qv, mode=mode, at_time=now)
            t2 = time.perf_counter()
            loop_add.append(t1 - t0)
            loop_search.append(t2 - t1)
            turn += 1
        res.modes[mode] = {
            "search_no_write_ms": percentiles_ms(quiet),
            "loop_search_ms": percentiles_ms(loop_search),
            "loop_add_ms": percentiles_ms(loop_add),
            "loop_turn_ms": percentiles_ms([a + b for a, b in zip(loop_add, loop_search)]),
            "loop_vs_no_write_p50": float(np.median(loop_search) / np.median(quiet)),
            "keyword_delta_rows_before_after": [merges_before[1], mem._rows.keyword.pending()],
        }
        m = res.modes[mode]
        print(
            f"{mode:8s} search p50/p99 {m['loop_search_ms']['p50']:.2f}/{m['loop_search_ms']['p99']:.2f} ms "
            f"after a write, {m['search_no_write_ms']['p50']:.2f}/{m['search_no_write_ms']['p99']:.2f} "
            f"without (x{m['loop_vs_no_write_p50']:.2f}); add p50/p99 "
            f"{m['loop_add_ms']['p50']:.2f}/{m['loop_add_ms']['p99']:.2f} ms; keyword delta "
            f"{m['keyword_delta_rows_before_after']}",
            flush=True,
        )
    print(
        f"embedding {res.embed_ms_per_text:.3f} ms per text; a full keyword rebuild "
        f"{res.keyword_full_rebuild_ms:.0f} ms",
        flush=True,
    )
    mem.close()
    write_results(args.out, res)
    return 0
