"""memory_usage() and the id map that add() without ids does without."""

from __future__ import annotations

import numpy as np
import pytest

import poincare_index as pi


def _points(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    d = rng.normal(size=(n, dim))
    r = rng.uniform(0.0, 0.95, size=(n, 1))
    return (d / np.linalg.norm(d, axis=1, keepdims=True) * r).astype(np.float32)


@pytest.mark.parametrize("kind", [pi.PoincareIndex, pi.PoincareFlatIndex])
def test_ids_by_slot_need_no_map_until_a_batch_brings_other_ids(kind, tmp_path):
    x = _points(300, 8, seed=1)
    index = kind(8)
    index.add(x[:100])  # ids 0..99 in slots 0..99
    assert index.memory_usage()["id_map"] == 0
    assert index.remove_ids([5, 7, 1000]) == 2
    with pytest.raises(KeyError, match="5"):
        index.reconstruct(5)
    index.add_with_ids(x[100:200], np.arange(1000, 1100))  # slots 100.. hold other ids now
    assert index.memory_usage()["id_map"] > 0
    # Every id, old and new, still maps to its own row; removed ones stay gone.
    np.testing.assert_array_equal(index.reconstruct_batch([0, 99, 1000, 1099]), x[[0, 99, 100, 199]])
    for gone in (5, 7):
        with pytest.raises(KeyError):
            index.reconstruct(gone)
    with pytest.raises(ValueError, match="already in the index"):
        index.add_with_ids(x[200:201], [1050])
    index.add_with_ids(x[200:201], [5])  # a removed id may come back, in another slot
    np.testing.assert_array_equal(index.reconstruct(5), x[200])
    assert index.remove_ids([0, 1000, 5]) == 3 and index.ntotal == 196
    # The same answers after a round trip through a file (the map is rebuilt on load).
    index.save(tmp_path / "ix")
    loaded = type(index).load(tmp_path / "ix")
    np.testing.assert_array_equal(loaded.reconstruct_batch([1, 99, 1099]), x[[1, 99, 199]])
    assert loaded.search(x[150:160], 3)[1].tolist() == index.search(x[150:160], 3)[1].tolist()


def test_a_saved_index_with_ids_by_slot_loads_without_a_map(tmp_path):
    x = _points(200, 8, seed=2)
    index = pi.PoincareIndex(8)
    index.add(x)
    index.remove_ids([3])
    index.save(tmp_path / "ix")
    loaded = pi.PoincareIndex.load(tmp_path / "ix")
    assert loaded.memory_usage()["id_map"] == 0
    assert not loaded._core.contains(3) and loaded._core.contains(4)
    np.testing.assert_array_equal(loaded.reconstruct(199), x[199])


def test_memory_usage_adds_up_to_the_arrays_it_names():
    n, dim = 5000, 16
    index = pi.PoincareIndex(dim, M=8)
    index.add(_points(n, dim, seed=3))
    usage = index.memory_usage()
    # One large add allocates what it needs, not a doubling's slack.
    assert usage["vectors"] == n * dim * 4
    # Lists of 2M links in place, plus the few relocated ones the repair made room in (2M + 4
    # links each; a vector's doubling slack at most).
    in_place = n * (1 + 2 * 8) * 4
    assert in_place < usage["level0_links"] <= in_place + 2 * 0.05 * n * (1 + 2 * 8 + 4) * 4
    assert usage["column_t"] == n * 8
    assert set(usage) >= {"rank_factors", "ids", "flags", "upper_links", "levels", "repair"}
    assert all(isinstance(v, int) and v >= 0 for v in usage.values())
    flat = pi.PoincareFlatIndex(dim)
    flat.add(_points(n, dim, seed=3))
    assert "level0_links" not in flat.memory_usage()
