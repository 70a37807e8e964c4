"""The repair as one unit (HnswGraph::repair_after_add / repair_after_removal): each step is a
switch, and these tests show what each buys on data where it matters (docs/graph_walk.md)."""

from __future__ import annotations

import numpy as np

import poincare_index as pi
from poincare_index.datasets import boundary_tree, hierarchy


def _boundary_points() -> np.ndarray:
    """30 % of the points near the origin, the rest at norm 0.9999 in random directions: far
    from everything, pruned from every full list."""
    rng = np.random.default_rng(3)
    d = rng.normal(size=(3000, 10))
    r = np.where(rng.random(3000) < 0.3, rng.uniform(0, 0.5, 3000), 0.9999)
    return (d / np.linalg.norm(d, axis=1, keepdims=True) * r[:, None]).astype(np.float32)


def _missed_by_themselves(index: pi.PoincareIndex, x: np.ndarray, ids: np.ndarray) -> int:
    _, I = index.search(x, 10, ef=10)
    return int(np.sum(~np.any(I == ids[:, None], axis=1)))


def _build(x: np.ndarray, **switches: bool) -> pi.PoincareIndex:
    # M = 16, the graph the repair's steps were measured on (docs/graph_walk.md): with the
    # default's more links per list there are fewer misses for each step to repair.
    index = pi.PoincareIndex(x.shape[1], M=16, seed=0, num_threads=1)
    index._set_graph_switches(**switches)
    index.add(x)
    return index


def test_ways_in_find_the_points_a_search_for_themselves_missed() -> None:
    """Without links from where a search for a point's own coordinates ends, 4 of these 3,000
    points are missed at ef 10 by a graph that re-selects every full list a link is added back
    to; with them, none (and 187 with neither ways in nor the second order nor the reachability
    rounds). Where the refill yields to links added back (the default) this graph misses none of
    them either way."""
    x = _boundary_points()
    ids = np.arange(len(x))
    assert _missed_by_themselves(_build(x, ways_in=False, refill_yields=False), x, ids) > 0
    assert _missed_by_themselves(_build(x, refill_yields=False), x, ids) == 0
    assert _missed_by_themselves(_build(x), x, ids) == 0
    bare = _build(x, ways_in=False, second_order=False, reachability=False, refill_yields=False)
    assert _missed_by_themselves(bare, x, ids) > 50


def test_ways_in_after_removals() -> None:
    """Removing 10 % of a boundary tree three times: without probing the remaining points after
    each release, 3-4 of them are missed by a search for themselves; with it, none."""
    pts = boundary_tree(8_000, 16, seed=1).points
    x = pts[np.random.default_rng(1).permutation(len(pts))].astype(np.float32)
    ids = np.arange(len(x), dtype=np.int64)
    missed = {}
    for ways_in in (True, False):
        index = _build(x, ways_in=ways_in)
        live = np.ones(len(x), bool)
        rng = np.random.default_rng(3)
        total = 0
        for _ in range(2):
            gone = rng.choice(np.flatnonzero(live), len(x) // 10, replace=False)
            index.remove_ids(ids[gone])
            live[gone] = False
            index.add_with_ids(x[gone[:1]], ids[gone[:1]])  # an add releases the removed points
            live[gone[:1]] = True
            assert index.check_integrity()["unreachable"] == 0
            total += _missed_by_themselves(index, x[live], ids[live])
        missed[ways_in] = total
    assert missed[True] == 0
    assert missed[False] > 0


def test_ways_down_link_every_node_from_its_depth_or_above() -> None:
    """A hash half of a tree loses about half of every node's ancestors: without the ways down 77
    of 14,914 nodes have no in-link from a node at their depth or shallower, with them 10. (Its
    recall gain is gone since lists hold links in two orders: recall@10 at ef 16 is 1.000 with
    and without it on this half; kept until measured on the sharded runs it was built for.)"""
    base, _ = hierarchy(30_000, 64, seed=5).split(300, seed=5)
    half = base[np.random.default_rng(5).random(len(base)) < 0.5]
    without = _build(half, ways_down=False).check_integrity()["without_way_down"]
    with_them = _build(half).check_integrity()["without_way_down"]
    assert with_them <= len(half) // 1000
    assert without >= 4 * with_them
