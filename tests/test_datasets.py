"""The generated hierarchy really is one: relatives are nearest, deep nodes near the boundary."""

from __future__ import annotations

import numpy as np
import pytest

import poincare_index as pi
from poincare_index.datasets import hierarchy


def test_hierarchy_neighbours_are_relatives():
    data = hierarchy(1500, 16, seed=3)
    p = data.points.astype(np.float64)
    d = pi.distance(p[:, None, :], p[None, :, :])
    np.fill_diagonal(d, np.inf)
    nn = d.argmin(axis=1)
    idx = np.arange(len(p))
    relative = (data.parent[nn] == idx) | (nn == data.parent) | (data.parent[nn] == data.parent)
    assert relative.mean() >= 0.95
    norms = np.linalg.norm(p, axis=1)
    assert norms.max() <= 0.9999 and norms.max() > 0.999
    # deeper levels lie further out
    by_level = [norms[data.level == lv].mean() for lv in range(1, int(data.level.max()) + 1)]
    assert all(a < b for a, b in zip(by_level, by_level[1:]))


def test_hierarchy_is_deterministic_and_validates():
    a, b = hierarchy(300, 8, seed=1), hierarchy(300, 8, seed=1)
    np.testing.assert_array_equal(a.points, b.points)
    base, queries = a.split(30, seed=2)
    assert base.shape == (270, 8) and queries.shape == (30, 8)
    with pytest.raises(ValueError):
        hierarchy(0, 8)
    with pytest.raises(ValueError):
        hierarchy(10, 8, max_norm=1.0)
    with pytest.raises(ValueError):
        a.split(301)
