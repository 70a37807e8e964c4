"""The recall target (poincare_index/recall.py): searches that ask for a recall reach it against
the exact answer, the width follows the target, the table is kept by save and refreshed when
the index has grown, and bad targets are refused."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from family import member
from reference import brute_force, fused_brute_force

import poincare_index as pi
from poincare_index import IndexFormatError
from poincare_index._durable import json_checksum
from poincare_index.decay import HalfLife
from poincare_index.recall import (
    FOUND_QUERIES_PER_KIND,
    QUERIES_PER_KIND,
    QUERY_KINDS,
    RecallTable,
    _near_queries,
)

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


def _held_out(name: str, n: int, dim: int, queries: int, seed: int = 0):
    x = member(name, n + queries, dim, seed=seed)
    return x[:n], x[n:]


def _recall_at(found: np.ndarray, truth_d: np.ndarray, got_d: np.ndarray, k: int) -> float:
    """Mean recall@k by distance (a result counts when no farther than the exact k-th)."""
    kth = truth_d[:, k - 1 : k] * (1 + 1e-5) + 1e-6
    return float(np.mean(np.minimum(((got_d[:, :k] <= kth) & (found[:, :k] >= 0)).sum(axis=1), k) / k))


def _stamps(rng: np.random.Generator, n: int) -> np.ndarray:
    """n times spread over the 120 days before NOW."""
    days = rng.uniform(0, 120, n)
    return np.datetime64(NOW.replace(tzinfo=None), "us") - (days * 86400e6).astype("timedelta64[us]")


@pytest.fixture(scope="module")
def gauss():
    base, queries = _held_out("gauss-s0.15", 6000, 32, 200, seed=1)
    index = pi.PoincareIndex(32, num_threads=1)
    index.add(base, t=NOW)
    truth_d, _ = brute_force(base, queries, 10)
    return index, base, queries, truth_d


@pytest.mark.parametrize("target", [0.9, 0.95, 0.99])
def test_a_search_asked_for_a_recall_reaches_it_on_held_out_queries(gauss, target):
    index, _, queries, truth_d = gauss
    D, I = index.search(queries, 10, recall=target)
    assert _recall_at(I, truth_d, D.astype(np.float64), 10) >= target - 0.02


def test_the_width_follows_the_target_and_the_default_is_the_index_target(gauss):
    index, _, queries, _ = gauss
    widths = [index._beam(10, None, r).ef for r in (0.5, 0.9, 0.95, 0.99)]
    assert widths == sorted(widths) and widths[0] < widths[-1]
    assert index.recall_target == 0.95 and index.ef_search is None
    D, I = index.search(queries, 10)
    D95, I95 = index.search(queries, 10, recall=0.95)
    assert np.array_equal(I, I95)
    index.recall_target = 0.99
    try:
        assert index._beam(10, None, None) == index._beam(10, None, 0.99)
    finally:
        index.recall_target = 0.95


def test_expected_recall_reads_the_table(gauss):
    index, *_ = gauss
    table = index.recall_table
    assert isinstance(table, RecallTable) and table.points == index.ntotal
    assert table.recall.shape == (len(QUERY_KINDS), len(table.ks), len(table.efs))
    for target in (0.9, 0.99):
        assert index.expected_recall(10, recall=target) >= target
    assert index.expected_recall(10, ef=table.efs[0]) == table.expected(10, table.efs[0])
    assert index.expected_recall(1, ef=1024) >= index.expected_recall(1, ef=10)


def test_an_index_too_small_to_walk_scans_exactly():
    x = member("uniform_ball", 300, 8)
    index = pi.PoincareIndex(8)
    index.add(x, t=NOW)
    assert index.recall_table is None
    D, I = index.search(x[:20] * 0.9, 5)
    truth_d, truth_i = brute_force(x, x[:20] * 0.9, 5)
    assert np.array_equal(I, truth_i)
    assert index.expected_recall(5) == 1.0


def test_a_fixed_width_still_works_as_before(gauss):
    index, _, queries, _ = gauss
    D, I = index.search(queries[:5], 10, ef=16)
    index.ef_search = 16
    try:
        D2, I2 = index.search(queries[:5], 10)
        assert np.array_equal(I, I2)
        assert index.expected_recall(10) == index.recall_table.expected(10, 16)
    finally:
        index.ef_search = None


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.01, math.nan, math.inf])
def test_a_recall_outside_the_unit_interval_is_refused(gauss, bad):
    index, _, queries, _ = gauss
    with pytest.raises(ValueError, match="recall"):
        index.search(queries[:1], 10, recall=bad)
    with pytest.raises(ValueError, match="recall"):
        index.search_scored(queries[:1], 10, recall=bad)
    with pytest.raises(ValueError, match="recall_target"):
        index.recall_target = bad
    with pytest.raises(ValueError, match="recall_target"):
        pi.PoincareIndex(4, recall_target=bad)


def test_ef_with_recall_and_wrong_types_are_refused(gauss):
    index, _, queries, _ = gauss
    with pytest.raises(ValueError, match="not both"):
        index.search(queries[:1], 10, ef=32, recall=0.9)
    with pytest.raises(ValueError, match="not both"):
        index.search_scored(queries[:1], 10, ef=32, recall=0.9)
    with pytest.raises(ValueError, match="not both"):
        pi.SearchParameters(ef=32, recall=0.9)
    with pytest.raises(TypeError, match="recall"):
        index.search(queries[:1], 10, recall="high")
    with pytest.raises(TypeError, match="recall"):
        index.search(queries[:1], 10, recall=True)
    flat = pi.PoincareFlatIndex(4)
    with pytest.raises(ValueError, match="recall"):
        flat.search(np.zeros((1, 4)), 1, recall=2.0)


def test_search_parameters_carry_the_target(gauss):
    index, _, queries, _ = gauss
    D, I = index.search(queries[:10], 10, params=pi.SearchParameters(recall=0.99))
    D2, I2 = index.search(queries[:10], 10, recall=0.99)
    assert np.array_equal(I, I2)


def test_the_table_is_saved_and_loaded_without_measuring_again(gauss, tmp_path):
    index, _, queries, _ = gauss
    table = index.recall_table
    index.recall_target = 0.9
    try:
        index.save(tmp_path / "i")
    finally:
        index.recall_target = 0.95
    loaded = pi.PoincareIndex.load(tmp_path / "i")
    assert loaded.recall_target == 0.9 and loaded.ef_search is None
    assert loaded._calibration is not None  # read from the file, not measured
    got = loaded._calibration.table
    assert got.ks == table.ks and got.efs == table.efs and got.first_part == table.first_part
    np.testing.assert_allclose(got.recall, table.recall, atol=1e-6)
    assert np.array_equal(loaded.search(queries, 10)[1], index.search(queries, 10, recall=0.9)[1])


def _rewrite_manifest(path, change):
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["checksum"]
    change(manifest)
    manifest["checksum"] = json_checksum(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m["params"]["recall_table"]["recall"][0][0].__setitem__(3, 1.5),
        lambda m: m["params"]["recall_table"].__setitem__("efs", [10, 10]),
        lambda m: m["params"]["recall_table"].__setitem__("kinds", ["stored"]),
        lambda m: m["params"]["recall_table"]["recall"].pop(),
        lambda m: m["params"]["recall_table"]["error"][1][1].__setitem__(0, None),
        lambda m: m["params"]["recall_table"].__setitem__("ks", [3, 10]),
        lambda m: m["params"]["recall_table"].pop("error"),
        lambda m: m["params"]["recall_table"].__setitem__("queries", [[500]]),
        lambda m: m["params"]["recall_table"]["queries"][0].__setitem__(0, 0),
        lambda m: m["params"]["recall_table"]["queries"][2].__setitem__(1, 2.5),
        lambda m: m["params"]["recall_table"].__setitem__("walk", "sideways"),
        lambda m: m["params"].__setitem__("recall_changes", -1),
        lambda m: m["params"].__setitem__("recall_target", 0),
        lambda m: m["params"].__setitem__("recall_table", [1, 2]),
    ],
)
def test_a_crafted_recall_table_is_refused(gauss, tmp_path, change):
    index, *_ = gauss
    assert index.recall_table is not None  # measured, so saved
    index.save(tmp_path / "i")
    _rewrite_manifest(tmp_path / "i", change)
    with pytest.raises(IndexFormatError, match="recall"):
        pi.PoincareIndex.load(tmp_path / "i")


def test_a_manifest_from_before_the_target_keeps_its_fixed_width(gauss, tmp_path):
    index, *_ = gauss
    index.save(tmp_path / "i")

    def as_before(m):
        for key in ("recall_target", "recall_table", "recall_changes"):
            m["params"].pop(key, None)
        m["params"]["ef_search"] = 64

    _rewrite_manifest(tmp_path / "i", as_before)
    loaded = pi.PoincareIndex.load(tmp_path / "i")
    assert loaded.ef_search == 64 and loaded.recall_target == 0.95 and loaded._calibration is None


@pytest.mark.parametrize("name, dim, sparse", [("hierarchy", 16, True), ("uniform_ball", 64, False)])
def test_the_table_walks_each_list_s_first_part_where_it_finds_as_much(name, dim, sparse):
    """On a hierarchy the heuristic's links alone find what the whole lists find, and the table
    walks them (one beam, the refill skipped); on a uniform ball they lose stored points, and
    the table walks the whole lists. Either way the target holds against a brute force."""
    base, queries = _held_out(name, 4000, dim, 100, seed=13)
    index = pi.PoincareIndex(dim, num_threads=1)
    index.add(base, t=NOW)
    table = index.recall_table
    assert table.first_part is sparse
    assert index._beam(10, None, 0.95).first_part is sparse
    truth_d, _ = brute_force(base, queries, 10)
    D, I = index.search(queries, 10)
    assert _recall_at(I, truth_d, D.astype(np.float64), 10) >= 0.93
    _, I_self = index.search(base[:500], 1)
    assert np.mean(I_self[:, 0] == np.arange(500)) >= 0.99


def test_a_table_saved_before_the_query_counts_reads_them_as_one_sample(gauss, tmp_path):
    index, *_ = gauss
    index.save(tmp_path / "i")

    def as_before(m):
        m["params"]["recall_table"].pop("queries")
        m["params"]["recall_table"].pop("walk")

    _rewrite_manifest(tmp_path / "i", as_before)
    table = pi.PoincareIndex.load(tmp_path / "i").recall_table
    assert np.all(table.queries == QUERIES_PER_KIND) and not table.first_part


def test_the_found_kinds_first_answers_are_measured_on_the_larger_sample(gauss):
    index, *_ = gauss
    table = index.recall_table
    assert table.queries.shape == (len(QUERY_KINDS), len(table.ks))
    assert np.all(table.queries[:2, 0] == FOUND_QUERIES_PER_KIND)
    assert np.all(table.queries[:, 1:] == QUERIES_PER_KIND) and table.queries[2, 0] == QUERIES_PER_KIND


def test_the_table_s_stored_rate_is_what_a_search_of_stored_points_finds():
    """The stored kind's recall@1 (500 queries, the answer known without a scan, the wide
    widths walked on a subsample once every query was found) against 2,000 stored points
    searched directly, on a graph that misses many (the second order off: docs/graph_walk.md):
    within three standard errors of the two at every width."""
    base = member("uniform_ball", 3000, 64, seed=12)
    index = pi.PoincareIndex(64, num_threads=1)
    index._set_graph_switches(second_order=False)
    index.add(base, t=NOW)
    table = index.recall_table
    rows = np.random.default_rng(12).choice(len(base), 2000, replace=False)
    missed = 0
    for col, ef in list(enumerate(table.efs))[::3]:
        _, I = index.search(base[rows], 1, ef=ef)
        direct, measured = float(np.mean(I[:, 0] == rows)), table.recall[0, 0, col]
        p = min(max(direct, measured), 1 - 1e-3)
        assert abs(direct - measured) <= 3 * math.sqrt(p * (1 - p) * (1 / 500 + 1 / 3000)), (
            ef,
            direct,
            measured,
        )
        missed += direct < 0.99
    assert missed >= 3  # widths that miss were compared, not only the trivial ones


def _table(first_found: float, found: int) -> RecallTable:
    """A table where every mean is 1 but the found kinds' recall@1, ``first_found`` of ``found``."""
    efs = (10, 20, 40)
    recall = np.ones((len(QUERY_KINDS), 2, len(efs)))
    recall[:2, 0, :] = first_found
    error = np.zeros_like(recall)
    queries = np.array([[found, 200], [found, 200], [200, 200]])
    return RecallTable(10_000, (1, 10), efs, recall, error, queries)


