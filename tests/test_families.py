"""The data-family generator of the benchmarks (benchmarks/families.py) at small sizes: points
inside the ball, deterministic, one depth where it says so, near queries next to their source,
held-out queries not stored. Checked against the float64 reference brute force."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from reference import brute_force

import poincare_index as pi

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
try:
    import families
finally:
    sys.path.pop(0)

N, NQ, DIM = 500, 40, 8
MEMBERS = families.family_names()


def _make(name: str, seed: int = 0, dim: int = DIM) -> families.Family:
    if families.unavailable(name):
        pytest.importorskip(families.GLOVE_PACKAGE)
    return families.make(name, N, NQ, dim, seed=seed)


@pytest.fixture(scope="module")
def made() -> dict[str, families.Family]:
    return {name: _make(name) for name in MEMBERS if not families.unavailable(name)}


def _get(made: dict[str, families.Family], name: str) -> families.Family:
    if name not in made:
        pytest.skip(families.unavailable(name) or name)
    return made[name]


@pytest.mark.parametrize("name", MEMBERS)
def test_rows_are_finite_float32_inside_the_ball(made, name):
    fam = _get(made, name)
    dim = families.fixed_dim(name) or DIM
    assert fam.dim == dim and fam.info["dim"] == dim
    for x, rows in ((fam.points, N), (fam.held_out, NQ), (fam.near, NQ)):
        assert x.dtype == np.float32 and x.shape == (rows, dim) and x.flags.c_contiguous
        assert np.all(np.isfinite(x))
        sq = np.sum(x.astype(np.float64) ** 2, axis=1)
        assert np.all(sq < 1.0 - pi.BALL_MARGIN)
    assert fam.near_source.dtype == np.int64 and fam.near_source.shape == (NQ,)
    assert len(np.unique(fam.near_source)) == NQ and 0 <= fam.near_source.min() <= fam.near_source.max() < N


@pytest.mark.parametrize("name", MEMBERS)
def test_deterministic_in_seed(made, name):
    fam = _get(made, name)
    again, other = _make(name, seed=0), _make(name, seed=1)
    for field in ("points", "held_out", "near", "near_source"):
        np.testing.assert_array_equal(getattr(fam, field), getattr(again, field))
    assert not np.array_equal(fam.points, other.points)


@pytest.mark.parametrize("name", ["one_depth-r1", "one_depth-r3", "one_depth-r6", "glove-unit"])
def test_one_depth_has_one_depth(made, name):
    fam = _get(made, name)
    for x in (fam.points, fam.held_out):
        d = pi.depth(x)
        assert (d.max() - d.min()) / np.median(d) < 1e-3


@pytest.mark.parametrize("name", MEMBERS)
def test_near_queries_are_next_to_their_source(made, name):
    fam = _get(made, name)
    src = fam.points[fam.near_source]
    step = pi.distance(fam.near, src)
    _, nn = brute_force(fam.points, src, 2)
    other = np.where(nn[:, 0] == fam.near_source, nn[:, 1], nn[:, 0])
    spacing = pi.distance(src, fam.points[other])
    # half the distance to the source's nearest other point (float32 rounding and the ball's
    # edge aside), so the source is the exact nearest of nearly every near query
    assert np.mean(step <= 0.51 * spacing + 1e-3) >= 0.95
    assert np.all(step <= spacing)
    _, found = brute_force(fam.points, fam.near, 1)
    assert np.mean(found[:, 0] == fam.near_source) >= 0.9


@pytest.mark.parametrize("name", MEMBERS)
def test_held_out_queries_are_not_stored(made, name):
    fam = _get(made, name)
    d, _ = brute_force(fam.points, fam.held_out, 1)
    assert np.all(d[:, 0] > 0)
    assert not np.any((fam.held_out[:, None, :] == fam.points[None, :, :]).all(axis=2))


def test_dimension_is_a_parameter_and_names_are_checked():
    fam = families.make("gauss-s0.15", 200, 10, 24, seed=3)
    assert fam.points.shape == (200, 24) and fam.family == "gauss"
    with pytest.raises(ValueError):
        families.make("no-such-family", 200, 10, 8)
    with pytest.raises(ValueError):
        families.make("gauss-s0.15", 200, 0, 8)
