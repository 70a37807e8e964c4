"""Shared fixtures: seeded data sets and a float64 numpy brute force independent of the core."""

from __future__ import annotations

import os

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


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A local Ray cluster of 2 CPUs for the module (the Ray test modules use it)."""
    import ray

    # Ray puts the driver's working directory on its workers' import path: started from a
    # source checkout, they would import the unbuilt package there instead of the installed one.
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("ray-driver"))
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        yield
    finally:
        ray.shutdown()
        os.chdir(cwd)


@pytest.fixture(scope="module")
def stamped_data(tree_data):
    """3,000 points and 100 queries of the 16-d hierarchy, stamped one hour apart from 2026-01-01."""
    base, queries = tree_data
    t = np.datetime64("2026-01-01", "us") + (np.arange(len(base)) * 3_600_000_000).astype("timedelta64[us]")
    return base, queries, t
