"""How cost grows with size (Step 11): build time at 1 and 2 threads, RSS per vector, one-thread
QPS at recall@10 0.95 and recall@1 of the exact nearest, for us, FAISS IndexHNSWFlat on the
lifted vectors and hnswlib L2, at each size, every contender through the same adapters
(adapters.py) and each build in a process of its own (one's freed heap does not flatter the next
one's RSS). Fits the exponent of build time against n (log-log) per contender and threads, and
draws it (matplotlib, in the bench extra).

    python benchmarks/bench_large.py --data hierarchy --dims 16 64 --sizes 100000 1000000
    python benchmarks/bench_large.py --data glove-boundary --sizes 100000 399500
    python benchmarks/bench_large.py --dims 16 --sizes 5000000 --build-threads 2 \
        --merge benchmarks/results/large_hierarchy_16d.json --out ...   # add a size to a table

Recall is scored against the exact float64 truth of each contender's own metric (Poincaré for us
and the lift, L2 for hnswlib, as in bench_knn.py); the QPS reported is at the smallest ef of the
sweep whose recall@10 reaches the target (none if no ef does).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_common import Params, machine, write_results  # noqa: E402
from child_process import call_in_child  # noqa: E402

CONTENDERS = ("ours-hnsw", "faiss-hnsw-lifted", "hnswlib-l2")
EFS = (10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
K = 10


@dataclass
class Point:
    contender: str
    data: str
    dim: int
    n: int
    build_threads: int
    build_seconds: float
    rss_bytes_per_vector: float
    sweep: list[dict[str, float]]  # ef, recall@10, recall@1, qps (one search thread)
    ef_at_target: int | None
    qps_at_target: float | None
    recall1_at_target: float | None


@dataclass
class Results:
    machine: str
    data: str
    queries: int
    target_recall: float
    points: list[Point] = field(default_factory=list)
    exponents: list[dict[str, Any]] = field(default_factory=list)  # build time ~ n^b


def dataset(data: str, dim: int, n: int, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """(database of n rows, queries): the generated hierarchy (held-out nodes as queries), or
    a dataset of datasets.py (GloVe-based; its own dimension)."""
    if data == "hierarchy":
        from poincare_index.datasets import hierarchy

        h = hierarchy(n + queries, dim, seed=0)
        db, q = h.split(queries, seed=0)
        return np.ascontiguousarray(db), np.ascontiguousarray(q)
    import datasets as ds

    d = ds.load(data, n + queries, queries, seed=0)
    return d.database, d.queries


def truth_files(data: str, dim: int, n: int, queries: int, cache: str) -> dict[str, str]:
    """Exact top-k ids per metric, computed once per dataset and size (float64 numpy)."""
    from truth import exact_knn

    out = {}
    for metric in ("poincare", "l2"):
        path = os.path.join(cache, f"truth_{data}_{dim}_{n}_{queries}_{metric}.npy")
        if not os.path.exists(path):
            db, q = dataset(data, dim, n, queries)
            np.save(path, exact_knn(db, q, K, metric).ids)
        out[metric] = path
    return out


def measure(
    data: str, contender: str, dim: int, n: int, queries: int, build_threads: int, truth: dict[str, str]
) -> dict[str, Any]:
    """In the child: build one contender, measure RSS, sweep ef."""
    import adapters as ad
    from bench_common import rss_bytes

    db, q = dataset(data, dim, n, queries)
    adapter = ad.CONTENDERS[contender]()
    truth_ids = np.load(truth[adapter.truth])
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    adapter.build(db, build_threads)
    seconds = time.perf_counter() - t0
    rss = rss_bytes() - rss0
    del db
    adapter.set_threads(1)
    sweep = []
    for ef in EFS:
        adapter.search(q[: min(50, len(q))], K, ef)  # warm
        t = time.perf_counter()
        ids = adapter.search(q, K, ef)
        elapsed = time.perf_counter() - t
        hits = (truth_ids[:, :, None] == ids[:, None, :K]).any(axis=2)
        sweep.append(
            {
                "ef": ef,
                "recall10": float(hits.mean()),
                "recall1": float((ids[:, 0] == truth_ids[:, 0]).mean()),
                "qps": len(q) / elapsed,
            }
        )
        if sweep[-1]["recall10"] >= 0.999:
            break
    dim = int(q.shape[1])
    return {"build_seconds": seconds, "rss_bytes_per_vector": rss / n, "sweep": sweep, "dim": dim}


def at_target(sweep: list[dict[str, float]], target: float) -> tuple[int | None, float | None, float | None]:
    for s in sweep:
        if s["recall10"] >= target:
            return int(s["ef"]), s["qps"], s["recall1"]
    return None, None, None


def fit_exponents(points: list[Point]) -> list[dict[str, Any]]:
    """Least-squares slope of log(build time) against log(n), per contender, dim and threads."""
    groups: dict[tuple[str, int, int], list[Point]] = {}
    for p in points:
        groups.setdefault((p.contender, p.dim, p.build_threads), []).append(p)
    out = []
    for (contender, dim, threads), ps in sorted(groups.items()):
        if len({p.n for p in ps}) < 2:
            continue
        x = np.log([p.n for p in ps])
        y = np.log([p.build_seconds for p in ps])
        slope = float(np.polyfit(x, y, 1)[0])
        out.append({"contender": contender, "dim": dim, "build_threads": threads, "exponent": slope})
    return out


def plot(res: Results, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("the plot needs matplotlib: pip install '.[bench]' (from a checkout)") from exc
    fig, ax = plt.subplots(figsize=(7, 5))
    fits = {(e["contender"], e["dim"], e["build_threads"]): e["exponent"] for e in res.exponents}
    groups: dict[tuple[str, int, int], list[Point]] = {}
    for p in res.points:
        groups.setdefault((p.contender, p.dim, p.build_threads), []).append(p)
    for key, ps in sorted(groups.items()):
        ps = sorted(ps, key=lambda p: p.n)
        exp = fits.get(key)
        label = f"{key[0]} {key[1]}-d, {key[2]} thr" + (f" (n^{exp:.2f})" if exp is not None else "")
        ax.plot([p.n for p in ps], [p.build_seconds for p in ps], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("points")
    ax.set_ylabel("build seconds")
    ax.set_title(f"Build time against size ({res.data}; {res.machine})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_point(args: Params, contender: str, dim: int, n: int, threads: int, truth: dict[str, str]) -> Point:
    """One contender at one size and thread count, measured in a child process."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    m = call_in_child(
        "bench_large", "measure", env=env, data=args.data, contender=contender, dim=dim, n=n,
        queries=args.queries, build_threads=threads, truth=truth,
    )  # fmt: skip
    ef, qps, r1 = at_target(m["sweep"], args.target_recall)
    p = Point(
        contender, args.data, m["dim"], n, threads, m["build_seconds"], m["rss_bytes_per_vector"], m["sweep"],
        ef, qps, r1,
    )  # fmt: skip
    qps_s = f"{qps:,.0f}" if qps else "-"
    print(
        f"{args.data} d={p.dim} n={n} {contender} {threads} thr: build {p.build_seconds:.1f} s "
        f"({n / p.build_seconds / threads:,.0f} pts/s/core), RSS {p.rss_bytes_per_vector:.0f} B, "
        f"ef@{args.target_recall}={ef} QPS {qps_s} recall@1 {r1} "
        f"(best recall@10 {max(x['recall10'] for x in p.sweep):.3f})",
        flush=True,
    )
    return p


