"""Memory at 100,000 memories: add throughput, search latency, the hand-built alternative, the
seed's cost table redone, and retrieval quality of the embedders on labelled real text.

Parts (``--parts``, all by default):

* ``latency``: Memory with the default (hashing) embedder, HalfLife(30 days), in memory; add
  throughput (with and without embedding) and search p50/p99 at k=10, touch=False, one query per
  call as a service makes them, excluding the query's embedding (``search(vector=...)``) and
  including it (``search(text)``).
* ``handbuilt``: latency at equal recall of the exact fused top-10 (from an exact scan):
  ``Memory.search`` over ``ef`` versus the second seed's pattern on the same index -- vector
  search for the N nearest over the whole history, then a decay re-rank in Python (numpy) --
  over N.
* ``tokens``: the seed's "window size vs cost" table on this store: tokens per retrieval (the
  default approximate counter) and memories in the window, for no window, 30 days, 7 days,
  24 hours, and max_tokens=300.
* ``quality``: precision@10 of same-package results for held-out Debian changelog items (the
  label is the source package), no decay: hashing embedder, BM25 keyword, hybrid, and with
  ``--minilm`` the all-MiniLM-L6-v2 embedder (needs the [minilm] extra).

    python benchmarks/bench_memory.py [--n 100000] [--parts latency handbuilt tokens quality]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import Params  # noqa: E402
from text_data import labelled_changelog_split, memory_items  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_memory import HalfLife, Memory, approx_token_count  # noqa: E402

K = 10


@dataclass
class Results:
    n: int
    data: str
    machine: str
    threads: int
    add: dict[str, float] = field(default_factory=dict)
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    handbuilt: dict[str, Any] = field(default_factory=dict)
    tokens: list[dict[str, Any]] = field(default_factory=list)
    quality: dict[str, Any] = field(default_factory=dict)


def pct(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples) * 1e3
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)), "mean": float(a.mean())}


def timed_each(fn, items) -> tuple[list[float], list[Any]]:
    times, outs = [], []
    for it in items:
        t0 = time.perf_counter()
        outs.append(fn(it))
        times.append(time.perf_counter() - t0)
    return times, outs


def recall(found: list[list[int]], truth: np.ndarray) -> float:
    hits = sum(len(set(f) & set(t.tolist())) for f, t in zip(found, truth))
    return hits / truth.size


def build(args: argparse.Namespace, res: Results):
    items, desc = memory_items(args.n + args.queries, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    q_idx = set(rng.choice(len(items.texts), args.queries, replace=False).tolist())
    base = [i for i in range(len(items.texts)) if i not in q_idx]
    queries = [items.texts[i] for i in sorted(q_idx)]
    res.data = desc + f"; {len(queries)} held-out items as queries"
    print(f"data: {res.data}", flush=True)
    mem = Memory(decay=HalfLife(hours=24 * 30), num_threads=args.threads)
    if args.time_scan_rows is not None:
        mem.index.time_scan_rows = args.time_scan_rows
    texts = [items.texts[i] for i in base]
    times = [items.t[i] for i in base]
    if args.times == "year":  # same order in time, spread uniformly over the last year
        end = max(times)
        by_time = np.argsort(np.array([x.timestamp() for x in times]), kind="stable")
        ages = np.sort(rng.uniform(0, 365 * 24, len(times)))[::-1]  # oldest first
        new = [end] * len(times)
        for rank, i in enumerate(by_time):
            new[i] = end - timedelta(hours=float(ages[rank]))
        times = new
        res.data += "; times re-spread uniformly over one year, in their real order"
    t0 = time.perf_counter()
    vecs = mem.embedder.embed(texts)
    t_embed = time.perf_counter() - t0
    t0 = time.perf_counter()
    for s in range(0, len(texts), 5_000):
        ids = [str(i) for i in range(s, min(s + 5_000, len(texts)))]
        mem.add_many(texts[s : s + 5_000], ids, t=times[s : s + 5_000], vectors=vecs[s : s + 5_000])
    t_add = time.perf_counter() - t0
    res.add = {
        "embed_per_s": len(texts) / t_embed,
        "add_per_s_without_embedding": len(texts) / t_add,
        "add_per_s_with_embedding": len(texts) / (t_add + t_embed),
    }
    print(
        f"add: {res.add['add_per_s_with_embedding']:,.0f} memories/s with embedding "
        f"({res.add['embed_per_s']:,.0f}/s embedding, "
        f"{res.add['add_per_s_without_embedding']:,.0f}/s index+log)",
        flush=True,
    )
    at = max(times)
    return mem, queries, mem.embedder.embed(queries), at, vecs, times


def part_latency(mem: Memory, queries, qvecs, at, res: Results) -> None:
    t_vec, _ = timed_each(lambda v: mem.search(vector=v, k=K, at_time=at, touch=False), qvecs)
    t_txt, _ = timed_each(lambda q: mem.search(q, k=K, at_time=at, touch=False), queries)
    res.latency_ms["search_excluding_embedding"] = pct(t_vec)
    res.latency_ms["search_including_embedding"] = pct(t_txt)
    for name, v in res.latency_ms.items():
        print(f"{name:30s} p50 {v['p50']:.3f} ms  p99 {v['p99']:.3f} ms", flush=True)


def part_handbuilt(mem: Memory, qvecs, at, vecs, times, res: Results, target: float) -> None:
    decay = mem.decay
    exact = pi.PoincareFlatIndex(mem.embedder.dim)
    exact.add_with_ids(vecs, np.arange(len(vecs)), t=times)
    truth = exact.search_scored(qvecs, K, decay=decay, at_time=at).ids
    index = mem.index
    t_us = index.columns.column("t").cast("int64").to_numpy()
    at64 = np.datetime64(at.replace(tzinfo=None), "us").astype(np.int64)

    def handbuilt(v, n):
        D, I = index.search(v.reshape(1, -1), n, ef=max(n, index.ef_search))
        ids = I[0][I[0] >= 0]
        age_h = (at64 - t_us[ids]) / 3.6e9
        score = -D[0][: len(ids)].astype(np.float64) + np.log(np.power(0.5, age_h / decay.hours))
        return ids[np.argsort(-score)[:K]].tolist()

    def ours(v, ef):
        return [int(r.id) for r in mem.search(vector=v, k=K, at_time=at, touch=False, ef=ef)]

    sweeps: dict[str, list[dict[str, float]]] = {"ours": [], "handbuilt": []}
    for name, fn, knobs in (
        ("ours", ours, [10, 16, 32, 64, 128, 256]),
        ("handbuilt", handbuilt, [10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000]),
    ):
        for knob in knobs:
            secs, found = timed_each(lambda v, knob=knob, fn=fn: fn(v, knob), qvecs)
            point = {"knob": knob, "recall": recall(found, truth), **pct(secs)}
            sweeps[name].append(point)
            print(
                f"  {name:10s} {'ef' if name == 'ours' else 'N'}={knob:<5d} "
                f"recall {point['recall']:.4f}  p50 {point['p50']:.3f} ms",
                flush=True,
            )
            if point["recall"] >= max(target + 0.02, 0.999):
                break
    res.handbuilt = {"sweeps": sweeps, "target_recall": target}
    first = {name: next((p for p in pts if p["recall"] >= target), None) for name, pts in sweeps.items()}
    if first["ours"] and first["handbuilt"]:
        ratio = first["handbuilt"]["p50"] / first["ours"]["p50"]
        res.handbuilt["p50_ratio_handbuilt_over_ours"] = ratio
        print(
            f"  at recall >= {target}: ours p50 {first['ours']['p50']:.3f} ms, "
            f"hand-built {first['handbuilt']['p50']:.3f} ms -> {ratio:.1f}x",
            flush=True,
        )


def part_tokens(mem: Memory, qvecs, at, res: Results) -> None:
    t = mem.index.columns.column("t").cast("int64").to_numpy()
    at_us = np.datetime64(at.replace(tzinfo=None), "us").astype(np.int64)
    rows = [
        ("no window", None, None),
        ("30 days", timedelta(days=30), None),
        ("7 days", timedelta(days=7), None),
        ("24 hours", timedelta(hours=24), None),
        ("no window, max_tokens=300", None, 300),
    ]
    print(f"  {'window':28s} {'memories kept':>14s} {'tokens/retrieval':>17s} {'results':>8s} {'p50 ms':>7s}")
    for label, window, budget in rows:
        kept = len(mem) if window is None else int(np.sum(t >= at_us - window // timedelta(microseconds=1)))
        secs, outs = timed_each(
            lambda v, w=window, b=budget: mem.search(
                vector=v, k=K, at_time=at, touch=False, window=w, max_tokens=b
            ),
            qvecs,
        )
        tokens = [sum(approx_token_count(r.text) for r in out) for out in outs]
        row = {
            "window": label,
            "memories_kept": kept,
            "tokens_per_retrieval": float(np.mean(tokens)),
            "results_per_retrieval": float(np.mean([len(o) for o in outs])),
            **pct(secs),
        }
        res.tokens.append(row)
        print(
            f"  {label:28s} {kept:14,d} {row['tokens_per_retrieval']:17.1f} "
            f"{row['results_per_retrieval']:8.1f} {row['p50']:7.3f}"
        )


def part_quality(args: argparse.Namespace, res: Results) -> None:
    items, corpus_idx, q_idx = labelled_changelog_split(args.quality_n, args.quality_queries, args.seed)
    if not corpus_idx.size:
        print("quality: no Debian changelogs on this machine; skipped")
        return
    in_corpus = Counter(items.labels[i] for i in corpus_idx)
    corpus_labels = [items.labels[i] for i in corpus_idx]
    texts = [items.texts[i] for i in corpus_idx]
    random_p = float(np.mean([in_corpus[items.labels[i]] / len(corpus_idx) for i in q_idx]))
    res.quality = {"corpus": len(texts), "queries": len(q_idx), "precision_at_10": {"random": random_p}}
    print(
        f"quality: {len(texts):,} changelog items of {len(in_corpus)} packages, "
        f"{len(q_idx)} held-out queries; "
        f"precision@10 same package (random: {random_p:.3f})"
    )
    embedders: list[tuple[str, Any, list[str]]] = [
        ("hashing (default)", None, ["vector", "keyword", "hybrid"])
    ]
    if args.minilm:
        from poincare_index.embed import MiniLMEmbedder

        embedders.append(("all-MiniLM-L6-v2", MiniLMEmbedder(), ["vector", "hybrid"]))
    for name, embedder, modes in embedders:
        mem = Memory(decay=None, embedder=embedder)
        t0 = time.perf_counter()
        mem.add_many(texts, ids=[str(i) for i in range(len(texts))])
        build_s = time.perf_counter() - t0
        for mode in modes:
            hits = []
            for i in q_idx:
                out = mem.search(items.texts[i], k=K, mode=mode, touch=False)
                hits.append(
                    np.mean([corpus_labels[int(r.id)] == items.labels[i] for r in out]) if out else 0.0
                )
            key = f"{name} / {mode}"
            res.quality["precision_at_10"][key] = float(np.mean(hits))
            print(f"  {key:32s} {np.mean(hits):.3f}   (store built in {build_s:.1f} s)", flush=True)


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "n": 100_000,
    "queries": 500,
    "threads": os.cpu_count() or 1,
    "target": 0.95,
    "seed": 0,
    "times": "year",  # year: items' times spread over one year; real: the changelog dates
    "time_scan_rows": None,  # override the index's time_scan_rows
    "quality_n": 20_000,
    "quality_queries": 500,
    "minilm": False,  # also measure all-MiniLM-L6-v2 (needs the [minilm] extra)
    "parts": ["latency", "handbuilt", "tokens", "quality"],
    "out": os.path.join(HERE, "results", "memory.json"),
}


def run(args: Params) -> int:
    res = Results(
        args.n, "", f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores", args.threads
    )
    if {"latency", "handbuilt", "tokens"} & set(args.parts):
        mem, queries, qvecs, at, vecs, times = build(args, res)
        if "latency" in args.parts:
            part_latency(mem, queries, qvecs, at, res)
        if "handbuilt" in args.parts:
            print(
                "hand-built (vector search N + Python decay re-rank) vs Memory.search, "
                "exact fused top-10 as truth"
            )
            part_handbuilt(mem, qvecs, at, vecs, times, res, args.target)
        if "tokens" in args.parts:
            print("tokens per retrieval (k=10), the seed's table on this store")
            part_tokens(mem, qvecs, at, res)
    if "quality" in args.parts:
        part_quality(args, res)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(asdict(res), f, indent=1)
    print(f"wrote {args.out}")
    return 0
