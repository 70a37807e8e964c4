#!/usr/bin/env python
"""k-NN benchmark: poincare_index against FAISS and hnswlib on the same data, same harness.

Every contender goes through the same adapter (see adapters.py): built once with all the
threads asked for (timed, RSS measured), then an ef sweep where each batch of queries is timed
at every thread count (best of ``--repeats`` runs, time.perf_counter around the whole batch)
and scored with recall@k against exact float64 ground truth (truth.py). Results go to a JSON
file under benchmarks/results/ and a table on stdout; every comparison is a ratio of two
figures measured in this run.

    python benchmarks/bench_knn.py --dataset all                        # the full benchmark
    python benchmarks/bench_knn.py --dataset all --n 20000 --queries 200  # a quick run
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import adapters as ad
import datasets as ds
import numpy as np
from bench_common import Params, hardware_info, rss_bytes, versions
from knn_report import print_dataset, write_result
from truth import Truth, exact_knn, recall

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------------------------
# results


@dataclass
class SweepPoint:
    ef: int | None
    recall: float  # recall@k against the contender's truth
    recall_at_1: float = 0.0  # the first result is the exact nearest
    self_recall_at_1: float = 0.0  # a stored point searched by its own vector comes back first
    recall_extra: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # threads -> best batch seconds
    qps: dict[str, float] = field(default_factory=dict)  # threads -> queries per second
    same_ids_across_threads: bool = True


@dataclass
class ContenderResult:
    name: str
    library: str
    description: str
    truth: str
    build_threads: int
    build_seconds: float
    rss_build_bytes: int
    rss_bytes_per_vector: float
    rss_after_search_bytes: int
    analytic_bytes: dict[str, float]
    analytic_bytes_per_vector: float
    sweep: list[SweepPoint]
    target_reached: bool
    target_ef: int | None  # smallest ef reaching the target (None: exact / not reached)
    target_recall: float | None
    target_qps: dict[str, float]  # QPS at target_ef (or at the best recall if not reached)
    # The smallest ef where recall@k, recall@1 and self-recall@1 all reach the target.
    all_target_ef: int | None
    all_target_qps: dict[str, float]
    best_recall: float
    best_recall_ef: int | None
    diagnostics: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class Comparison:
    name: str
    value: float | None
    detail: str


@dataclass
class DatasetResult:
    name: str
    description: str
    n_database: int
    n_queries: int
    dim: int
    info: dict[str, Any]
    truth: dict[str, dict[str, Any]]
    contenders: list[ContenderResult]
    comparisons: list[Comparison]
    seconds: float


@dataclass
class RunResult:
    created: str
    command: list[str]
    parameters: dict[str, Any]
    hardware: dict[str, Any]
    versions: dict[str, str]
    datasets: list[DatasetResult]


# ---------------------------------------------------------------------------------------------
# the harness loop


def time_batches(
    adapter: ad.Adapter, q: np.ndarray, k: int, ef: int | None, threads: list[int], repeats: int
) -> tuple[dict[int, float], dict[int, np.ndarray]]:
    """Best wall time of ``repeats`` runs of the whole batch at each thread count, and the ids of
    each count's first run. Repeats are interleaved across thread counts (1, 2, 1, 2, ...) so
    a burst of load from elsewhere on the machine does not land on every run of one count."""
    best = {t: float("inf") for t in threads}
    ids: dict[int, np.ndarray] = {}
    for _ in range(repeats):
        for t in threads:
            adapter.set_threads(t)
            t0 = time.perf_counter()
            out = adapter.search(q, k, ef)
            best[t] = min(best[t], time.perf_counter() - t0)
            ids.setdefault(t, out)
    return best, ids


def run_contender(
    adapter: ad.Adapter, data: ds.Dataset, truths: dict[str, Truth], args: Params
) -> ContenderResult:
    threads: list[int] = args.threads
    build_threads = max(threads)
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    adapter.build(data.database, build_threads)
    build_seconds = time.perf_counter() - t0
    rss_build = rss_bytes() - rss0
    n = data.database.shape[0]
    nq = data.queries.shape[0]
    sweep_values = adapter.sweep_values if args.efs is None or adapter.sweep_values == (None,) else args.efs
    sweep: list[SweepPoint] = []
    self_rows = np.random.default_rng(args.seed + 7).choice(n, min(args.self_queries, n), replace=False)
    for ef in sweep_values:
        point = SweepPoint(ef=ef, recall=0.0)
        best, ids = time_batches(adapter, data.queries, args.k, ef, threads, args.repeats)
        point.seconds = {str(t): s for t, s in best.items()}
        point.qps = {str(t): nq / s for t, s in best.items()}
        first_ids = ids[threads[0]]
        point.same_ids_across_threads = all(np.array_equal(first_ids, v) for v in ids.values())
        point.recall = recall(first_ids, truths[adapter.truth])
        point.recall_extra = {m: recall(first_ids, truths[m]) for m in adapter.extra_truths}
        point.recall_at_1 = float(np.mean(first_ids[:, 0] == truths[adapter.truth].ids[:, 0]))
        adapter.set_threads(max(threads))
        self_ids = adapter.search(data.database[self_rows], args.k, ef)
        point.self_recall_at_1 = float(np.mean(self_ids[:, 0] == self_rows))
        sweep.append(point)
        if args.verbose:
            print(
                f"    {adapter.name:18s} ef={ef!s:>4} recall={point.recall:.4f} "
                f"r@1={point.recall_at_1:.4f} self@1={point.self_recall_at_1:.4f} "
                + " ".join(f"qps@{t}={v:,.0f}" for t, v in point.qps.items()),
                flush=True,
            )
        if min(point.recall, point.recall_at_1, point.self_recall_at_1) >= args.stop_recall:
            break
    rss_after = rss_bytes() - rss0
    reached = [p for p in sweep if p.recall >= args.target]
    best = max(sweep, key=lambda p: (p.recall, -(p.ef or 0)))
    chosen = reached[0] if reached else best
    all_reached = [p for p in sweep if min(p.recall, p.recall_at_1, p.self_recall_at_1) >= args.target]
    analytic = adapter.analytic_bytes()
    analytic_total = 0.0
    for key, v in analytic.items():
        if key.endswith("_per_thread"):
            v *= build_threads
        elif key.endswith("_fixed"):
            v /= n
        analytic_total += v
    diagnostics = adapter.diagnostics(data.database, data.queries, args.k, truths)
    return ContenderResult(
        name=adapter.name,
        library=adapter.library,
        description=adapter.description,
        truth=adapter.truth,
        build_threads=build_threads,
        build_seconds=build_seconds,
        rss_build_bytes=rss_build,
        rss_bytes_per_vector=rss_build / n,
        rss_after_search_bytes=rss_after,
        analytic_bytes=analytic,
        analytic_bytes_per_vector=analytic_total,
        sweep=sweep,
        target_reached=bool(reached),
        target_ef=chosen.ef if reached else None,
        target_recall=chosen.recall,
        target_qps=dict(chosen.qps),
        all_target_ef=all_reached[0].ef if all_reached else None,
        all_target_qps=dict(all_reached[0].qps) if all_reached else {},
        best_recall=best.recall,
        best_recall_ef=best.ef,
        diagnostics=diagnostics,
    )


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def compare(results: dict[str, ContenderResult], threads: list[int], target: float) -> list[Comparison]:
    out: list[Comparison] = []

    def qps_at_target(name: str, t: int) -> float | None:
        r = results.get(name)
        return r.target_qps.get(str(t)) if r is not None and r.target_reached else None

    def missing(*names: str) -> str:
        parts = []
        for nm in names:
            r = results.get(nm)
            if r is None:
                parts.append(f"{nm} not run")
            elif not r.target_reached:
                parts.append(
                    f"{nm} never reached {target} (best {r.best_recall:.4f} at ef={r.best_recall_ef})"
                )
        return "; ".join(parts)

    for t in threads:
        for other, what in (
            ("faiss-hnsw-lifted", "same Poincaré task"),
            ("hnswlib-l2", "cost of hyperbolic vs hnswlib L2"),
            ("faiss-hnsw-l2", "cost of hyperbolic vs FAISS L2"),
        ):
            v = _ratio(qps_at_target("ours-hnsw", t), qps_at_target(other, t))
            out.append(
                Comparison(
                    f"QPS ours-hnsw / {other} @recall {target}, {t} thr",
                    v,
                    what if v is not None else missing("ours-hnsw", other),
                )
            )
    for t in threads:
        a, b = results.get("ours-hnsw"), results.get("hnswlib-l2")
        if a is not None and b is not None:
            qa, qb = a.all_target_qps.get(str(t)), b.all_target_qps.get(str(t))
            out.append(
                Comparison(
                    f"QPS ours-hnsw / hnswlib-l2 @recall@k, @1, self@1 >= {target}, {t} thr",
                    _ratio(qa, qb),
                    f"ef {a.all_target_ef} vs {b.all_target_ef}"
                    if qa is not None and qb is not None
                    else f"not reached (ef {a.all_target_ef} vs {b.all_target_ef})",
                )
            )
    for other in ("faiss-hnsw-lifted", "hnswlib-l2"):
        if "ours-hnsw" in results and other in results:
            a, b = results["ours-hnsw"], results[other]
            out.append(
                Comparison(
                    f"build time ours-hnsw / {other}",
                    _ratio(a.build_seconds, b.build_seconds),
                    f"{a.build_seconds:.2f}s vs {b.build_seconds:.2f}s, {a.build_threads} threads",
                )
            )
    if "faiss-flat-l2" in results:
        r = results["faiss-flat-l2"]
        out.append(
            Comparison(
                "recall@k of exact L2 (faiss.IndexFlatL2) vs Poincaré truth",
                r.best_recall,
                "what plain L2 on the ball points gives",
            )
        )
    for other in ("faiss-hnsw-lifted", "faiss-hnsw-l2", "hnswlib-l2"):
        if "ours-hnsw" in results and other in results:
            a, b = results["ours-hnsw"], results[other]
            out.append(
                Comparison(
                    f"bytes/vector ours-hnsw / {other} (RSS)",
                    _ratio(a.rss_bytes_per_vector, b.rss_bytes_per_vector),
                    f"{a.rss_bytes_per_vector:.0f} vs {b.rss_bytes_per_vector:.0f} B; analytic "
                    f"{a.analytic_bytes_per_vector:.0f} vs {b.analytic_bytes_per_vector:.0f} B",
                )
            )
    if "ours-flat" in results and "faiss-flat-l2" in results:
        a, b = results["ours-flat"], results["faiss-flat-l2"]
        for t in threads:
            ta, tb = a.sweep[0].seconds.get(str(t)), b.sweep[0].seconds.get(str(t))
            v = _ratio(ta, tb)
            out.append(
                Comparison(
                    f"flat search time ours-flat / faiss-flat-l2, {t} thr",
                    v,
                    f"{ta * 1e3:.1f} ms vs {tb * 1e3:.1f} ms (target <= 1.5)"
                    if ta is not None and tb is not None
                    else "not measured",
                )
            )
    return out


def run_dataset(name: str, args: Params) -> DatasetResult:
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    print(f"\n=== {name} === (load average {load_before[0]:.2f})", flush=True)
    if load_before[0] > 0.5:
        print("  warning: the machine is busy; multi-thread timings will be noisy", flush=True)
    data = ds.load(name, args.n, args.queries, seed=args.seed)
    n, d = data.database.shape
    print(
        f"{data.description}: database {n:,} x {d}, {data.queries.shape[0]:,} queries; "
        f"db norms median {data.info['db_norm_median']:.6f} max {data.info['db_norm_max']:.8f}",
        flush=True,
    )
    truths: dict[str, Truth] = {}
    for metric in ("poincare", "l2"):
        truths[metric] = exact_knn(data.database, data.queries, args.k, metric)
        tr = truths[metric]
        print(
            f"truth {metric}: {tr.seconds:.1f}s, ties at k: {tr.ties_at_k}, candidate-cut "
            f"violations: {tr.cut_violations}",
            flush=True,
        )
    results: dict[str, ContenderResult] = {}
    for cname in args.contenders:
        adapter = ad.ALL_CONTENDERS[cname]()
        print(f"  {cname} ...", flush=True)
        try:
            results[cname] = run_contender(adapter, data, truths, args)
        except Exception as exc:  # a contender failing must not lose the others' results
            print(f"  {cname} FAILED: {exc!r}", flush=True)
            results[cname] = ContenderResult(
                name=cname,
                library=adapter.library,
                description=adapter.description,
                truth=adapter.truth,
                build_threads=max(args.threads),
                build_seconds=float("nan"),
                rss_build_bytes=0,
                rss_bytes_per_vector=float("nan"),
                rss_after_search_bytes=0,
                analytic_bytes={},
                analytic_bytes_per_vector=float("nan"),
                sweep=[],
                target_reached=False,
                target_ef=None,
                target_recall=None,
                target_qps={},
                all_target_ef=None,
                all_target_qps={},
                best_recall=float("nan"),
                best_recall_ef=None,
                error=repr(exc),
            )
        finally:
            adapter.release()
            del adapter
    truth_info = {
        m: {"seconds": t.seconds, "ties_at_k": t.ties_at_k, "cut_violations": t.cut_violations}
        for m, t in truths.items()
    }
    data.info["loadavg_1min_before"] = load_before[0]
    data.info["loadavg_1min_after"] = os.getloadavg()[0]
    truth_info["overlap_l2_vs_poincare"] = {"recall": recall(truths["l2"].ids, truths["poincare"])}
    return DatasetResult(
        name=name,
        description=data.description,
        n_database=n,
        n_queries=int(data.queries.shape[0]),
        dim=d,
        info=data.info,
        truth=truth_info,
        contenders=list(results.values()),
        comparisons=compare(results, args.threads, args.target),
        seconds=time.perf_counter() - t_start,
    )


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "datasets": list(ds.DATASETS),  # names in registry.py's dataset registry
    "n": None,  # rows in all, queries included (None: hierarchy 100000, GloVe 400000, trees 20000)
    "queries": 1000,  # held-out queries
    "threads": [1, 2],  # search thread counts; the build uses the largest
    "k": 10,  # neighbours per query
    "self_queries": 1000,  # stored points searched by their own vector for self-recall@1
    "target": 0.95,  # recall@k target
    "repeats": 3,  # timed runs per batch, the best kept
    "efs": None,  # the ef sweep (None: adapters.EF_SWEEP)
    "stop_recall": 0.999,  # stop a contender's sweep once its recall reaches this; > 1 for the full sweep
    "contenders": list(ad.CONTENDERS),  # names in registry.py's contender registry
    "seed": 0,  # data and query seed
    "verbose": False,  # print each sweep point
    "out": None,  # JSON path (the runner gives it)
}


def run(args: Params) -> int:
    unknown = [d for d in args.datasets if d not in ds.DATASETS]
    unknown += [c for c in args.contenders if c not in ad.ALL_CONTENDERS]
    if unknown:
        raise ValueError(f"unknown datasets or contenders {unknown}")
    if not args.threads or min(args.threads) < 1:
        raise ValueError("threads needs positive integers")
    args.efs = None if args.efs is None else tuple(args.efs)
    names = args.datasets
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or os.path.join(
        HERE, "results", f"knn_{'full' if args.n is None else args.n}_{stamp}.json"
    )
    run = RunResult(
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        command=sys.argv,
        parameters={k: v for k, v in vars(args).items()}
        | {"M": ad.M, "ef_construction": ad.EF_CONSTRUCTION, "ef_sweep": list(ad.EF_SWEEP)},
        hardware=hardware_info(),
        versions=versions(),
        datasets=[],
    )
    hw = run.hardware
    v = run.versions
    print(
        f"{hw.get('cpu_model')}, nproc {hw.get('nproc')}; poincare_index {v['poincare_index']} "
        f"(_core sha256 {v['poincare_index_core_sha256']}, kernel {v['poincare_index_kernel']}), "
        f"faiss {v['faiss']}, hnswlib {v['hnswlib']}; search threads {args.threads}"
    )
    for name in names:
        result = run_dataset(name, args)
        run.datasets.append(result)
        print_dataset(result, args.threads, args.target, args.k)
        write_result(out, run)  # rewritten after each dataset: a crash keeps what finished
    print(f"\nresults: {out}")
    return 0
