"""Each fast kernel against its plain serial reference, and the whole index on every kernel."""

from __future__ import annotations

import numpy as np
import pytest

import poincare_index as pi
from poincare_index import _core

FAMILIES = ["portable", "avx2", "avx512"]


def supported(name: str) -> bool:
    order = {"portable": 0, "avx2": 1, "avx512": 2}
    return order[name] <= order[_core.best_kernel_name()]


@pytest.fixture(params=FAMILIES)
def family(request):
    if not supported(request.param):
        pytest.skip(f"CPU lacks {request.param}")
    before = _core.kernel_name()
    _core.select_kernels(request.param)
    yield request.param
    _core.select_kernels(before)


@pytest.mark.parametrize("dim", [1, 3, 8, 15, 16, 17, 31, 32, 50, 64, 100])
def test_l2sq_fast_matches_reference(family, dim):
    rng = np.random.default_rng(dim)
    for _ in range(20):
        a, b = rng.normal(size=(2, dim)).astype(np.float32)
        ref = _core.l2sq_reference(a, b)
        exact = float(np.sum((a.astype(np.float64) - b) ** 2))
        fast = _core.l2sq_fast(a, b)
        # Both are float32 sums in different orders: each within dim*eps of the exact value.
        tol = 2 * dim * np.finfo(np.float32).eps * exact + 1e-30
        assert abs(ref - exact) <= tol
        assert abs(fast - exact) <= tol


@pytest.mark.parametrize("dim", [1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 50, 64, 100])
def test_l2sq_f64_fast_matches_reference(family, dim):
    """The finalists' float64 kernel against the serial float64 loop and an exact rational sum."""
    from fractions import Fraction

    rng = np.random.default_rng(200 + dim)
    for scale in (1.0, 1e-4, 1e3):
        a, b = (rng.normal(size=(2, dim)) * scale).astype(np.float32)
        exact = float(sum((Fraction(float(x)) - Fraction(float(y))) ** 2 for x, y in zip(a, b)))
        ref = _core.l2sq_exact_reference(a, b)
        fast = _core.l2sq_f64_fast(a, b)
        # float32 differences are exact in float64: both are float64 sums of the same squares.
        tol = 2 * dim * np.finfo(np.float64).eps * exact
        assert abs(ref - exact) <= tol
        assert abs(fast - exact) <= tol
    assert _core.l2sq_f64_fast(a, a) == 0.0


@pytest.mark.parametrize("dim", [1, 3, 15, 16, 17, 32, 50, 64, 100])
def test_l2sq_batch4_is_bit_identical_to_l2sq(family, dim):
    """The graph mixes the batched and the single kernel, so they must agree to the bit."""
    rng = np.random.default_rng(100 + dim)
    for _ in range(10):
        q = rng.normal(size=dim).astype(np.float32)
        rows = rng.normal(size=(4, dim)).astype(np.float32)
        batch = _core.l2sq_batch4_fast(q, rows)
        single = [_core.l2sq_fast(q, r) for r in rows]
        assert np.array_equal(np.asarray(batch, dtype=np.float32), np.asarray(single, dtype=np.float32))
        exact = np.sum((rows.astype(np.float64) - q) ** 2, axis=1)
        assert np.all(np.abs(np.asarray(batch) - exact) <= 2 * dim * np.finfo(np.float32).eps * exact + 1e-30)


@pytest.mark.parametrize("dim", [1, 7, 16, 50, 64])
@pytest.mark.parametrize("nq", [1, 2, 3, 4, 5, 6])
def test_scan_tile_fast_matches_reference(family, dim, nq):
    rng = np.random.default_rng(dim * 10 + nq)
    x = rng.normal(size=(32, dim))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0, 0.9999, (32, 1))).astype(np.float32)
    q = (rng.normal(size=(nq, dim)) * 0.3 / np.sqrt(dim)).astype(np.float32)
    rank_r, err_r, _ = _core.scan_tile(q, x, [np.inf] * nq, True)
    rank_f, err_f, mask_f = _core.scan_tile(q, x, [np.inf] * nq, False)
    # Exact rank quantity in float64, and the error bound must cover both kernels.
    x64, q64 = x.astype(np.float64), q.astype(np.float64)
    a = 1 / (1 - np.sum(x64 * x64, axis=1))
    exact = np.sum((q64[:, None, :] - x64[None]) ** 2, axis=2) * a[None]
    assert np.all(np.abs(rank_r - exact) <= err_r)
    assert np.all(np.abs(rank_f - exact) <= err_f)
    assert all(m == 0xFFFFFFFF for m in mask_f)
    # A threshold between values selects exactly the lanes whose lower bound is below it.
    tau = float(np.median(rank_f[0]))
    _, _, masks = _core.scan_tile(q, x, [tau] * nq, False)
    expected = sum(1 << j for j in range(32) if rank_f[0, j] - err_f[0, j] <= tau)
    assert masks[0] == expected


def test_index_agrees_across_kernels(tree_data):
    base, queries = tree_data
    results = {}
    before = _core.kernel_name()
    try:
        for name in FAMILIES:
            if not supported(name):
                continue
            _core.select_kernels(name)
            flat = pi.PoincareFlatIndex(16, num_threads=1)
            flat.add(base)
            hnsw = pi.PoincareIndex(16, num_threads=1, seed=3)
            hnsw.add(base)
            results[name] = (flat.search(queries, 10), hnsw.search(queries, 10, ef=64))
    finally:
        _core.select_kernels(before)
    names = list(results)
    for name in names[1:]:
        # Exact search is exact on every kernel; the graphs may differ in near-ties only.
        np.testing.assert_array_equal(results[name][0][1], results[names[0]][0][1])
        np.testing.assert_allclose(results[name][0][0], results[names[0]][0][0], rtol=1e-6)
        same = np.mean(results[name][1][1] == results[names[0]][1][1])
        assert same > 0.97


def test_select_kernels_errors():
    with pytest.raises(ValueError, match="unknown kernel"):
        _core.select_kernels("sse9")
    assert pi.kernel_name() in FAMILIES
