"""The recipe a Qdrant user is given for hyperbolic data, as a contender: a Euclidean HNSW index
(hnswlib, L2, M=16, efConstruction=200, on the same float32 ball points as every other
contender) prefetches the ``N`` L2-nearest candidates of each query, and an exact Poincaré
re-score in float64 (``poincare_index.geometry.distance``, curvature 1) keeps the top k.

A search setting is ``PrefetchSetting(prefetch=N, ef=...)``. hnswlib, like Qdrant, searches with
a beam of at least the number of results asked for, so the beam is ``ef = max(N, floor)``: the
floor 100 is what Qdrant uses when a request names no ``hnsw_ef`` (its ``ef_construct`` default;
the search then takes ``max(ef, limit)``), the floor 10 (= k) gives the cheapest beam, ``ef = N``,
and the floor 400 asks whether a wider beam buys more than more candidates.

The timed search includes the re-score (numpy, float64, in the calling thread; with more than
one search thread the query chunks are re-scored on that many threads: numpy releases the GIL).
The float32 points are kept by reference for the re-score: hnswlib holds the same vectors, and
a deployment re-scores from the vectors it stores, so the re-score adds no copy to the RSS.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

import poincare_index as pi

PREFETCHES = (10, 30, 100, 300, 1000)
EF_FLOORS = (10, 100, 400)
QDRANT_EF_FLOOR = 100  # Qdrant's ef when a request names no hnsw_ef: the collection's ef_construct
RESCORE_BLOCK_ELEMENTS = 1 << 20  # float64 elements per re-score block (8 MB per temporary)


class PrefetchSetting(NamedTuple):
    """One search setting: ``prefetch`` candidates from the L2 graph, searched with beam ``ef``."""

    prefetch: int
    ef: int

    def __neg__(self) -> tuple[int, int]:
        # bench_knn and knn_report pick the best sweep point by (recall, -ef): a cheaper setting
        # wins a tie. Plain tuples have no unary minus, so a setting negates field by field.
        return (-self.prefetch, -self.ef)

    def __str__(self) -> str:
        return f"N={self.prefetch},ef={self.ef}"


def prefetch_grid(
    prefetches: tuple[int, ...] = PREFETCHES, ef_floors: tuple[int, ...] = EF_FLOORS
) -> tuple[PrefetchSetting, ...]:
    """Every distinct (N, max(N, floor)), cheapest beam first (then fewer candidates first), so a
    sweep that stops once recall saturates (bench_knn's ``stop_recall``) stops early."""
    settings = {PrefetchSetting(n, max(n, floor)) for n in prefetches for floor in ef_floors}
    return tuple(sorted(settings, key=lambda s: (s.ef, s.prefetch)))


def as_setting(setting: Any) -> PrefetchSetting:
    """A sweep value as a setting: a ``PrefetchSetting`` or an (N, ef) pair as it is; a bare
    int (a suite's ef sweep, e.g. bench_knn with ``efs``) is N at Qdrant's default beam; None
    (a suite asking for the default) is N = 100 at that beam."""
    if setting is None:
        setting = 100
    if isinstance(setting, (int, np.integer)):
        return PrefetchSetting(int(setting), max(int(setting), QDRANT_EF_FLOOR))
    prefetch, ef = setting
    return PrefetchSetting(int(prefetch), int(ef))


def rescore(
    database: NDArray[np.float32],
    queries: NDArray[np.float32],
    candidates: NDArray[np.int64],
    k: int,
    threads: int = 1,
) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
    """The k Poincaré-nearest of each query's ``candidates`` (rows of ``database``, -1 = none):
    ``(D, I)`` as the index returns them, float32 distances ascending (computed in float64 by
    ``pi.distance``) and int64 ids, padded with inf / -1. Queries are re-scored in blocks that
    keep each float64 temporary near ``RESCORE_BLOCK_ELEMENTS``, on ``threads`` threads."""
    nq, n_cand = candidates.shape
    dist = np.full((nq, k), np.inf, dtype=np.float32)
    ids = np.full((nq, k), -1, dtype=np.int64)
    block = max(1, RESCORE_BLOCK_ELEMENTS // max(1, n_cand * database.shape[1]))
    keep = min(k, n_cand)

    def one_block(start: int) -> None:
        cand = candidates[start : start + block]
        valid = cand >= 0
        d = pi.distance(queries[start : start + block, None, :], database[np.where(valid, cand, 0)])
        d[~valid] = np.inf
        if keep < n_cand:
            part = np.argpartition(d, keep - 1, axis=1)[:, :keep]
        else:
            part = np.broadcast_to(np.arange(n_cand), d.shape)
        part_d = np.take_along_axis(d, part, axis=1)
        order = np.argsort(part_d, axis=1, kind="stable")
        best = np.take_along_axis(part, order, axis=1)
        best_d = np.take_along_axis(part_d, order, axis=1)
        found = np.isfinite(best_d)
        dist[start : start + block, :keep] = np.where(found, best_d, np.inf)
        ids[start : start + block, :keep] = np.where(found, np.take_along_axis(cand, best, axis=1), -1)

    starts = range(0, nq, block)
    if threads > 1 and len(starts) > 1:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one_block, starts))
    else:
        for start in starts:
            one_block(start)
    return dist, ids


