"""The framework adapters' overhead: a LangChain ``similarity_search_by_vector`` on
``PoincareVectorStore`` against the same search made on the Memory underneath and on its index,
p50/p99 per query at ``--n`` documents, embedding excluded (query vectors computed first).

The embedding model is a LangChain ``Embeddings`` returning Euclidean vectors (the hashing
embedder's points taken back to the tangent space with ``logmap0``), so the store maps each
query into the ball as it would a real model's. The three calls alternate query by query, so
the machine's slow phases hit all three alike.

    python benchmarks/bench_adapters.py [--n 100000] [--queries 1000] [--k 4]
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

from bench_common import Params, machine, percentiles_ms, write_results  # noqa: E402
from text_data import memory_items  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index.embed import HashingEmbedder  # noqa: E402


@dataclass
class Results:
    n: int
    queries: int
    k: int
    machine: str
    build_s: float = 0.0
    calls: dict[str, dict[str, float]] = field(default_factory=dict)
    ratios_p50: dict[str, float] = field(default_factory=dict)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 100_000,
    "queries": 1000,
    "k": 4,
    "seed": 0,
    "out": os.path.join(HERE, "results", "adapters.json"),
}


def run(args: Params) -> int:
    from langchain_core.embeddings import Embeddings

    from poincare_index.integrations.langchain import PoincareVectorStore

    hashing = HashingEmbedder()

    class TangentHashing(Embeddings):  # a "model" with Euclidean output
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return pi.logmap0(hashing.embed(texts).astype(np.float64)).tolist()

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

    items, _ = memory_items(args.n + args.queries, seed=args.seed)
    texts, queries = items.texts[: args.n], items.texts[args.n :]
    model = TangentHashing()
    store = PoincareVectorStore(model, normalize=False, num_threads=1)
    t0 = time.perf_counter()
    for s in range(0, args.n, 5000):
        chunk = texts[s : s + 5000]
        store.add_texts(chunk, [{"source": "bench", "i": s + i} for i in range(len(chunk))])
    res = Results(args.n, args.queries, args.k, machine(), build_s=time.perf_counter() - t0)
    mem = store.memory
    assert mem is not None
    euclidean = model.embed_documents(queries)
    ball = store._embedder.to_ball(euclidean, len(queries))
    k = args.k
    calls: dict[str, Any] = {
        "langchain_similarity_search_by_vector": lambda i: store.similarity_search_by_vector(euclidean[i], k),
        "memory_search": lambda i: mem.search(None, k=k, vector=ball[i : i + 1], mode="vector", touch=False),
        "index_search": lambda i: mem.index.search(ball[i : i + 1], k),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(len(queries)):
        for name, call in calls.items():
            t = time.perf_counter()
            call(i)
            times[name].append(time.perf_counter() - t)
    res.calls = {name: percentiles_ms(v) for name, v in times.items()}
    lc = res.calls["langchain_similarity_search_by_vector"]["p50"]
    res.ratios_p50 = {
        "langchain_vs_memory": lc / res.calls["memory_search"]["p50"],
        "langchain_vs_index": lc / res.calls["index_search"]["p50"],
    }
    for name, p in res.calls.items():
        print(f"{name:40s} p50 {p['p50']:.3f} ms  p99 {p['p99']:.3f} ms")
    print(f"build {res.build_s:.1f} s; ratios p50 {res.ratios_p50}")
    write_results(args.out, res)
    store.close()
    return 0
