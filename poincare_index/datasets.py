"""Generated data with hierarchical structure, for the demo, the tests and the benchmarks."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .geometry import expmap0

__all__ = ["Hierarchy", "hierarchy"]


@dataclass(frozen=True)
class Hierarchy:
    """A random tree embedded in the Poincaré ball: deep nodes sit near the boundary."""

    points: NDArray[np.float32]  # (n, dim), inside the ball
    parent: NDArray[np.int64]  # (n,), -1 for the root
    level: NDArray[np.int64]  # (n,), 0 for the root

    def split(self, n_queries: int, seed: int = 0) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """(database, queries): ``n_queries`` random nodes held out of the database."""
        if not 0 <= n_queries <= len(self.points):
            raise ValueError(f"n_queries must be in [0, {len(self.points)}], got {n_queries}")
        order = np.random.default_rng(seed).permutation(len(self.points))
        return self.points[order[n_queries:]], self.points[order[:n_queries]]


def hierarchy(
    n: int,
    dim: int,
    *,
    seed: int = 0,
    branching: tuple[int, int] = (2, 8),
    max_norm: float = 0.9999,
    spread: float = 2.0,
) -> Hierarchy:
    """A tree of ``n`` nodes with ``branching[0]..branching[1]`` children per node, embedded in
    the unit ball of dimension ``dim``.

    Level l of a tree of depth L lies at hyperbolic depth about ``(l/L) * depth(max_norm)``
    (the deepest nodes at norms up to ``max_norm``, as float32); a child's direction is its
    parent's perturbed by Gaussian noise of scale ``spread / sqrt(level)``, so subtrees form
    cones. Deterministic for a given ``seed``.
    """
    if n < 1 or dim < 2:
        raise ValueError("hierarchy needs n >= 1 and dim >= 2")
    if not 0.0 < max_norm < 1.0:
        raise ValueError("max_norm must be in (0, 1)")
    lo, hi = branching
    if not 1 <= lo <= hi:
        raise ValueError("branching must be (low, high) with 1 <= low <= high")
    rng = np.random.default_rng(seed)
    parent = np.full(n, -1, dtype=np.int64)
    level = np.zeros(n, dtype=np.int64)
    count, head = 1, 0
    while count < n:  # breadth-first: every node gets its children before the next level
        k = min(int(rng.integers(lo, hi + 1)), n - count)
        parent[count : count + k] = head
        level[count : count + k] = level[head] + 1
        count += k
        head += 1
    depth_levels = max(int(level.max()), 1)
    r_max = math.atanh(max_norm)  # tangent norm whose expmap0 has norm max_norm (c = 1)
    radius = np.zeros(n)
    direction = np.zeros((n, dim))
    for i in range(1, n):
        p, lv = parent[i], level[i]
        radius[i] = r_max * (lv / depth_levels) * (0.9 + 0.1 * rng.random())
        g = rng.standard_normal(dim)
        if p == 0:
            d = g
        else:
            # Near the boundary a fixed angle is a large hyperbolic distance (it grows like
            # the depth), so a child's angular offset shrinks like exp(-depth of its parent):
            # children stay closer to their parent than to their parent's siblings.
            angle = spread * math.exp(-2.0 * radius[p])
            d = direction[p] + g / np.linalg.norm(g) * angle
        direction[i] = d / np.linalg.norm(d)
    tangent = direction * radius[:, None]
    points = expmap0(tangent).astype(np.float32)
    # float32 rounding must not push a point past max_norm.
    norms = np.linalg.norm(points.astype(np.float64), axis=1)
    over = norms > max_norm
    points[over] = (points[over] / norms[over, None] * max_norm * (1 - 1e-7)).astype(np.float32)
    return Hierarchy(points=points, parent=parent, level=level)
