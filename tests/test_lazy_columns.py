"""Columns that hold only defaults (ids equal to slots, open windows, zero access counts) are not
allocated, and every read gives what an allocated column would."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

import poincare_index as pi
from poincare_index import _core
from poincare_index.decay import Ebbinghaus, Product, ValidityWindow

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
LAZY = ("ids", "column_ids", "column_valid_from", "column_valid_until", "column_access")


def _points(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(n, dim))
    return (d / np.linalg.norm(d, axis=1, keepdims=True) * rng.uniform(0, 0.9, (n, 1))).astype(np.float32)


def _allocate_all(index) -> None:
    """The same index with every lazy column allocated (holding the same defaults)."""
    store = index._columns
    for col in store._lazy():
        col.allocate(store._t.shape[0])


@pytest.mark.parametrize("kind", [pi.PoincareIndex, pi.PoincareFlatIndex])
def test_an_index_of_defaults_allocates_none_of_them(kind, tmp_path):
    n = 1500
    x = _points(n, 8, seed=1)
    index = kind(8)
    index.add(x, t=NOW)
    usage = index.memory_usage()
    assert all(usage[name] == 0 for name in LAZY), {name: usage[name] for name in LAZY}
    assert usage["column_t"] == n * 8
    table = index.columns
    assert table.column("id").to_pylist() == list(range(n))
    assert table.column("valid_from").null_count == n and table.column("valid_until").null_count == n
    assert table.column("access_count").to_pylist() == [0] * n
    index.save(tmp_path / "ix")
    loaded = type(index).load(tmp_path / "ix")
    assert all(loaded.memory_usage()[name] == 0 for name in LAZY)
    assert loaded.columns.equals(table)


@pytest.mark.parametrize("kind", [pi.PoincareIndex, pi.PoincareFlatIndex])
def test_a_value_other_than_the_default_allocates_its_column_only(kind, tmp_path):
    x = _points(300, 8, seed=2)
    index = kind(8)
    index.add(x[:200], t=NOW)
    index.add(x[200:], t=NOW, valid_until=NOW + timedelta(days=1))
    usage = index.memory_usage()
    assert usage["column_valid_until"] > 0
    assert usage["column_valid_from"] == usage["column_ids"] == usage["column_access"] == usage["ids"] == 0
    until = index.columns.column("valid_until")
    assert until.null_count == 200 and until[250].as_py() == NOW + timedelta(days=1)
    index.add_with_ids(_points(5, 8, seed=3), np.arange(1000, 1005), t=NOW)
    usage = index.memory_usage()
    assert usage["column_ids"] > 0 and usage["ids"] > 0
    assert index.columns.column("id").to_pylist() == list(range(300)) + list(range(1000, 1005))
    np.testing.assert_array_equal(
        index.reconstruct_batch([0, 299, 1004]), np.vstack([x[0], x[299], _points(5, 8, 3)[4]])
    )
    index.save(tmp_path / "ix")
    loaded = type(index).load(tmp_path / "ix")
    assert loaded.columns.equals(index.columns)


@pytest.mark.parametrize("kind", [pi.PoincareIndex, pi.PoincareFlatIndex])
def test_fused_search_reads_unallocated_columns_as_their_defaults(kind):
    x = _points(400, 8, seed=4)
    q = _points(20, 8, seed=5)
    policy = Product(ValidityWindow(), Ebbinghaus(stability_hours=5.0, boost_per_access=0.5))
    stamps = [NOW - timedelta(hours=i % 50) for i in range(400)]
    lazy, full = kind(8), kind(8)
    for index in (lazy, full):
        index.add(x, t=stamps)
    _allocate_all(full)
    assert lazy.memory_usage()["column_access"] == 0 and full.memory_usage()["column_access"] > 0
    a = lazy.search_scored(q, 10, decay=policy, at_time=NOW, ef=64)
    b = full.search_scored(q, 10, decay=policy, at_time=NOW, ef=64)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.scores, b.scores)


def test_touch_allocates_the_access_counts_and_counts_every_hit():
    x = _points(200, 8, seed=6)
    index = pi.PoincareFlatIndex(8)
    index.add(x, t=NOW)
    assert index.memory_usage()["column_access"] == 0
    res = index.search_scored(x[:3], 5, decay=Ebbinghaus(stability_hours=1.0), at_time=NOW, touch=True)
    counts = np.asarray(index.columns.column("access_count").to_pylist())
    expected = np.bincount(res.ids.ravel(), minlength=200)
    np.testing.assert_array_equal(counts, expected)


def test_the_core_refuses_a_touch_into_a_column_that_does_not_exist():
    index = pi.PoincareFlatIndex(4)
    index.add(_points(10, 4, seed=7), t=NOW)
    with index._columns.buffers() as (t, valid_from, valid_until, access):
        assert valid_from is None and valid_until is None and access is None
        terms = np.array([[1.0, 5.0, 0.0]])  # anything: the touch is what is refused
        with pytest.raises(ValueError, match="touch needs the access_count column"):
            spec = _core.ScoreSpec(terms, 0, 1e-6, 0, 0.0, 1.0)
            columns = (t, valid_from, valid_until, access)
            index._core.search_scored(
                _points(1, 4, seed=8), 3, 16, spec, columns, None, None, None, True, None, 0
            )


def test_core_decay_evaluation_reads_null_columns_as_defaults():
    rng = np.random.default_rng(9)
    n = 50
    t = rng.integers(0, 10**12, n).astype(np.int64)
    rows = np.arange(n, dtype=np.int64)
    terms = np.array([[3.0, 0.5, 0.0], [2.0, 5.0, 0.2]])  # validity window, Ebbinghaus
    open_from = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    open_until = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    zeros = np.zeros(n, dtype=np.uint32)
    explicit = _core.decay_log_weights_of_rows(
        _core.ScoreSpec(terms, 10**12, 1e-6, 0, 0.0, 1.0), (t, open_from, open_until, zeros), rows
    )
    null = _core.decay_log_weights_of_rows(
        _core.ScoreSpec(terms, 10**12, 1e-6, 0, 0.0, 1.0), (t, None, None, None), rows
    )
    np.testing.assert_array_equal(explicit, null)
