"""A fast version of the data family of benchmarks/families.py for the tests: small members of
every distribution the graph must find its points in, generated from numpy and the package's
own datasets (the tests do not import the benchmarks)."""

from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.typing import NDArray

import poincare_index as pi
from poincare_index.datasets import boundary_tree, hierarchy, one_depth

F32 = NDArray[np.float32]


def _directions(rng: np.random.Generator, n: int, dim: int) -> NDArray[np.float64]:
    g = rng.normal(size=(n, dim))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _mobius_add(x: NDArray[np.float64], y: NDArray[np.float64]) -> NDArray[np.float64]:
    xy = np.sum(x * y, axis=1, keepdims=True)
    xx = np.sum(x * x, axis=1, keepdims=True)
    yy = np.sum(y * y, axis=1, keepdims=True)
    return ((1 + 2 * xy + yy) * x + (1 - xx) * y) / (1 + 2 * xy + xx * yy)


def _clusters(n: int, dim: int, rng: np.random.Generator) -> NDArray[np.float64]:
    """8 clusters at depths 1-6, each a Gaussian in the tangent space at its centre."""
    depth = rng.uniform(1.0, 6.0, size=(8, 1))
    centres = _directions(rng, 8, dim) * np.tanh(0.5 * depth)
    label = rng.integers(0, 8, size=n)
    step = rng.normal(size=(n, dim)) * (0.5 / np.sqrt(dim))
    return _mobius_add(centres[label], np.asarray(pi.expmap0(step)))


MEMBERS: dict[str, Callable[[int, int, np.random.Generator, int], NDArray[np.floating]]] = {
    "one_depth-r3": lambda n, d, rng, seed: one_depth(n, d, seed=seed, radius=3.0),
    "gauss-s0.05": lambda n, d, rng, seed: pi.expmap0(rng.normal(size=(n, d)) * 0.05),
    "gauss-s0.15": lambda n, d, rng, seed: pi.expmap0(rng.normal(size=(n, d)) * 0.15),
    "gauss-s0.3": lambda n, d, rng, seed: pi.expmap0(rng.normal(size=(n, d)) * 0.3),
    "uniform_radius": lambda n, d, rng, seed: _directions(rng, n, d) * rng.uniform(0, 0.999, (n, 1)),
    "loguniform_depth": lambda n, d, rng, seed: (
        _directions(rng, n, d) * np.tanh(0.5 * np.exp(rng.uniform(np.log(0.01), np.log(15.0), (n, 1))))
    ),
    "clusters": lambda n, d, rng, seed: _clusters(n, d, rng),
    "uniform_ball": lambda n, d, rng, seed: _directions(rng, n, d) * rng.uniform(size=(n, 1)) ** (1.0 / d),
    "tree-b4": lambda n, d, rng, seed: boundary_tree(n, d, seed=seed, branching=4).points,
    "hierarchy": lambda n, d, rng, seed: hierarchy(n, d, seed=seed).points,
}


def member(name: str, n: int, dim: int, seed: int = 0) -> F32:
    """``n`` points of family member ``name`` in ``dim`` dimensions, float32 inside the ball."""
    x = np.asarray(MEMBERS[name](n, dim, np.random.default_rng([seed, dim]), seed), dtype=np.float64)
    return np.ascontiguousarray(pi.project(x.astype(np.float32), eps=pi.BALL_MARGIN), dtype=np.float32)


def near(points: F32, rows: NDArray[np.int64], seed: int = 0, fraction: float = 0.1) -> F32:
    """Queries a small step from ``points[rows]``: ``fraction`` of the way to a random other point."""
    rng = np.random.default_rng([seed, 7])
    other = points[rng.integers(0, len(points), size=len(rows))].astype(np.float64)
    x = points[rows].astype(np.float64)
    q = x + fraction * (other - x) * rng.uniform(0.05, 1.0, size=(len(rows), 1)) * 0.1
    return np.ascontiguousarray(pi.project(q.astype(np.float32), eps=pi.BALL_MARGIN), dtype=np.float32)