def test_a_first_answer_is_trusted_only_as_far_as_its_sample_proves():
    # Wilson's bound, one standard error: 500 hits in 500 prove 0.998 (what target 0.99 asks of
    # stored points), 200 in 200 only 0.995; 499 in 500 prove 0.995 (enough for 0.95).
    assert _table(1.0, 500).ef_for(0.99, 10) == 10
    assert _table(1.0, 200).ef_for(0.99, 10) is None
    assert _table(499 / 500, 500).ef_for(0.99, 10) is None
    assert _table(499 / 500, 500).ef_for(0.95, 10) == 10
    assert _table(199 / 200, 200).ef_for(0.95, 10) is None  # one standard error of the spread said yes
    np.testing.assert_allclose(_table(1.0, 500).meets()[0, 0], 1 - (1 - 500 / 501) / 0.2)


@pytest.mark.parametrize("name, dim", [("gauss-s0.15", 32), ("uniform_radius", 16), ("tree-b4", 8)])
def test_a_near_query_s_known_nearest_is_its_exact_nearest(name, dim):
    """The near kind's first answer is taken as known, not scanned: check it against a float64
    brute force, duplicates and points at the ball's edge included."""
    x = member(name, 3000, dim, seed=8)
    x = np.concatenate([x, x[:40]])  # 40 points with a duplicate
    rows = np.arange(0, 600, 2)
    _, nn = brute_force(x, x[rows], 2)
    nearest = x[np.where(nn[:, 0] == rows, nn[:, 1], nn[:, 0])]
    near, near_d = _near_queries(
        x[rows].astype(np.float64), nearest.astype(np.float64), np.random.default_rng(9), 1.0
    )
    truth_d, _ = brute_force(x, near.astype(np.float32), 1)
    np.testing.assert_allclose(near_d, truth_d[:, 0], rtol=1e-7, atol=1e-9)
    assert np.all(near_d[rows >= 40] > 0) and np.all(near_d[rows < 40] == 0)


