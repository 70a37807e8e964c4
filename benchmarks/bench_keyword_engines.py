"""Which keyword engine for a chat loop? tantivy (its Python bindings) against our bm25s segments.

Both index the same ``--n`` texts (Debian changelog items topped up with generated notes) and
run the same ``--turns`` turns of: add one text, then query. A Memory's keyword and hybrid modes
need the BM25 score of every matching memory (the time term is applied to each before the cut),
so besides a top-10 query each turn also fetches all matches with their row ids. Timed per turn:
the add (for tantivy: add_document + commit + reload, which a search after the write needs to
see it), the top-10 query and the all-matches query. tantivy is optional (``pip install
tantivy``); without it only ours is measured.

    python benchmarks/bench_keyword_engines.py [--n 100000] [--turns 300] [--out ...]
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

from bench_common import Params, percentiles_ms, write_results  # noqa: E402
from text_data import memory_items  # noqa: E402

from poincare_index.memory.keyword import KeywordIndex, analyze  # noqa: E402


@dataclass
class Results:
    n: int
    turns: int
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)


class Ours:
    def __init__(self, texts: list[str]) -> None:
        self.kw = KeywordIndex(background=False)
        self.kw.build(range(len(texts)), texts)
        self.n = len(texts)

    def add(self, text: str) -> None:
        self.kw.add([self.n], [text])
        self.n += 1

    def top(self, query: str, k: int) -> list[int]:
        s = self.kw.scores(query, self.n)
        top = np.argpartition(-s, k)[:k]
        return top[np.argsort(-s[top])].tolist()

    def all_matches(self, query: str) -> int:
        s = self.kw.scores(query, self.n)
        return int(np.count_nonzero(s > 0))


class Tantivy:
    def __init__(self, texts: list[str]) -> None:
        import tantivy

        self.t = tantivy
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field("row", stored=False, indexed=True, fast=True)
        sb.add_text_field("body", stored=False, tokenizer_name="whitespace", index_option="freq")
        self.schema = sb.build()
        self.index = tantivy.Index(self.schema)
        self.writer = self.index.writer(heap_size=100_000_000, num_threads=1)
        for i, text in enumerate(texts):  # the same terms as ours (CJK bigrams, stop words)
            self._add(i, text)
        self.writer.commit()
        self.index.reload()
        self.n = len(texts)

    def _add(self, row: int, text: str) -> None:
        doc = self.t.Document()
        doc.add_integer("row", row)
        doc.add_text("body", " ".join(analyze(text)))
        self.writer.add_document(doc)

    def add(self, text: str) -> None:
        self._add(self.n, text)
        self.n += 1
        self.writer.commit()
        self.index.reload()

    def _query(self, query: str) -> Any:
        terms = list(dict.fromkeys(analyze(query)))
        q = self.t.Query
        return q.boolean_query(
            [(self.t.Occur.Should, q.term_query(self.schema, "body", w, index_option="freq")) for w in terms]
        )

    def top(self, query: str, k: int) -> list[int]:
        searcher = self.index.searcher()
        hits = searcher.search(self._query(query), k, count=False).hits
        return searcher.fast_field_values("row", [a for _, a in hits])

    def all_matches(self, query: str) -> int:
        searcher = self.index.searcher()
        hits = searcher.search(self._query(query), self.n, count=False).hits
        rows = searcher.fast_field_values("row", [a for _, a in hits])
        return len(rows)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 100_000,
    "turns": 300,
    "seed": 0,
    "out": os.path.join(HERE, "results", "keyword_engines.json"),
}


def run(args: Params) -> int:
    items, _ = memory_items(args.n + 2 * args.turns, seed=args.seed)
    texts = items.texts[: args.n]
    new = items.texts[args.n : args.n + args.turns]
    queries = items.texts[args.n + args.turns :]
    res = Results(args.n, args.turns)
    engines: list[tuple[str, Any]] = [("bm25s main + delta (ours)", Ours)]
    try:
        import tantivy  # noqa: F401

        engines.append(("tantivy (commit per add)", Tantivy))
    except ImportError:
        print("tantivy not installed: measuring ours only")
    for name, cls in engines:
        t0 = time.perf_counter()
        engine = cls(texts)
        build_s = time.perf_counter() - t0
        adds, tops, alls, matches = [], [], [], []
        for text, q in zip(new, queries):
            t0 = time.perf_counter()
            engine.add(text)
            t1 = time.perf_counter()
            engine.top(q, 10)
            t2 = time.perf_counter()
            matches.append(engine.all_matches(q))
            t3 = time.perf_counter()
            adds.append(t1 - t0)
            tops.append(t2 - t1)
            alls.append(t3 - t2)
        res.engines[name] = {
            "build_s": build_s,
            "add_visible": percentiles_ms(adds),
            "top10": percentiles_ms(tops),
            "all_matches": percentiles_ms(alls),
            "mean_matches": float(np.mean(matches)),
        }
        e = res.engines[name]
        print(
            f"{name}: build {build_s:.1f} s; add until searchable p50 {e['add_visible']['p50']:.2f} ms; "
            f"top-10 p50 {e['top10']['p50']:.2f} ms; all {e['mean_matches']:,.0f} matches with rows "
            f"p50 {e['all_matches']['p50']:.2f} ms",
            flush=True,
        )
    write_results(args.out, res)
    return 0
