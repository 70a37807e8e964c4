"""The sharded index's merge of its shards' top-k lists (``_core.merge_topk``) against a plain
Python reference, and the shard's reassembly of a batch sent in chunks (no Ray needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poincare_index import _core
from poincare_index.distributed._shard import Shard

INF = float("inf")


def reference_merge(parts: list[tuple[np.ndarray, np.ndarray]], nq: int, k: int):
    """Per row: every entry of every part, sorted by (distance with NaN as +inf, padding last,
    id), the first k, padded with (+inf, -1)."""
    D = np.full((nq, k), np.inf, np.float32)
    I = np.full((nq, k), -1, np.int64)
    for q in range(nq):
        row = []
        for d, ids in parts:
            for dist, i in zip(d[q].tolist(), ids[q].tolist()):
                dist = INF if math.isnan(dist) else dist
                row.append((dist, i == -1 and dist == INF, i))
        row.sort()
        for j, (dist, _, i) in enumerate(row[:k]):
            D[q, j], I[q, j] = dist, i
    return D, I


@st.composite
def shard_answers(draw):
    nq = draw(st.integers(1, 4))
    k = draw(st.integers(1, 6))
    n_parts = draw(st.integers(0, 4))
    # Few distinct distances, so ties are common; ids distinct across parts, negative ones too.
    ids_drawn = st.integers(-50, 50).filter(lambda i: i != -1)
    pool = draw(st.lists(ids_drawn, min_size=30, max_size=30, unique=True))
    parts = []
    for p in range(n_parts):
        width = draw(st.integers(0, 5))
        d = np.array(draw(st.lists(st.sampled_from([0.0, 0.5, 0.5, 1.25, INF, math.nan]),
                                   min_size=nq * width, max_size=nq * width)),
                     np.float32).reshape(nq, width)  # fmt: skip
        ids = np.array(pool[p * 5 : p * 5 + width] * nq, np.int64).reshape(nq, width)
        flags = draw(st.lists(st.booleans(), min_size=nq * width, max_size=nq * width))
        padding = np.isinf(d) & np.array(flags, bool).reshape(nq, width)
        ids[padding] = -1
        parts.append((d, ids.astype(np.int32) if draw(st.booleans()) else ids))
    return parts, nq, k


@settings(max_examples=300, deadline=None)
@given(shard_answers())
def test_merge_equals_the_reference(case):
    parts, nq, k = case
    D, I = _core.merge_topk([p[0] for p in parts], [p[1] for p in parts], nq, k)
    D_ref, I_ref = reference_merge(parts, nq, k)
    assert D.dtype == np.float32 and I.dtype == np.int64 and D.shape == I.shape == (nq, k)
    np.testing.assert_array_equal(D, D_ref)
    np.testing.assert_array_equal(I, I_ref)


def test_merge_refuses_parts_of_the_wrong_shape():
    d = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match="part 1"):
        _core.merge_topk([d, d], [np.zeros((3, 2), np.int64), np.zeros((3, 3), np.int64)], 3, 2)
    with pytest.raises(ValueError, match="part 0"):
        _core.merge_topk([d], [np.zeros((3, 2), np.int64)], 4, 2)
    with pytest.raises(ValueError, match="one id array per distance array"):
        _core.merge_topk([d], [], 3, 2)


def test_a_shard_joins_a_batch_sent_in_chunks(tree_data):
    base, queries = tree_data
    shard = Shard("flat", 16, {"curvature": 1.0, "num_threads": 1})
    shard.add(base[:500], np.arange(500, dtype=np.int64), (None, None, None), None)
    chunks = np.array_split(queries[:20], 3)
    D, I = shard.query("search", (None, 5, None, None), ((0, 3),), *chunks)
    D1, I1 = shard.search(np.ascontiguousarray(queries[:20]), 5, None, None)
    np.testing.assert_array_equal(I, I1)
    np.testing.assert_array_equal(D, D1)
    D, I = shard.query("search", (queries[:20], 5, None, None))
    np.testing.assert_array_equal(I, I1)
    with pytest.raises(ValueError, match="query runs search or search_scored, not 'save_as'"):
        shard.query("save_as", ("/tmp", 1))
    with pytest.raises(ValueError, match="query got 3 chunks for"):
        shard.query("search", (None, 5, None, None), ((0, 2),), *chunks)
