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


def fused_brute_force(
    base: np.ndarray,
    queries: np.ndarray,
    k: int,
    log_weights: np.ndarray,
    depth_bias: float = 0.0,
    time_coef: float = 1.0,
    allowed: np.ndarray | None = None,
    curvature: float = 1.0,
):
    """Exact top-k by score = -d + depth_bias depth + time_coef log w, in float64.

    ``log_weights`` (n,) comes from the policy's numpy reference. Returns (scores, rows), ties by
    row index; rows not ``allowed`` are skipped.
    """
    b = base.astype(np.float64)
    sb = np.sum(b * b, axis=1)
    r = np.sqrt(curvature * sb)
    depth = 2 / np.sqrt(curvature) * np.arctanh(r)
    out_s = np.full((len(queries), k), -np.inf)
    out_i = np.full((len(queries), k), -1, dtype=np.int64)
    keep = np.ones(len(b), dtype=bool) if allowed is None else allowed
    for qi, q in enumerate(queries.astype(np.float64)):
        diff = b - q
        delta = np.sum(diff * diff, axis=1) / ((1 - curvature * sb) * (1 - curvature * (q @ q)))
        d = 2 / np.sqrt(curvature) * np.arcsinh(np.sqrt(curvature * delta))
        score = -d + depth_bias * depth + time_coef * log_weights
        score = np.where(keep, score, -np.inf)
        order = np.lexsort((np.arange(len(b)), -score))[:k]
        order = order[np.isfinite(score[order])]
        out_s[qi, : len(order)] = score[order]
        out_i[qi, : len(order)] = order
    return out_s, out_i


def range_brute_force(base: np.ndarray, queries: np.ndarray, radius: float, curvature: float = 1.0):
    """Per query, (distances ascending, row indices) of the rows at distance < radius, in float64."""
    b = base.astype(np.float64)
    sb = np.sum(b * b, axis=1)
    out = []
    for q in queries.astype(np.float64):
        diff = b - q
        delta = np.sum(diff * diff, axis=1) / ((1 - curvature * sb) * (1 - curvature * (q @ q)))
        d = 2 / np.sqrt(curvature) * np.arcsinh(np.sqrt(curvature * delta))
        rows = np.flatnonzero(d < radius)
        order = np.lexsort((rows, d[rows]))
        out.append((d[rows][order], rows[order]))
    return out