# The parameters and their defaults; a configuration (benchmarks/configs/) overrides them.
DEFAULTS: dict[str, Any] = {
    "data": "hierarchy",  # hierarchy, or a dataset of datasets.py
    "dims": [16, 64],  # hierarchy only
    "sizes": [100_000, 1_000_000],
    "queries": 500,
    "build_threads": [1, 2],
    "contenders": ",".join(CONTENDERS),
    "target_recall": 0.95,
    "out": None,  # default: results/large_<data>.json
    "plot": None,  # PNG path (default: beside --out)
    "merge": [],  # results JSON of earlier runs (same data) whose points join this run's fit and plot
}


def run(args: Params) -> int:
    out = args.out or os.path.join(HERE, "results", f"large_{args.data}.json")
    png = args.plot or os.path.splitext(out)[0] + ".png"
    dims = args.dims if args.data == "hierarchy" else [0]
    res = Results(machine(), args.data, args.queries, args.target_recall)
    for earlier in args.merge:  # relative paths: beside this run's result file
        with open(os.path.join(os.path.dirname(out), earlier)) as f:
            prior = json.load(f)
        if prior["data"] != args.data or prior["queries"] != args.queries:
            raise SystemExit(
                f"--merge {earlier}: data/queries {prior['data']}/{prior['queries']} differ from this run's"
            )
        res.points += [Point(**p) for p in prior["points"]]
    res.exponents = fit_exponents(res.points)
    cache = tempfile.mkdtemp(prefix="bench_large_")
    for dim in dims:
        for n in args.sizes:
            truth = truth_files(args.data, dim, n, args.queries, cache)
            for contender in args.contenders.split(","):
                for threads in args.build_threads:
                    res.points.append(run_point(args, contender, dim, n, threads, truth))
                    res.exponents = fit_exponents(res.points)
                    write_results(out, res)
    for e in res.exponents:
        print(f"build time ~ n^{e['exponent']:.2f}: {e['contender']} {e['dim']}-d {e['build_threads']} thr")
    if res.exponents:
        plot(res, png)
        print(f"plot: {png}")
    return 0 if all(not math.isnan(p.build_seconds) for p in res.points) else 1
