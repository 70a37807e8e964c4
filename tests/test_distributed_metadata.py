"""ShardedIndex metadata types follow the local index's rule: integers and floats under one key
widen to float64 (each shard storing the one type), any other mix is refused naming the key
and both types before any shard gets a row; a save with a column widened on some shards only
loads."""

from __future__ import annotations

import os

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("ray")

import ray  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index.distributed import ShardedIndex, shard_of  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")

X = pi.expmap0(np.random.default_rng(3).normal(size=(40, 4)) * 0.3).astype(np.float32)


def _ids_on(shard: int, n: int, start: int = 0) -> np.ndarray:
    """The first n ids from ``start`` on that a 2-shard hash index sends to ``shard``."""
    ids = np.arange(start, start + 200, dtype=np.int64)
    return ids[shard_of(ids, 2) == shard][:n]


def _shard_types(index: ShardedIndex, key: str) -> list[str | None]:
    schemas = [ray.get(a.describe.remote())["metadata_schema"] for a in index.actors]
    return [str(s.field(key).type) if key in s.names else None for s in schemas]


def test_ints_after_floats_widen_on_every_shard_and_other_mixes_are_refused():
    s = ShardedIndex(4, shards=2, kind="flat")
    single = pi.PoincareFlatIndex(4)
    a, b = _ids_on(0, 2), _ids_on(1, 2)
    for index in (s, single):
        index.add_with_ids(X[:2], a, metadata={"x": [1.5, 2.5]})  # shard 0 only
        index.add_with_ids(X[2:4], b, metadata={"x": [3, 4]})  # shard 1: no 'x' yet, gets ints
    assert _shard_types(s, "x") == ["double", "double"]
    with pytest.raises(ValueError, match=r"'x' holds double values, the new rows give string"):
        s.add_with_ids(X[4:6], _ids_on(0, 2, 100), metadata={"x": ["a", "b"]})
    with pytest.raises(ValueError, match=r"'x' mixes integers and floats.*float64"):
        s.add_with_ids(X[4:5], _ids_on(1, 1, 100), metadata={"x": [2**60]})
    assert s.ntotal == 4
    for filters in ({"x": 3}, {"x": {"$gt": 2}}):
        np.testing.assert_array_equal(
            s.search(X, 4, filters=filters)[1], single.search(X, 4, filters=filters)[1]
        )
    s.close()


def test_floats_after_ints_widen_and_the_saved_index_loads(tmp_path):
    s = ShardedIndex(4, shards=2, kind="flat")
    single = pi.PoincareFlatIndex(4)
    ids = np.concatenate([_ids_on(0, 3), _ids_on(1, 3)])
    late = _ids_on(0, 2, 100)  # the floats reach shard 0 only
    for index in (s, single):
        index.add_with_ids(X[:6], ids, metadata={"n": [1, 2, 3, 4, 5, 6], "tag": ["p"] * 6})
        index.add_with_ids(X[6:8], late, metadata={"n": [0.5, 7.5]})
    with pytest.raises(ValueError, match=r"'tag' holds string values, the new rows give int64"):
        s.add_with_ids(X[8:9], _ids_on(1, 1, 100), metadata={"tag": [1]})
    assert _shard_types(s, "n")[0] == "double"
    filters = {"n": {"$lt": 3}}
    want = single.search(X, 8, filters=filters)[1]
    np.testing.assert_array_equal(s.search(X, 8, filters=filters)[1], want)
    s.save(tmp_path / "ix")
    s.close()
    back = ShardedIndex.load(tmp_path / "ix")
    np.testing.assert_array_equal(back.search(X, 8, filters=filters)[1], want)
    back.add_with_ids(X[8:9], _ids_on(1, 1, 100), metadata={"n": [2]})  # shard 1 widens now
    assert _shard_types(back, "n") == ["double", "double"]
    back.close()
