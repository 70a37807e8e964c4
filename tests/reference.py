"""Independent float64 numpy references used by the tests."""

from __future__ import annotations

import numpy as np


def brute_force(base: np.ndarray, queries: np.ndarray, k: int, curvature: float = 1.0):
    """Exact k nearest by Poincaré distance in float64 (direct differences, no GEMM identity).

    Returns (distances, row indices), ties broken by row index.
    """
    b = base.astype(np.float64)
    out_d = np.full((len(queries), k), np.inf)
    out_i = np.full((len(queries), k), -1, dtype=np.int64)
    sb = np.sum(b * b, axis=1)
    for qi, q in enumerate(queries.astype(np.float64)):
        diff = b - q
        delta = np.sum(diff * diff, axis=1) / ((1 - curvature * sb) * (1 - curvature * (q @ q)))
        d = 2 / np.sqrt(curvature) * np.arcsinh(np.sqrt(curvature * delta))
        order = np.lexsort((np.arange(len(b)), d))[:k]
        out_d[qi, : len(order)] = d[order]
        out_i[qi, : len(order)] = order
    return out_d, out_i


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    hits = sum(len(set(f.tolist()) & set(t.tolist()) - {-1}) for f, t in zip(found, truth))
    return hits / max(1, int(np.sum(truth >= 0)))
