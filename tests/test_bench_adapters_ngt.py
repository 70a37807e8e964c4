"""NGT as a benchmark contender (benchmarks/adapters.py, NgtANNG / NgtONNG): the index is
created as L2 and switched to Poincaré in its profile, NGT's distances then equal the float64
Poincaré distance (so it ranks by the Poincaré order, also near the boundary), and the adapters
answer through the harness's interface. Skipped when ``ngt`` (module ``ngtpy``) is absent."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from reference import brute_force, recall

pytest.importorskip("ngtpy")
pytest.importorskip("faiss")  # adapters.py imports the other contenders' libraries
pytest.importorskip("hnswlib")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
try:
    import adapters
    import families
finally:
    sys.path.pop(0)

import ngtpy  # noqa: E402

N, NQ, DIM, K = 500, 20, 8, 10


@pytest.fixture(scope="module")
def tree() -> families.Family:
    """Boundary-crowded tree: norms up to 0.9998, the hardest place for a float32 distance."""
    return families.make("tree-b4", N, NQ, DIM, seed=0)


def test_profile_switch_to_poincare(tmp_path):
    path = str(tmp_path / "idx")
    adapters.ngt_create_poincare(path, DIM, 10, 40)
    assert adapters.ngt_distance_type(path) == "Poincare"
    l2 = str(tmp_path / "l2")
    ngtpy.create(l2, DIM, edge_size_for_creation=10, edge_size_for_search=40)
    with open(os.path.join(path, "prf")) as a, open(os.path.join(l2, "prf")) as b:
        diff = set(a.read().splitlines()) ^ set(b.read().splitlines())
    assert diff == {"DistanceType\tPoincare", "DistanceType\tL2"}


@pytest.mark.parametrize("member", ["tree-b4", "loguniform_depth", "gauss-s0.3"])
def test_ngt_distance_is_the_poincare_distance(tmp_path, member):
    fam = families.make(member, N, NQ, DIM, seed=1)
    path = str(tmp_path / "idx")
    adapters.ngt_create_poincare(path, DIM, 10, 40)
    index = ngtpy.Index(path, log_disabled=True)
    index.batch_insert(fam.points, num_threads=1)
    dist, ids = brute_force(fam.points, fam.held_out, N)
    for i, q in enumerate(fam.held_out):
        found = index.linear_search(q, N)  # NGT's distance to every stored point, sorted
        got = dict(found)
        ref = dist[i]
        ngt = np.array([got[j] for j in ids[i]], dtype=np.float64)
        np.testing.assert_allclose(ngt, ref, rtol=1e-6, atol=1e-6)
        assert {j for j, _ in found[:K]} == set(ids[i, :K].tolist())
    index.close()


def test_anng_adapter(tree):
    a = adapters.NgtANNG()
    a.build(tree.points, 1)
    tmp = a.tmp
    try:
        a.set_threads(1)
        _, truth = brute_force(tree.points, tree.held_out, K)
        found = a.search(tree.held_out, K, (0.2, 0))
        assert found.dtype == np.int64 and found.shape == (NQ, K)
        assert recall(found, truth) >= 0.99
        rows = np.arange(0, N, 25)
        assert np.mean(a.search(tree.points[rows], K, (0.2, 0))[:, 0] == rows) >= 0.95
        diag = a.diagnostics(tree.points, tree.held_out, K, {})
        assert diag["prf_distance_type"] == "Poincare"
        assert diag["reported_distance_max_rel_err"] < 1e-6
        assert diag["missing_results"] == 0
    finally:
        a.release()
    assert not os.path.exists(tmp)


def test_onng_adapter(tree):
    a = adapters.NgtONNG()
    a.build(tree.points, 1)
    try:
        assert adapters.ngt_distance_type(a.path) == "Poincare"
        _, truth = brute_force(tree.points, tree.held_out, K)
        assert recall(a.search(tree.held_out, K, (0.2, 0)), truth) >= 0.99
    finally:
        a.release()
