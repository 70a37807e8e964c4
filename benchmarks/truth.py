"""Exact k-NN ground truth in float64 numpy (blocked), and recall.

Poincaré order for a query u is the order of ``delta = |u-v|^2 / ((1-|u|^2)(1-|v|^2))`` (the
distance is ``arcosh(1 + 2 delta)``, increasing in delta). A float64 GEMM pass scores every
database row (``(|u|^2 + |v|^2 - 2 u.v) a(v)``, a(v) = 1/(1-|v|^2), a(u) dropped as it is constant
per query) and keeps the best ``n_candidates``; those are recomputed directly from coordinate
differences in float64 and sorted to give the exact top k. A check confirms that the best
excluded GEMM score lies above the k-th exact key (plus the GEMM pass's error bound), so the
candidate cut cannot have dropped a true neighbour. L2 truth works the same way without a(v).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

METRICS = ("poincare", "l2")


@dataclass
class Truth:
    metric: str
    ids: NDArray[np.int64]  # (nq, k) exact neighbours, nearest first
    keys: NDArray[np.float64]  # (nq, k) poincare: delta (a(u) included); l2: squared distance
    seconds: float
    ties_at_k: int  # queries whose k-th and (k+1)-th keys are equal
    cut_violations: int  # queries where the candidate cut might have lost a neighbour

    @property
    def k(self) -> int:
        return int(self.ids.shape[1])

    def distances(self) -> NDArray[np.float64]:
        """Poincaré distances (metric 'poincare') or L2 distances (metric 'l2')."""
        if self.metric == "poincare":
            return 2.0 * np.arcsinh(np.sqrt(self.keys))
        return np.sqrt(self.keys)


def conformal(sq_norm: NDArray[np.float64]) -> NDArray[np.float64]:
    """a(x) = 1/(1 - |x|^2), written without cancellation near the boundary."""
    r = np.sqrt(sq_norm)
    return 1.0 / ((1.0 - r) * (1.0 + r))


def exact_knn(
    database: NDArray[np.float32],
    queries: NDArray[np.float32],
    k: int,
    metric: str,
    n_candidates: int = 100,
    block_bytes: int = 256 << 20,
) -> Truth:
    """Exact top-k of every query by ``metric`` ('poincare' or 'l2'); ids are row numbers."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}")
    t0 = time.perf_counter()
    db = database.astype(np.float64)
    q = queries.astype(np.float64)
    n, nq = db.shape[0], q.shape[0]
    nc = min(n_candidates, n - 1)
    if nc <= k:
        raise ValueError("the database needs more than n_candidates + 1 > k rows")
    sq_db = np.einsum("ij,ij->i", db, db)
    sq_q = np.einsum("ij,ij->i", q, q)
    poincare = metric == "poincare"
    a_db = conformal(sq_db) if poincare else np.ones(n)
    a_q = conformal(sq_q) if poincare else np.ones(nq)
    # Error bound of |u|^2 + |v|^2 - 2u.v against the direct sum of squares (float64, d terms).
    eps = 4.0 * (db.shape[1] + 2) * np.finfo(np.float64).eps
    block = max(1, min(nq, block_bytes // (8 * n)))
    ids = np.empty((nq, k), dtype=np.int64)
    keys = np.empty((nq, k), dtype=np.float64)
    ties = violations = 0
    for s in range(0, nq, block):
        qb = q[s : s + block]
        scores = qb @ db.T
        scores *= -2.0
        scores += sq_q[s : s + block, None]
        scores += sq_db[None, :]
        np.maximum(scores, 0.0, out=scores)
        if poincare:
            scores *= a_db[None, :]
        part = np.argpartition(scores, nc, axis=1)
        cand = part[:, :nc]
        excluded_best = np.take_along_axis(scores, part[:, nc : nc + 1], axis=1)[:, 0]
        diff = db[cand] - qb[:, None, :]
        exact = np.einsum("ijk,ijk->ij", diff, diff)
        if poincare:
            exact *= a_db[cand]
        order = np.argsort(exact, axis=1, kind="stable")
        exact_sorted = np.take_along_axis(exact, order, axis=1)
        kth = exact_sorted[:, k - 1]
        bound = eps * (sq_q[s : s + block] + np.max(sq_db)) * (np.max(a_db) if poincare else 1.0)
        violations += int(np.count_nonzero(excluded_best <= kth + 2.0 * bound))
        ties += int(np.count_nonzero(exact_sorted[:, k] == kth))
        ids[s : s + block] = np.take_along_axis(cand, order[:, :k], axis=1)
        keys[s : s + block] = exact_sorted[:, :k] * a_q[s : s + block, None]
        del scores, part, diff
    return Truth(
        metric=metric,
        ids=ids,
        keys=keys,
        seconds=time.perf_counter() - t0,
        ties_at_k=ties,
        cut_violations=violations,
    )


def recall(found: NDArray[np.int64], truth: Truth) -> float:
    """recall@k: the share of the exact k neighbours found among the first k results."""
    k = truth.k
    f = np.asarray(found)[:, :k]
    hits = (truth.ids[:, :, None] == f[:, None, :]).any(axis=2)
    return float(hits.mean())
