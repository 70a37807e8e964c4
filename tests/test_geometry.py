"""The numpy reference geometry: properties (hypothesis) and precision against mpmath."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import poincare_index as pi

DIM = 5
coords = st.floats(-1.0, 1.0, allow_nan=False, width=64)


@st.composite
def ball_points(draw, dim=DIM, max_norm=0.999):
    v = draw(arrays(np.float64, dim, elements=coords))
    scale = draw(st.floats(0.0, max_norm))
    n = np.linalg.norm(v)
    return v / n * scale if n > 0 else v


def mobius_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Möbius addition (c = 1): x -> a ⊕ x is an isometry of the ball."""
    ab, aa, bb = a @ b, a @ a, b @ b
    return ((1 + 2 * ab + bb) * a + (1 - aa) * b) / (1 + 2 * ab + aa * bb)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ball_points(), ball_points(), ball_points())
def test_metric_axioms(u, v, w):
    duv, dvu = pi.distance(u, v), pi.distance(v, u)
    assert duv == pytest.approx(dvu, rel=1e-12, abs=1e-12)
    assert pi.distance(u, u) == 0.0
    assert duv >= 0
    assert pi.distance(u, w) <= duv + pi.distance(v, w) + 1e-9


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ball_points(max_norm=0.9), ball_points(max_norm=0.9), ball_points(max_norm=0.9))
def test_mobius_isometry_invariance(a, u, v):
    moved = pi.distance(mobius_add(a, u), mobius_add(a, v))
    assert moved == pytest.approx(pi.distance(u, v), rel=1e-7, abs=1e-9)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(ball_points(max_norm=0.99), ball_points(max_norm=0.9), st.sampled_from([0.5, 1.0, 3.0]))
def test_the_package_mobius_add_is_the_translation_taking_the_origin_to_u(u, v, c):
    sc = math.sqrt(c)
    got = pi.mobius_add(u / sc, v / sc, curvature=c)
    np.testing.assert_allclose(got, mobius_add(u, v) / sc, rtol=1e-9, atol=1e-12)
    moved = pi.distance(u / sc, got, curvature=c)
    assert moved == pytest.approx(pi.depth(v / sc, curvature=c), rel=1e-6, abs=1e-9)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(arrays(np.float64, DIM, elements=st.floats(-3, 3, allow_nan=False)))
def test_expmap_logmap_inverse_and_depth(v):
    x = pi.expmap0(v)
    assert np.linalg.norm(x) < 1
    np.testing.assert_allclose(pi.logmap0(x), v, rtol=1e-8, atol=1e-10)
    # depth(expmap0(v)) = 2|v| for c = 1
    assert pi.depth(x) == pytest.approx(2 * np.linalg.norm(v), rel=1e-8, abs=1e-12)


def test_curvature_scaling():
    rng = np.random.default_rng(0)
    u, v = rng.normal(size=(2, 6)) * 0.2
    c = 2.5
    # Scaling the ball by 1/sqrt(c) scales distances by 1/sqrt(c).
    assert pi.distance(u / math.sqrt(c), v / math.sqrt(c), curvature=c) == pytest.approx(
        pi.distance(u, v) / math.sqrt(c), rel=1e-10
    )


def mp_distance(u, v) -> mpmath.mpf:
    mpmath.mp.dps = 50
    uu = sum(mpmath.mpf(float(a)) ** 2 for a in u)
    vv = sum(mpmath.mpf(float(a)) ** 2 for a in v)
    dd = sum((mpmath.mpf(float(a)) - mpmath.mpf(float(b))) ** 2 for a, b in zip(u, v))
    return mpmath.acosh(1 + 2 * dd / ((1 - uu) * (1 - vv)))


@pytest.mark.parametrize("norm", [0.5, 0.99, 0.999, 0.9999, 0.99999])
def test_reference_precision_near_boundary(norm):
    rng = np.random.default_rng(int(norm * 1e5))
    d = rng.normal(size=(20, 8))
    pts = (d / np.linalg.norm(d, axis=1, keepdims=True) * norm).astype(np.float32)
    close = pts[0] * np.float32(1 - 1e-6)  # a very close pair: the hard case for arcosh
    for a, b in [(pts[0], pts[1]), (pts[2], pts[3]), (pts[0], close)]:
        exact = mp_distance(a, b)
        got = pi.distance(a, b)
        assert abs(got - float(exact)) <= 1e-9 * float(exact) + 1e-15


def test_project():
    x = np.array([[0.0, 2.0], [0.1, 0.1], [0.6, 0.8]], dtype=np.float32)
    p = pi.project(x, eps=1e-6)
    assert p.dtype == np.float32
    norms = np.linalg.norm(p.astype(np.float64), axis=1)
    assert np.all(norms <= 1 - 1e-6)
    np.testing.assert_array_equal(p[1], x[1])
    np.testing.assert_allclose(p[0], [0, 1 - 1e-6], rtol=1e-6)
    with pytest.raises(ValueError, match="eps"):
        pi.project(x, eps=0)
    assert pi.project(np.array([[3.0, 4.0]]), eps=0.5, curvature=4.0).dtype == np.float64


def test_geometry_input_errors():
    with pytest.raises(ValueError, match="outside"):
        pi.distance([1.0, 0.0], [0.0, 0.0])
    with pytest.raises(ValueError, match="NaN"):
        pi.depth([np.nan, 0.0])
    with pytest.raises(TypeError):
        pi.distance(["a"], ["b"])
    with pytest.raises(ValueError, match="curvature"):
        pi.distance([0.1], [0.2], curvature=-1)
    with pytest.raises(TypeError, match="curvature"):
        pi.distance([0.1], [0.2], curvature="1")
