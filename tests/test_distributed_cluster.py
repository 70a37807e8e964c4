"""ShardedIndex on a two-node Ray cluster simulated on one machine (ray.cluster_utils.Cluster):
shards spread over both nodes, and when a node goes away its shards are restored on the node
that is left, with every acknowledged write."""

from __future__ import annotations

import os

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("ray")

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index.distributed import ShardedIndex  # noqa: E402


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    cwd = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("ray-driver"))  # see local_ray in conftest.py
    # Fast failure detection: a removed node is declared dead within about a second.
    config = {
        "health_check_period_ms": 200,
        "health_check_failure_threshold": 3,
        "health_check_timeout_ms": 200,
    }
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "_system_config": config},
    )
    worker = cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        cluster.wait_for_nodes()
        yield cluster, worker
    finally:
        ray.shutdown()
        cluster.shutdown()
        os.chdir(cwd)


@pytest.mark.slow
def test_shards_spread_over_nodes_and_survive_losing_one(two_nodes, stamped_data, tmp_path):
    cluster, worker = two_nodes
    base, queries, t = stamped_data
    options = {"num_cpus": 0.25, "scheduling_strategy": "SPREAD"}
    s = ShardedIndex(16, shards=4, kind="flat", actor_options=options, checkpoint_path=tmp_path / "ck",
                     restore_timeout=120)  # fmt: skip
    nodes = [ray.get(a.describe.remote())["node_id"] for a in s.actors]
    assert len(set(nodes)) == 2  # placement: both nodes hold shards
    single = pi.PoincareFlatIndex(16)
    for index in (s, single):
        index.add(base[:600], t=t[:600])
    s.save()
    for index in (s, single):  # acknowledged after the save: in the driver's log only
        index.add(base[600:900], t=t[600:900])
    lost = [i for i, n in enumerate(nodes) if n == worker.node_id]
    assert lost
    cluster.remove_node(worker)
    D, I = s.search(queries, 10)  # the worker's shards come back on the head node
    D1, I1 = single.search(queries, 10)
    np.testing.assert_array_equal(I, I1)
    np.testing.assert_array_equal(D, D1)
    now = {ray.get(a.describe.remote())["node_id"] for a in s.actors}
    assert now == {cluster.head_node.node_id} and s.ntotal == 900
    s.close()