def exact_l2_prefetch_recall(
    database: NDArray[np.float32], queries: NDArray[np.float32], truth_ids: NDArray[np.int64], prefetches: Any
) -> dict[int, float]:
    """The recipe's ceiling at each N, whatever the graph: the share of the exact Poincaré top-k
    (``truth_ids``) inside the exact L2 top-N (float64). The re-score keeps every true neighbour
    the candidates hold (they beat every other candidate), so this is the recall of an exact L2
    prefetch."""
    db = database.astype(np.float64)
    sq_db = np.einsum("ij,ij->i", db, db)
    n = db.shape[0]
    top = min(max(prefetches), n)
    ranked = np.empty((len(queries), top), dtype=np.int64)
    block = max(1, RESCORE_BLOCK_ELEMENTS // n)
    for s in range(0, len(queries), block):
        q = queries[s : s + block].astype(np.float64)
        scores = sq_db[None, :] - 2.0 * (q @ db.T)  # |q|^2 is the same for every row: dropped
        if top < n:
            part = np.argpartition(scores, top - 1, axis=1)[:, :top]
        else:
            part = np.tile(np.arange(n), (len(q), 1))
        order = np.argsort(np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
        ranked[s : s + block] = np.take_along_axis(part, order, axis=1)
    out = {}
    for p in prefetches:
        head = ranked[:, : min(p, n)]
        hits = (truth_ids[:, :, None] == head[:, None, :]).any(axis=2)
        out[int(p)] = float(hits.mean())
    return out


class HnswlibPrefetchRescore:
    """Adapter (the interface of ``adapters.Adapter``): hnswlib L2 prefetch of N, exact Poincaré
    re-score. The L2 index is ``adapters.HnswlibL2`` itself, so the graph is the one plain
    hnswlib is measured on. (adapters.py registers this class; importing adapters here only
    when building keeps the two modules free of an import cycle.)"""

    name = "hnswlib-prefetch-rescore"
    library = "hnswlib"
    truth = "poincare"
    extra_truths: tuple[str, ...] = ()
    sweep_values: tuple[PrefetchSetting, ...] = prefetch_grid()
    description = (
        "hnswlib.Index('l2', M=16, ef_construction=200) prefetches N candidates (ef = max(N, floor)), "
        "exact float64 Poincaré re-score (pi.distance) keeps the top k: Qdrant's recipe"
    )

    def __init__(self) -> None:
        self.n = 0
        self.dim = 0
        self.build_threads = 1
        self.threads = 1
        self.l2: Any = None
        self.points: NDArray[np.float32] | None = None

    def build(self, x: NDArray[np.float32], threads: int) -> None:
        import adapters

        self.n, self.dim, self.build_threads = x.shape[0], x.shape[1], threads
        self.points = np.ascontiguousarray(x, dtype=np.float32)
        self.l2 = adapters.HnswlibL2()
        self.l2.build(self.points, threads)
        self.threads = threads

    def set_threads(self, n: int) -> None:
        self.threads = n
        self.l2.set_threads(n)

    def prefetch(self, q: NDArray[np.float32], setting: Any) -> NDArray[np.int64]:
        """The L2 graph's candidates of every query, N per row (N at most the number stored)."""
        s = as_setting(setting)
        n_cand = min(s.prefetch, self.n)
        self.l2.index.set_ef(max(s.ef, n_cand))
        labels, _ = self.l2.index.knn_query(q, k=n_cand)
        return labels.astype(np.int64)

    def search_with_distances(
        self, q: NDArray[np.float32], k: int, setting: Any
    ) -> tuple[NDArray[np.float32], NDArray[np.int64]]:
        assert self.points is not None, "build first"
        return rescore(self.points, q, self.prefetch(q, setting), k, self.threads)

    def search(self, q: NDArray[np.float32], k: int, ef: Any) -> NDArray[np.int64]:
        return self.search_with_distances(q, k, ef)[1]

    def analytic_bytes(self) -> dict[str, float]:
        # The L2 index is the whole structure: the re-score reads the vectors it stores.
        return self.l2.analytic_bytes()

    def diagnostics(
        self, database: NDArray[np.float32], queries: NDArray[np.float32], k: int, truths: dict[str, Any]
    ) -> dict[str, Any]:
        # The ceiling of the recipe per N (exact L2 prefetch), to tell what the L2 order costs
        # from what the graph's approximation costs. bench_knn passes truths by metric,
        # bench_families by query kind (its queries are the held-out ones).
        truth = truths.get("poincare", truths.get("held_out"))
        if truth is None or truth.metric != "poincare":
            return {}
        prefetches = sorted({s.prefetch for s in self.sweep_values})
        ceiling = exact_l2_prefetch_recall(database, queries, truth.ids[:, :k], prefetches)
        return {"exact_l2_prefetch_recall": {str(n): r for n, r in ceiling.items()}}

    def release(self) -> None:
        if self.l2 is not None:
            self.l2.release()
        self.l2 = None
        self.points = None
