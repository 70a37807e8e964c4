"""Shared fixtures: seeded data sets and a float64 numpy brute force independent of the core."""

from __future__ import annotations

import numpy as np
import pytest

from poincare_index.datasets import hierarchy


@pytest.fixture(scope="session")
def tree_data():
    """3,000 points of a generated hierarchy in 16-d (norms up to 0.9999) and 100 held-out queries."""
    data = hierarchy(3100, 16, seed=7)
    return data.split(100, seed=7)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
