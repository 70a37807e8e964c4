"""Generated data with hierarchical structure, for the demo, the tests and the benchmarks."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .geometry import expmap0

__all__ = ["Hierarchy", "boundary_tree", "hierarchy", "one_depth"]


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


def boundary_tree(
    n: int,
    dim: int,
    *,
    seed: int = 0,
    branching: int = 8,
    step: float = 2.5,
    max_tangent: float = 4.6,
) -> Hierarchy:
    """A complete ``branching``-ary tree of ``n`` nodes (breadth-first) whose children drift from
    their parent by a Gaussian step (expected norm ``step``) in the tangent space at the origin,
    tangent norms clipped at ``max_tangent`` before ``expmap0``: with the defaults every node
    below the second level sits at norm tanh(4.6) ~ 0.9998 and only a few shallow nodes lie
    inside. The hard case for a graph: the shallow nodes are near everything (their a(x) is
    ~50x smaller), while the crowd at the boundary is ordered as in Euclidean space. Returned
    in random order (a user adds points as they come), deterministic for a given ``seed``.
    """
    if n < 1 or dim < 2:
        raise ValueError("boundary_tree needs n >= 1 and dim >= 2")
    if branching < 1:
        raise ValueError(f"branching must be >= 1, got {branching}")
    if not (step > 0 and 0 < max_tangent < 8.0):
        raise ValueError("step must be > 0 and max_tangent in (0, 8)")
    rng = np.random.default_rng(seed)
    parent = np.full(n, -1, dtype=np.int64)
    parent[1:] = (np.arange(1, n) - 1) // branching
    level = np.zeros(n, dtype=np.int64)
    tangent = np.zeros((n, dim))
    sigma = step / math.sqrt(dim)
    for i in range(1, n):  # parents come before their children (breadth-first numbering)
        level[i] = level[parent[i]] + 1
        tangent[i] = tangent[parent[i]] + rng.normal(scale=sigma, size=dim)
    norms = np.linalg.norm(tangent, axis=1)
    scale = np.minimum(1.0, max_tangent / np.maximum(norms, 1e-300))
    points = expmap0(tangent * scale[:, None]).astype(np.float32)
    order = rng.permutation(n)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    parent = np.where(parent[order] >= 0, inverse[np.maximum(parent[order], 0)], -1)
    return Hierarchy(points=points[order], parent=parent, level=level[order])


def one_depth(
    n: int, dim: int, *, seed: int = 0, clusters: int = 64, radius: float = 1.0
) -> NDArray[np.float32]:
    """Text-embedding-like data: ``n`` unit vectors from an anisotropic mixture of ``clusters``
    Gaussian clusters (a shared mean direction and cluster sizes that vary, as in GloVe), scaled
    by ``radius`` and mapped with ``expmap0``, so every point lies at one depth (norm
    tanh(radius) ~ 0.76). Where the hierarchy lets a search stop early, here distances decide
    alone and a walk must be as thorough as its ef says. Deterministic for a given ``seed``.
    """
    if n < 1 or dim < 2 or clusters < 1:
        raise ValueError("one_depth needs n >= 1, dim >= 2 and clusters >= 1")
    if not 0 < radius < 8.0:
        raise ValueError(f"radius must be in (0, 8), got {radius}")
    rng = np.random.default_rng(seed)
    common = rng.normal(size=dim)
    centers = 0.6 * rng.normal(size=(clusters, dim)) + 0.5 * common / np.linalg.norm(common) * math.sqrt(dim)
    spread = rng.uniform(0.3, 1.2, size=clusters)
    weights = rng.dirichlet(np.full(clusters, 0.5))
    label = rng.choice(clusters, size=n, p=weights)
    x = centers[label] + rng.normal(size=(n, dim)) * spread[label, None] * rng.uniform(
        0.5, 1.5, size=(1, dim)
    )
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return expmap0(x * radius).astype(np.float32)
