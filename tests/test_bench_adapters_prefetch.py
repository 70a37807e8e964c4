"""Qdrant's recipe as a benchmark contender (benchmarks/prefetch_rescore.py): an hnswlib L2 graph
prefetches N candidates, an exact float64 Poincaré re-score keeps the top k. When N covers every
stored point the re-score is an exact search, so it must agree with the exact flat index; the
adapter answers through the harness's interface. Skipped when hnswlib (the bench extra) is absent."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from reference import brute_force

pytest.importorskip("hnswlib")
pytest.importorskip("faiss")  # adapters.py imports the other contenders' libraries

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
try:
    import adapters
    import families
    import prefetch_rescore as pr
    from truth import exact_knn
finally:
    sys.path.pop(0)

import poincare_index as pi  # noqa: E402

N, NQ, DIM, K = 300, 20, 8, 10


@pytest.fixture(scope="module", params=["hierarchy", "gauss-s0.3"])
def built(request):
    """A member of the data family and the contender built on its points (one search thread)."""
    fam = families.make(request.param, N, NQ, DIM, seed=0)
    adapter = pr.HnswlibPrefetchRescore()
    adapter.build(fam.points, 1)
    adapter.set_threads(1)
    yield fam, adapter
    adapter.release()


@pytest.mark.parametrize("prefetch", [N, 5 * N])
def test_prefetch_of_everything_is_the_exact_search(built, prefetch):
    fam, adapter = built
    flat = pi.PoincareFlatIndex(DIM)
    flat.add(fam.points)
    flat_d, flat_i = flat.search(fam.held_out, K)
    dist, ids = adapter.search_with_distances(fam.held_out, K, pr.PrefetchSetting(prefetch, prefetch))
    np.testing.assert_array_equal(ids, flat_i)
    np.testing.assert_allclose(dist, flat_d, rtol=1e-5)
    # and through the harness's call, with the float64 reference as the judge
    ref_d, ref_i = brute_force(fam.points, fam.held_out, K)
    np.testing.assert_array_equal(adapter.search(fam.held_out, K, (prefetch, prefetch)), ref_i)
    np.testing.assert_allclose(dist, ref_d, rtol=1e-6)


def test_rescore_keeps_the_k_nearest_candidates():
    fam = families.make("tree-b4", N, NQ, DIM, seed=1)
    rng = np.random.default_rng(0)
    cand = np.stack([rng.choice(N, 40, replace=False) for _ in range(NQ)]).astype(np.int64)
    cand[:, -5:] = -1  # padding never comes back
    dist, ids = pr.rescore(fam.points, fam.held_out, cand, K)
    for row in range(NQ):
        kept = cand[row][cand[row] >= 0]
        ref = pi.distance(fam.held_out[row], fam.points[kept])
        order = np.argsort(ref, kind="stable")[:K]
        np.testing.assert_array_equal(ids[row], kept[order])
        np.testing.assert_allclose(dist[row], ref[order].astype(np.float32))
    few_d, few_i = pr.rescore(fam.points, fam.held_out, cand[:, :3], K)  # fewer candidates than k
    assert np.all(few_i[:, 3:] == -1) and np.all(np.isinf(few_d[:, 3:]))
    many_d, many_i = pr.rescore(fam.points, fam.held_out, cand, K, threads=2)
    np.testing.assert_array_equal(many_i, ids)


def test_settings_and_registration():
    grid = pr.prefetch_grid()
    assert all(s.ef >= s.prefetch for s in grid) and len(set(grid)) == len(grid)
    assert {s.prefetch for s in grid} == set(pr.PREFETCHES)
    assert pr.PrefetchSetting(100, pr.QDRANT_EF_FLOOR) in grid  # Qdrant's default beam
    # bench_knn ranks sweep points by (recall, -ef)
    assert max(grid, key=lambda s: (1.0, -s)) == grid[0]
    assert pr.as_setting(30) == pr.PrefetchSetting(30, pr.QDRANT_EF_FLOOR)
    assert pr.as_setting((30, 64)) == pr.PrefetchSetting(30, 64)
    assert adapters.ALL_CONTENDERS[pr.HnswlibPrefetchRescore.name] is pr.HnswlibPrefetchRescore
    assert pr.HnswlibPrefetchRescore.name not in adapters.CONTENDERS  # not in "all" by default


def test_diagnostics_report_the_exact_l2_ceiling(built):
    fam, adapter = built
    truth = exact_knn(fam.points, fam.held_out, K, "poincare")
    diag = adapter.diagnostics(fam.points, fam.held_out, K, {"held_out": truth})
    ceiling = diag["exact_l2_prefetch_recall"]
    assert ceiling[str(max(pr.PREFETCHES))] == 1.0  # N >= n: every point is a candidate
    values = [ceiling[str(p)] for p in sorted(pr.PREFETCHES)]
    assert values == sorted(values)
