"""The FAISS calls beyond add/search: d, train, reset, range_search, reconstruct_n, merge_from,
search(params=), index_factory; each against a float64 brute force or the index's own answers."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import brute_force, range_brute_force

import poincare_index as pi
from poincare_index.datasets import boundary_tree

INDEXES = [pi.PoincareIndex, pi.PoincareFlatIndex]


def _radius_for(base, queries, hits):
    """A radius between the hits-th and (hits+1)-th exact distance of the first query."""
    d, _ = brute_force(base, queries[:1], hits + 1)
    return float((d[0, hits - 1] + d[0, hits]) / 2)


@pytest.mark.parametrize("cls", INDEXES)
def test_d_is_trained_and_train(cls):
    index = cls(6)
    assert index.d == 6 and index.is_trained is True
    x = np.full((3, 6), 0.1, dtype=np.float32)
    index.train(x)
    assert index.ntotal == 0
    with pytest.raises(ValueError, match="NaN|Inf"):
        index.train(np.full((2, 6), np.nan))
    with pytest.raises(ValueError, match="outside|ball"):
        index.train(np.full((2, 6), 0.9))
    with pytest.raises(ValueError, match="dimension"):
        index.train(np.zeros((2, 5)))
    with pytest.raises(TypeError):
        index.train("points")


def test_flat_range_search_is_exact_on_boundary_heavy_data():
    data = boundary_tree(4000, 12, seed=3)
    base, queries = data.split(40, seed=3)
    index = pi.PoincareFlatIndex(12)
    index.add(base)
    for radius in (_radius_for(base, queries, 1), _radius_for(base, queries, 10), 2.0, 6.0):
        lims, D, I = index.range_search(queries, radius)
        assert lims.dtype == np.uint64 and D.dtype == np.float32 and I.dtype == np.int64
        assert lims.shape == (len(queries) + 1,) and lims[0] == 0 and lims[-1] == len(I) == len(D)
        for qi, (ref_d, ref_rows) in enumerate(range_brute_force(base, queries, radius)):
            got_i = I[lims[qi] : lims[qi + 1]]
            got_d = D[lims[qi] : lims[qi + 1]]
            np.testing.assert_array_equal(np.sort(got_i), np.sort(ref_rows))
            np.testing.assert_allclose(got_d, ref_d, rtol=2e-6, atol=1e-6)
            assert np.all(np.diff(got_d) >= 0)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(0, 300),
    scale=st.sampled_from([0.05, 0.5, 2.0, 6.0]),
    radius=st.floats(1e-3, 20.0),
    removed=st.integers(0, 30),
)
def test_flat_range_search_matches_the_brute_force(seed, n, scale, radius, removed):
    rng = np.random.default_rng(seed)
    base = pi.project(pi.expmap0(rng.normal(size=(n, 5)) * scale / np.sqrt(5))).astype(np.float32)
    queries = pi.project(pi.expmap0(rng.normal(size=(4, 5)) * scale / np.sqrt(5))).astype(np.float32)
    index = pi.PoincareFlatIndex(5)
    index.add(base)
    gone = rng.choice(n, size=min(removed, n), replace=False) if n else np.zeros(0, np.int64)
    index.remove_ids(gone)
    lims, _, I = index.range_search(queries, radius)
    for qi, (ref_d, ref_rows) in enumerate(range_brute_force(base, queries, radius)):
        keep = ~np.isin(ref_rows, gone)
        # Points within float32 rounding of the radius may fall either side.
        sure = ref_rows[keep][np.abs(ref_d[keep] - radius) > 1e-5 * max(1.0, radius)]
        got = set(I[lims[qi] : lims[qi + 1]].tolist())
        assert set(sure.tolist()) <= got <= set(ref_rows[keep].tolist()) | _near(base, queries[qi], radius)


def _near(base, q, radius):
    d, rows = range_brute_force(base, q[None], radius * (1 + 1e-5) + 1e-6)[0]
    return set(rows.tolist())


def test_hnsw_range_search_finds_what_the_exact_one_does(tree_data):
    base, queries = tree_data
    index = pi.PoincareIndex(16, seed=1)
    index.add(base)
    flat = pi.PoincareFlatIndex(16)
    flat.add(base)
    for hits in (1, 10, 100, 400):  # 400: past the first rounds' k, the search widens
        radius = _radius_for(base, queries, hits)
        lims, D, I = index.range_search(queries, radius)
        elims, _, EI = flat.range_search(queries, radius)
        found = total = 0
        for qi in range(len(queries)):
            got = I[lims[qi] : lims[qi + 1]]
            exact = set(EI[elims[qi] : elims[qi + 1]].tolist())
            assert set(got.tolist()) <= exact  # never a point beyond the radius
            assert np.all(D[lims[qi] : lims[qi + 1]] < radius)
            found += len(exact & set(got.tolist()))
            total += len(exact)
        assert found >= 0.95 * total, (hits, found, total)


@pytest.mark.parametrize("cls", INDEXES)
def test_range_search_with_filters_and_bad_radii(cls, tree_data):
    base, queries = tree_data
    index = cls(16)
    index.add(base[:500], metadata={"group": np.arange(500) % 4})
    radius = 4.0
    lims, D, I = index.range_search(queries[:5], radius, params=pi.SearchParameters(filters={"group": 1}))
    for qi, (_, ref_rows) in enumerate(range_brute_force(base[:500], queries[:5], radius)):
        got = I[lims[qi] : lims[qi + 1]]
        assert np.all(got % 4 == 1)
        if cls is pi.PoincareFlatIndex:
            assert set(got.tolist()) == {r for r in ref_rows.tolist() if r % 4 == 1}
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="radius"):
            index.range_search(queries[:1], bad)
    with pytest.raises(TypeError):
        index.range_search(queries[:1], "1.0")
    empty = cls(16)
    lims, D, I = empty.range_search(queries[:3], 1.0)
    assert lims.tolist() == [0, 0, 0, 0] and D.shape == (0,) and I.shape == (0,)
    for params in (None, pi.SearchParameters(filters={"group": 1})):
        lims, D, I = index.range_search(queries[:0], 1.0, params=params)
        assert lims.tolist() == [0] and D.shape == (0,) and I.shape == (0,)


@pytest.mark.parametrize("cls", INDEXES)
def test_range_search_reports_only_distances_below_the_radius(cls, tree_data):
    base, queries = tree_data
    index = cls(16)
    index.add(base[:800])
    D, _ = index.search(queries[:20], 12)
    for radius in D[:, 10].astype(np.float64):  # radii equal to reported distances
        lims, got, _ = index.range_search(queries[:20], float(radius))
        assert np.all(got < radius)
        lims2, got2, _ = index.range_search(queries[:20], float(radius), params=pi.SearchParameters(
            filters=np.ones(800, dtype=bool)))  # fmt: skip
        if cls is pi.PoincareFlatIndex:  # the exact scan and the widening path agree
            np.testing.assert_array_equal(lims, lims2)


@pytest.mark.parametrize("cls", INDEXES)
def test_reset_empties_and_numbers_from_zero_again(cls, tree_data):
    base, queries = tree_data
    index = cls(16, curvature=1.0)
    index.add(base[:300], metadata={"tag": ["a"] * 300})
    index.remove_ids([5, 6])
    index.reset()
    assert index.ntotal == 0 and index.columns.num_rows == 0
    D, I = index.search(queries[:2], 3)
    assert np.all(I == -1)
    index.add(base[300:400])
    assert index.ntotal == 100
    np.testing.assert_array_equal(index.columns.column("id").to_numpy(), np.arange(100))
    _, I = index.search(base[300:301], 1)
    assert I[0, 0] == 0
    if cls is pi.PoincareIndex:
        assert index.M == pi.index.DEFAULT_M and index.check_integrity()["unreachable"] == 0


@pytest.mark.parametrize("cls", INDEXES)
def test_reconstruct_n(cls, tree_data):
    base, _ = tree_data
    index = cls(16)
    index.add(base[:50])
    np.testing.assert_array_equal(index.reconstruct_n(10, 5), base[10:15].astype(np.float32))
    assert index.reconstruct_n(0, 0).shape == (0, 16)
    with pytest.raises(KeyError, match="50"):
        index.reconstruct_n(45, 10)
    with pytest.raises(ValueError):
        index.reconstruct_n(0, -1)
    with pytest.raises(TypeError):
        index.reconstruct_n(0, 2.5)


@pytest.mark.parametrize("into", INDEXES)
@pytest.mark.parametrize("source", INDEXES)
def test_merge_from_moves_points_with_their_columns(into, source, tree_data):
    base, queries = tree_data
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    a = into(16)
    a.add(base[:200], t=np.datetime64("2025-01-01", "us"), metadata={"src": ["a"] * 200})
    b = source(16)
    b.add_with_ids(
        base[200:400], np.arange(1000, 1200), t=t0,
        valid_until=np.datetime64("2027-01-01", "us"), metadata={"lang": ["en"] * 200},
    )  # fmt: skip
    b.remove_ids([1003])
    b.search_scored(base[210:211], 1, touch=True)  # id 1010 gets an access
    a.merge_from(b)
    assert a.ntotal == 399 and b.ntotal == 0
    assert 1003 not in a and 1010 in a
    np.testing.assert_array_equal(a.reconstruct(1150), base[350].astype(np.float32))
    live = np.asarray(a._core.live_slots(), dtype=bool)
    rows = {r["id"]: r for r, keep in zip(a.columns.to_pylist(), live) if keep}
    assert rows[1010]["access_count"] == 1 and rows[1011]["access_count"] == 0
    assert rows[1150]["lang"] == "en" and rows[1150]["src"] is None and rows[5]["src"] == "a"
    assert rows[5]["lang"] is None and rows[5]["valid_until"] is None
    assert rows[1150]["t"] == t0 and rows[1150]["valid_until"] == datetime(2027, 1, 1, tzinfo=timezone.utc)
    flat = pi.PoincareFlatIndex(16)
    flat.add_with_ids(base[:400], np.r_[np.arange(200), np.arange(1000, 1200)])
    flat.remove_ids([1003])
    _, want = flat.search(queries, 5)
    _, got = a.search(queries, 5, ef=200)
    assert np.mean([len(set(g) & set(w)) / 5 for g, w in zip(got.tolist(), want.tolist())]) >= 0.95


def test_merge_from_refuses_before_changing_anything(tree_data):
    base, _ = tree_data
    a = pi.PoincareIndex(16)
    a.add(base[:20])
    b = pi.PoincareFlatIndex(16)
    b.add_with_ids(base[20:30], np.arange(15, 25))  # 15..19 are in a already
    with pytest.raises(ValueError, match="15"):
        a.merge_from(b)
    assert a.ntotal == 20 and b.ntotal == 10
    a.merge_from(b, add_id=100)
    assert sorted(a.columns.column("id").to_pylist()) == list(range(20)) + list(range(115, 125))
    with pytest.raises(ValueError, match="dimension"):
        a.merge_from(pi.PoincareFlatIndex(8))
    with pytest.raises(ValueError, match="curvature"):
        a.merge_from(pi.PoincareFlatIndex(16, curvature=2.0))
    with pytest.raises(ValueError, match="itself"):
        a.merge_from(a)
    with pytest.raises(TypeError):
        a.merge_from(base)


@pytest.mark.parametrize("cls", INDEXES)
def test_search_params_equal_the_keyword_arguments(cls, tree_data):
    base, queries = tree_data
    index = cls(16)
    index.add(base[:1000], metadata={"g": np.arange(1000) % 3})
    D1, I1 = index.search(queries, 5, ef=32, filters={"g": 2})
    D2, I2 = index.search(queries, 5, params=pi.SearchParameters(ef=32, filters={"g": 2}))
    np.testing.assert_array_equal(I1, I2)
    np.testing.assert_array_equal(D1, D2)
    with pytest.raises(TypeError, match="not both"):
        index.search(queries, 5, ef=32, params=pi.SearchParameters(ef=16))
    with pytest.raises(TypeError, match="SearchParameters"):
        index.search(queries, 5, params={"ef": 16})
    with pytest.raises(ValueError):
        pi.SearchParameters(ef=0)


def test_index_factory():
    index = pi.index_factory(8, "HNSW24,Curvature=0.5,efSearch=80,efConstruction=100")
    assert isinstance(index, pi.PoincareIndex)
    assert (index.M, index.curvature, index.ef_search, index.ef_construction) == (24, 0.5, 80, 100)
    assert pi.index_factory(8, "HNSW").M == 32
    flat = pi.index_factory(8, "Flat, Curvature=2", num_threads=1)
    assert isinstance(flat, pi.PoincareFlatIndex) and flat.curvature == 2.0 and flat.num_threads == 1
    for bad, match in [
        ("IVF100,Flat", "unknown index kind"),
        ("HNSW32,PQ8", "unknown option"),
        ("HNSW32,Curvature=abc", "Curvature must be a float"),
        ("Flat,efSearch=10", "applies to HNSW"),
        ("HNSW1", "M must be"),
    ]:
        with pytest.raises(ValueError, match=match):
            pi.index_factory(8, bad)
    with pytest.raises(TypeError):
        pi.index_factory(8, None)


@pytest.mark.parametrize("cls", INDEXES)
def test_reset_while_other_threads_search(cls, tree_data):
    import threading

    base, queries = tree_data
    index = cls(16)
    index.add(base[:500])
    errors, stop = [], threading.Event()

    def searcher():
        while not stop.is_set():
            try:
                r = index.search_scored(
                    queries[:4], 5, decay=pi.HalfLife(hours=1), at_time=np.datetime64("2030-01-01")
                )
                assert np.all((r.ids == -1) | (r.ids < 500))
                _, I = index.search(queries[:4], 5)
                assert np.all((I == -1) | (I < 500))
            except Exception as exc:  # noqa: BLE001 - any error fails the test below
                errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(20):
        index.reset()
        index.add(base[:500])
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
