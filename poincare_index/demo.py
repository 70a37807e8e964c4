"""The demo: build an HNSW index on generated hierarchical data, check it against the exact index;
then show time at work in the memory layer."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np

from .datasets import hierarchy
from .index import PoincareFlatIndex, PoincareIndex


@dataclass(frozen=True)
class DemoRow:
    ef: int
    recall_at_k: float
    recall_at_1: float  # the first result is the exact nearest
    self_recall_at_1: float  # a stored point searched by its own vector comes back first
    queries_per_second: float
    speedup_vs_exact: float


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean fraction of each query's true top-k ids found in its returned top-k."""
    hits = sum(len(set(f[f >= 0].tolist()) & set(t[t >= 0].tolist())) for f, t in zip(found, truth))
    return hits / max(1, int(np.sum(truth >= 0)))


def run_demo(
    n: int = 50_000,
    dim: int = 32,
    n_queries: int = 500,
    k: int = 10,
    seed: int = 0,
    threads: int | None = None,
) -> list[DemoRow]:
    print(f"poincare_index demo: {n:,} points of a generated hierarchy in the {dim}-d Poincaré ball")
    data = hierarchy(n + n_queries, dim, seed=seed)
    base, queries = data.split(n_queries, seed=seed)
    norms = np.linalg.norm(base.astype(np.float64), axis=1)
    print(f"  norms: median {np.median(norms):.4f}, max {norms.max():.6f} (deep nodes near the boundary)")

    exact = PoincareFlatIndex(dim, num_threads=threads)
    exact.add(base)
    t0 = time.perf_counter()
    _, truth = exact.search(queries, k)
    exact_s = time.perf_counter() - t0
    exact_qps = n_queries / exact_s
    print(f"  exact index: {exact_qps:,.0f} queries/s ({exact.num_threads} threads)")

    index = PoincareIndex(dim, M=16, ef_construction=200, seed=seed, num_threads=threads)
    t0 = time.perf_counter()
    index.add(base, progress=sys.stderr.isatty())  # a bar on a terminal
    build_s = time.perf_counter() - t0
    print(f"  HNSW build (M=16, ef_construction=200): {build_s:.2f} s, {n / build_s:,.0f} points/s")

    rows = []
    stored = np.random.default_rng(seed).choice(n, min(n, n_queries), replace=False)
    print(
        f"  {'ef':>5} {'recall@' + str(k):>10} {'recall@1':>9} {'self@1':>7} "
        f"{'queries/s':>12} {'vs exact':>9}"
    )
    for ef in (16, 32, 64, 128):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            _, found = index.search(queries, k, ef=ef)
            best = min(best, time.perf_counter() - t0)
        _, itself = index.search(base[stored], 1, ef=ef)
        row = DemoRow(
            ef,
            recall_at_k(found, truth),
            float(np.mean(found[:, 0] == truth[:, 0])),
            float(np.mean(itself[:, 0] == stored)),
            n_queries / best,
            exact_s / best,
        )
        rows.append(row)
        print(
            f"  {row.ef:>5} {row.recall_at_k:>10.4f} {row.recall_at_1:>9.4f} {row.self_recall_at_1:>7.4f} "
            f"{row.queries_per_second:>12,.0f} {row.speedup_vs_exact:>8.1f}x"
        )
    return rows


def run_memory_demo(now: datetime | None = None) -> list[list[str]]:
    """Time at work in the memory layer: the same query ranks differently at two times."""
    from .decay import HalfLife, Product, ValidityWindow
    from .memory import Memory

    now = now or datetime.now(timezone.utc)
    print("\nmemory demo: Product(HalfLife(90 days), ValidityWindow()); a fact that changed")
    mem = Memory(decay=Product(HalfLife(hours=24 * 90), ValidityWindow()))
    mem.add("API rate limit is 100 rps (release 2.3)", id="old", t=now - timedelta(days=90),
            valid_until=now - timedelta(days=20))  # fmt: skip
    mem.add("API rate limit is 250 rps (release 2.4)", id="new", t=now - timedelta(days=20),
            valid_from=now - timedelta(days=20))  # fmt: skip
    orders = []
    for label, at in (("now", now), ("40 days ago", now - timedelta(days=40))):
        hits = mem.search("rate limit", k=2, at_time=at, touch=False)
        orders.append([r.id for r in hits])
        print(f"  search('rate limit') as of {label}:")
        for r in hits:
            print(f"    {r.id:4s} time weight {r.time_weight:<8.3g} {r.explain()}")
    return orders


def run_hierarchy_demo(epochs: int = 50, seed: int = 0) -> dict[str, float] | None:
    """WordNet's mammals embedded in the 10-d ball: reconstruction, depth by level, a search.
    None (with a note) when numba, the ``[numba]`` extra, is not installed."""
    try:
        import numba  # noqa: F401
    except ImportError:
        print(
            "\nhierarchy demo: skipped, it needs numba "
            '(pip install ".[numba]" from a checkout of poincare_index)'
        )
        return None
    from .hierarchy import mammals, reconstruction, train

    edges = mammals()
    emb = train(edges, 10, epochs=epochs, seed=seed)
    rec = reconstruction(emb, edges)
    print(
        f"\nhierarchy demo: WordNet's mammal closure ({len(emb):,} synsets, {len(edges):,} pairs) "
        f"in the 10-d ball, {emb.train_seconds:.1f} s of training"
    )
    print(f"  reconstruction: mean rank {rec.mean_rank:.2f}, MAP {rec.map:.3f}")
    depth = emb.depth()
    n_ancestors = {name: 0 for name in emb.names}
    for child, _ in edges:
        n_ancestors[child] += 1
    levels = np.array([n_ancestors[name] for name in emb.names])
    print("  distance from the origin by level (0: mammal.n.01, the root):")
    for level in range(0, int(levels.max()) + 1, 2):
        at = depth[levels == level]
        if at.size:
            print(f"    level {level:2d}: {at.size:4d} synsets, median {np.median(at):5.2f}")
    index = emb.to_index("flat")
    _, ids = index.search(emb.vector("dog.n.01").reshape(1, -1), 6)
    print("  nearest to dog.n.01: " + ", ".join(emb.names[i] for i in ids[0][1:]))
    root_depth = float(depth[emb.index_of("mammal.n.01")])
    return {"mean_rank": rec.mean_rank, "map": rec.map, "root_depth": root_depth}