def test_a_small_add_keeps_the_table_and_growth_refreshes_it():
    x = member("gauss-s0.3", 9000, 16, seed=3)
    index = pi.PoincareIndex(16, num_threads=1)
    index.add(x[:4000], t=NOW)
    first = index.recall_table
    assert first.points == 4000
    index.add(x[4000:4100], t=NOW)
    index.search(x[:1], 10)
    assert index.recall_table is first
    index.add(x[4100:], t=NOW)
    index.search(x[:1], 10)
    assert index.recall_table.points == 9000
    index.remove_ids(np.arange(0, 9000, 2))
    assert index.recall_table.points == 4500
    before = index.recall_table
    index.reset()
    assert index.recall_table is None and before is not None


def test_the_table_is_the_same_for_the_same_build():
    x = member("clusters", 3000, 16, seed=4)
    tables = []
    for _ in range(2):
        index = pi.PoincareIndex(16, num_threads=1)
        index.add(x, t=NOW)
        tables.append(index.calibrate())
    assert np.array_equal(tables[0].recall, tables[1].recall, equal_nan=True)


def test_the_fused_search_reaches_the_target_against_the_exact_fused_ranking():
    """With a fast decay, the fused top 10 lies far down the distance order: the walk's reach
    widens the search until the table says that depth is covered."""
    rng = np.random.default_rng(5)
    base, queries = _held_out("uniform_ball", 8000, 32, 100, seed=5)
    t = _stamps(rng, len(base))
    index = pi.PoincareIndex(32, num_threads=1)
    index.add(base, t=t)
    index.time_scan_rows = 0  # no exact pass over recent points: the walk alone must find them
    policy = HalfLife(hours=30 * 24)
    at = NOW + timedelta(days=1)
    ages = (np.datetime64(at.replace(tzinfo=None), "us") - t).astype(np.float64) / 86400e6
    logw = -math.log(2) * ages / 30
    truth_s, truth_i = fused_brute_force(base, queries, 10, logw)
    got = index.search_scored(queries, 10, decay=policy, at_time=at, recall=0.95)
    hits = np.mean([len(set(g) & set(e)) / 10 for g, e in zip(got.ids.tolist(), truth_i.tolist())])
    assert hits >= 0.93
    first = index._beam(10, None, 0.95).ef
    plain = index.search_scored(queries, 10, decay=policy, at_time=at, ef=first)
    plain_hits = np.mean([len(set(g) & set(e)) / 10 for g, e in zip(plain.ids.tolist(), truth_i.tolist())])
    assert plain_hits < 0.9 < 0.93 <= hits  # the widening is what reached it


def test_a_touch_with_widening_counts_each_result_once():
    base = member("gauss-s0.3", 4000, 16, seed=6)
    rng = np.random.default_rng(6)
    t = _stamps(rng, len(base))
    index = pi.PoincareIndex(16, num_threads=1)
    index.add(base, t=t)
    r = index.search_scored(base[:3], 5, decay=HalfLife(hours=14 * 24), at_time=NOW, touch=True)
    counts = index.columns.column("access_count").to_numpy()
    found = r.ids[r.ids >= 0]
    assert counts[found].tolist() == [1] * len(found)
    assert int(counts.sum()) == len(found)


def test_memory_search_takes_a_recall():
    memory = pi.Memory()
    memory.add_many(["alpha beta", "gamma delta", "epsilon"], t=[NOW] * 3)
    assert [r.text for r in memory.search("alpha", k=1, recall=0.99, at_time=NOW)] == ["alpha beta"]
    with pytest.raises(ValueError, match="not both"):
        memory.search("alpha", k=1, recall=0.9, ef=10, at_time=NOW)
    with pytest.raises(ValueError, match="recall"):
        memory.search("alpha", k=1, recall=1.5, at_time=NOW)
