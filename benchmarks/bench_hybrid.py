"""Which fusion makes hybrid search at least as good as its parts? Measured on labelled real text.

The set: Debian changelog items (``text_data.debian_changelog_items``) of the packages with at
least 20 items; a seeded corpus of ``--n`` items and held-out items as queries; an item is
relevant to a query when it comes from the query's package. recall@10 = relevant items in the
top 10 / min(10, relevant items in the corpus). The queries are split in two halves: the fusion's
parameter is chosen on the first (dev) half, and every figure is reported on the second (test)
half, so the choice is not fitted to the figures it is judged by.

For each embedder (the default hashing embedder; MiniLM with ``--minilm``, the [minilm] extra)
it records, per query, the vector side's ``--candidates`` best (the index's fused score) and the
keyword side's BM25 matches, then scores each fusion rule on the same lists:

* ``rrf(k)``: reciprocal rank fusion, sum of 1 / (k + rank);
* ``wrrf(w)``: RRF with the keyword list weighted w and the vector list 1 - w;
* ``minmax(a)``: a * BM25 / max BM25 + (1 - a) * (s - min s) / (max s - min s) of the vector
  score s over the candidates (relative score fusion); absent from a side: 0 for that side;
* ``union(a)``: the same over the union of both lists, every candidate scored on both sides
  (its BM25, 0 when no query word matches it; its exact vector relevance when it is past the
  vector side's cut), min-max and max taken over the union: what ``Memory`` does.

The library's own three modes (``Memory.search(mode=...)``) are measured on the test half too.

    python benchmarks/bench_hybrid.py [--n 20000] [--queries 500] [--minilm] [--out ...]
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params, write_results  # noqa: E402
from text_data import labelled_changelog_split  # noqa: E402

from poincare_memory import Memory  # noqa: E402

K = 10


@dataclass
class Results:
    corpus: int
    queries_dev: int
    queries_test: int
    candidates: int
    # embedder -> split -> rule -> mean recall@10
    recall_at_10: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    chosen: dict[str, Any] = field(default_factory=dict)


def labelled_set(n: int, n_queries: int, seed: int) -> tuple[list[str], list[str], list[str], list[str]]:
    items, corpus_idx, q_idx = labelled_changelog_split(n, n_queries, seed)
    if not corpus_idx.size:
        raise SystemExit("no Debian changelogs under /usr/share/doc: this benchmark needs them")
    return (
        [items.texts[i] for i in corpus_idx],
        [items.labels[i] for i in corpus_idx],
        [items.texts[i] for i in q_idx],
        [items.labels[i] for i in q_idx],
    )


@dataclass
class Lists:
    """One query's candidates: each side's list (rows, score) and their union scored on both."""

    vec_rows: np.ndarray
    vec_scores: np.ndarray
    kw_rows: np.ndarray
    kw_scores: np.ndarray
    union_rows: np.ndarray
    union_vector: np.ndarray  # vector relevance (-distance + depth_bias * depth) of union_rows
    union_bm25: np.ndarray


def rrf(k: float, w_kw: float = 0.5) -> Callable[[Lists], np.ndarray]:
    def fuse(c: Lists) -> np.ndarray:
        vec_rows, kw_rows = c.vec_rows, c.kw_rows
        out: dict[int, float] = {}
        for rank, r in enumerate(vec_rows.tolist(), 1):
            out[r] = out.get(r, 0.0) + 2 * (1 - w_kw) / (k + rank)
        for rank, r in enumerate(kw_rows.tolist(), 1):
            out[r] = out.get(r, 0.0) + 2 * w_kw / (k + rank)
        return _top(out)

    return fuse


def minmax(a: float) -> Callable[[Lists], np.ndarray]:
    def fuse(c: Lists) -> np.ndarray:
        vec_rows, vec_scores, kw_rows, kw_scores = c.vec_rows, c.vec_scores, c.kw_rows, c.kw_scores
        out: dict[int, float] = {}
        if vec_rows.size:
            lo, hi = float(vec_scores.min()), float(vec_scores.max())
            span = hi - lo if hi > lo else 1.0
            for r, s in zip(vec_rows.tolist(), ((vec_scores - lo) / span).tolist()):
                out[r] = (1 - a) * s
        if kw_rows.size:
            top = float(kw_scores.max())
            for r, s in zip(kw_rows.tolist(), (kw_scores / top).tolist()):
                out[r] = out.get(r, 0.0) + a * s
        return _top(out)

    return fuse


def union(a: float) -> Callable[[Lists], np.ndarray]:
    def fuse(c: Lists) -> np.ndarray:
        lo, hi = float(c.union_vector.min()), float(c.union_vector.max())
        vec = (c.union_vector - lo) / (hi - lo) if hi > lo else np.ones_like(c.union_vector)
        best = float(c.union_bm25.max())
        kw = c.union_bm25 / best if best > 0 else c.union_bm25
        fused = a * kw + (1 - a) * vec
        return c.union_rows[np.argsort(-fused, kind="stable")[:K]]

    return fuse


def _top(fused: dict[int, float]) -> np.ndarray:
    rows = np.fromiter(fused.keys(), np.int64, len(fused))
    scores = np.fromiter(fused.values(), np.float64, len(fused))
    return rows[np.argsort(-scores, kind="stable")[:K]]


def recall(found: np.ndarray, label: str, labels: list[str], n_relevant: int) -> float:
    return sum(labels[r] == label for r in found.tolist()) / min(K, n_relevant)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 20_000,
    "queries": 500,
    "candidates": 50,  # each side's depth (Memory's default)
    "seed": 0,
    "minilm": False,
    "out": os.path.join(HERE, "results", "hybrid_fusion.json"),
}


def run(args: Params) -> int:
    texts, labels, queries, q_labels = labelled_set(args.n, args.queries, args.seed)
    half = len(queries) // 2
    splits = {"dev": range(half), "test": range(half, len(queries))}
    n_relevant = Counter(labels)
    res = Results(len(texts), half, len(queries) - half, args.candidates)
    rules: dict[str, Callable[..., np.ndarray]] = {"rrf(60)": rrf(60)}
    for w in (0.3, 0.5, 0.6, 0.7, 0.8, 0.9):
        rules[f"wrrf({w})"] = rrf(60, w)
    for a in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        rules[f"minmax({a})"] = minmax(a)
    for a in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
        rules[f"union({a})"] = union(a)
    embedders: list[tuple[str, Any]] = [("hashing (default)", None)]
    if args.minilm:
        from poincare_index.embed import MiniLMEmbedder

        embedders.append(("all-MiniLM-L6-v2", MiniLMEmbedder()))
    for name, embedder in embedders:
        mem = Memory(decay=None, embedder=embedder)
        t0 = time.perf_counter()
        mem.add_many(texts, ids=[str(i) for i in range(len(texts))])
        print(
            f"{name}: {len(texts):,} items embedded and added in {time.perf_counter() - t0:.1f} s", flush=True
        )
        qvecs = mem.embedder.embed(queries)
        per_rule: dict[str, list[float]] = {r: [] for r in ["vector", "keyword", *rules]}
        library: dict[str, list[float]] = {m: [] for m in ("vector", "keyword", "hybrid")}
        for i, (q, lab) in enumerate(zip(queries, q_labels)):
            r = mem.index.search_scored(qvecs[i : i + 1], args.candidates, touch=False)
            keep = r.ids[0] >= 0
            vec_rows, vec_scores = r.ids[0][keep], r.scores[0][keep].astype(np.float64)
            matches, match_bm25 = mem._rows.keyword_matches(q, mem._journal.log_lock)
            bm25 = np.zeros(len(texts))
            bm25[matches] = match_bm25
            kw_rows = matches[np.argsort(-bm25[matches], kind="stable")][: args.candidates]
            kw_scores = bm25[kw_rows]
            union_rows = np.union1d(vec_rows, kw_rows)
            dist, depth = mem._rows.exact_terms(union_rows.tolist(), qvecs[i])
            c = Lists(
                vec_rows, vec_scores, kw_rows, kw_scores,
                union_rows, mem._rows.config.depth_bias * depth - dist, bm25[union_rows],
            )  # fmt: skip
            per_rule["vector"].append(recall(vec_rows[:K], lab, labels, n_relevant[lab]))
            per_rule["keyword"].append(recall(kw_rows[:K], lab, labels, n_relevant[lab]))
            for rule, fuse in rules.items():
                found = fuse(c)
                per_rule[rule].append(recall(found, lab, labels, n_relevant[lab]))
            if i >= half:
                for mode in library:
                    if mode == "vector":
                        out = mem.search(vector=qvecs[i], k=K, touch=False)
                    else:
                        out = mem.search(q, k=K, mode=mode, touch=False)
                    found = np.array([int(x.id) for x in out], dtype=np.int64)
                    library[mode].append(recall(found, lab, labels, n_relevant[lab]))
        res.recall_at_10[name] = {
            split: {rule: float(np.mean([v[j] for j in idx])) for rule, v in per_rule.items()}
            for split, idx in splits.items()
        }
        res.recall_at_10[name]["test, Memory.search"] = {m: float(np.mean(v)) for m, v in library.items()}
        for split in ("dev", "test"):
            row = res.recall_at_10[name][split]
            print(f"  {split}: " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()), flush=True)
        lib = res.recall_at_10[name]["test, Memory.search"]
        print("  test, Memory.search: " + "  ".join(f"{k} {v:.3f}" for k, v in lib.items()), flush=True)

    # The rule chosen on dev: the best worst-case margin over max(keyword, vector), all embedders;
    # and per embedder, the union weight with the best dev margin (what Memory uses per embedder).
    def margin(e: str, split: str, rule: str) -> float:
        row = res.recall_at_10[e][split]
        return row[rule] - max(row["vector"], row["keyword"])

    margins = {rule: min(margin(e, "dev", rule) for e in res.recall_at_10) for rule in rules}
    best = max(margins, key=margins.get)  # type: ignore[arg-type]
    per_embedder = {}
    for e in res.recall_at_10:
        mm = [r for r in rules if r.startswith("union")]
        pick = max(mm, key=lambda r: margin(e, "dev", r))
        per_embedder[e] = {
            "rule": pick,
            "dev_margin": margin(e, "dev", pick),
            "test_margin": margin(e, "test", pick),
        }
    res.chosen = {"one_rule": best, "dev_worst_margin": margins[best], "per_embedder": per_embedder}
    print(f"one rule for all, chosen on dev: {best} (worst margin over the better part {margins[best]:+.3f})")
    for e, c in per_embedder.items():
        dev_m, test_m = c["dev_margin"], c["test_margin"]
        print(f"  {e}: {c['rule']} chosen on dev (margin {dev_m:+.3f}); on test {test_m:+.3f}")
    write_results(args.out, res)
    return 0
