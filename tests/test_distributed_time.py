"""Time-partitioned ShardedIndex on a local Ray cluster: shards open as time moves on, the pruned
newest-first fused search equals the single exact fused top-k while reading fewer shards,
drop_before retires whole shards, and saved time shards are checked against their ranges."""

from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("ray")

from ray_helpers import access_total  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index.distributed import ShardedIndex  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")

WEEK = timedelta(days=7)


def _single_and_sharded(base, t, kind="flat", span=timedelta(days=30)):
    meta = {"g": np.arange(len(base)) % 3}
    single = pi.PoincareFlatIndex(16)
    single.add(base, t=t, metadata=meta)
    sharded = ShardedIndex(16, kind=kind, partition="time", time_span=span)
    for lo in range(0, len(base), 1000):  # in three writes: shards open as time moves on
        sharded.add(base[lo : lo + 1000], t=t[lo : lo + 1000], metadata={"g": meta["g"][lo : lo + 1000]})
    return single, sharded


def test_time_shards_open_as_rows_arrive_and_the_pruned_fused_search_is_exact(stamped_data):
    base, queries, t = stamped_data  # 3,000 hours: 2026-01-01 .. 2026-05-05
    single, sharded = _single_and_sharded(base, t)
    spans = sharded.shard_info()
    assert sharded.shards == 5 and [s["number"] for s in spans] == [0, 1, 2, 3, 4]
    assert all(s["start"] <= s["t_min"] <= s["t_max"] < s["end"] for s in spans)
    assert sharded.ntotal == len(base)
    D, I = sharded.search(queries, 10)  # no time: every shard, merged exactly
    D1, I1 = single.search(queries, 10)
    np.testing.assert_array_equal(I, I1)
    np.testing.assert_array_equal(D, D1)
    at = t[-1] + np.timedelta64(1, "h")
    for kw in (
        dict(decay=pi.HalfLife(hours=24 * 7), time_coef=1.0),
        dict(decay=pi.HalfLife(hours=24 * 3), time_coef=2.0, depth_bias=0.3),
        dict(decay=pi.Exponential(0.5), depth_bias=-2.0, filters={"g": {"$ne": 1}}),
        dict(decay=pi.Ebbinghaus(24.0, boost_per_access=0.5)),
    ):
        r = sharded.search_scored(queries, 10, at_time=at, **kw)
        r1 = single.search_scored(queries, 10, at_time=at, **kw)
        np.testing.assert_array_equal(r.ids, r1.ids)
        np.testing.assert_allclose(r.scores, r1.scores, rtol=1e-12)
        assert r.shards_total == 5 and r.answered and not r.missing
        assert np.all(r.reads_per_query >= 1) and np.all(r.reads_per_query <= 5)
        got = {int(n) for n in np.unique(r.sources[r.ids >= 0])}
        assert got <= set(r.answered)
    # recency that dominates: the old shards cannot reach the k-th score and are not read
    strong = sharded.search_scored(queries, 10, at_time=at, decay=pi.HalfLife(hours=24), time_coef=3.0)
    exact = single.search_scored(queries, 10, at_time=at, decay=pi.HalfLife(hours=24), time_coef=3.0)
    np.testing.assert_array_equal(strong.ids, exact.ids)
    assert strong.shards_read < 5 and strong.reads_per_query.mean() < 2.0
    # no bound exists (depth_bias > 1, time_coef < 0): every shard is read, still exact
    for kw in (dict(depth_bias=1.5), dict(time_coef=-1.0)):
        r = sharded.search_scored(queries, 5, at_time=at, decay=pi.HalfLife(hours=24), **kw)
        r1 = single.search_scored(queries, 5, at_time=at, decay=pi.HalfLife(hours=24), **kw)
        np.testing.assert_array_equal(r.ids, r1.ids)
        assert r.shards_read == 5 and np.all(r.reads_per_query == 5)
    unpruned = sharded.search_scored(
        queries, 10, at_time=at, decay=pi.HalfLife(hours=24), time_coef=3.0, prune=False
    )
    np.testing.assert_array_equal(unpruned.ids, exact.ids)
    assert unpruned.shards_read == 5
    # at_time before the data: every point is in the future; still the single index's answer
    early = np.datetime64("2025-06-01")
    r = sharded.search_scored(queries, 5, at_time=early, decay=pi.HalfLife(hours=24))
    np.testing.assert_array_equal(
        r.ids, single.search_scored(queries, 5, at_time=early, decay=pi.HalfLife(hours=24)).ids
    )
    sharded.close()


def test_touch_counts_what_the_merge_returned_and_ebbinghaus_bounds_follow(stamped_data):
    base, queries, t = stamped_data
    single, sharded = _single_and_sharded(base, t)
    at = t[-1]
    kw = dict(decay=pi.Ebbinghaus(24.0, boost_per_access=2.0), at_time=at)
    for _ in range(3):  # the touched old points decay slower: the bound must follow them
        for i in range(10):  # one query a call: a batch's own touches land after it here
            r = sharded.search_scored(queries[i : i + 1], 5, touch=True, **kw)
            r1 = single.search_scored(queries[i : i + 1], 5, touch=True, **kw)
            np.testing.assert_array_equal(r.ids, r1.ids)
    # each returned point counted once per time it was returned, on its own shard only
    assert sum(access_total(a) for a in sharded.actors) == 3 * 10 * 5
    sharded.close()


@pytest.mark.slow
def test_writes_reads_and_drop_before_across_time_shards(stamped_data, tmp_path):
    base, queries, t = stamped_data
    s = ShardedIndex(16, kind="flat", partition="time", time_span=WEEK)
    s.add_with_ids(base[:500], np.arange(500), t=t[:500])  # 500 hours: 4 weeks (1970-based weeks)
    n_shards = s.shards
    with pytest.raises(ValueError, match="already in the index"):  # id 3 lives in an older shard
        s.add_with_ids(base[500:502], [600, 3], t=t[1000:1002])
    assert s.shards == n_shards and s.ntotal == 500  # nothing added, no shard opened
    np.testing.assert_array_equal(s.reconstruct_batch([499, 0]), base[[499, 0]].astype(np.float32))
    with pytest.raises(KeyError, match="600"):
        s.reconstruct(600)
    assert s.remove_ids([0, 1, 499, 12345]) == 3 and s.ntotal == 497
    cutoff = np.datetime64("2026-01-12")
    info = s.shard_info()
    gone = [i for i in info if i["end"] <= cutoff]
    expect = int(np.sum(t[2:499] < max(i["end"] for i in gone)))
    assert s.drop_before(cutoff) == expect and s.shards == n_shards - len(gone)
    assert s.ntotal == 497 - expect
    _, I = s.search(base[:20], 5)
    assert np.all(t[I[I >= 0]] >= min(i["start"] for i in s.shard_info()))
    s.save(tmp_path / "tx")
    names = sorted(p.name for p in (tmp_path / "tx").iterdir())
    listed = json.loads((tmp_path / "tx" / "sharded.json").read_text())["shards"]
    assert [e["number"] for e in listed] == [i["number"] for i in s.shard_info()]
    assert names == sorted([e["dir"] for e in listed] + ["sharded.json"])  # dropped shards' files went
    at = t[499]
    before = s.search_scored(queries, 5, decay=pi.HalfLife(hours=48), at_time=at)
    s.close()
    back = ShardedIndex.load(tmp_path / "tx")
    assert back.partition == "time" and back.shards == n_shards - len(gone)
    after = back.search_scored(queries, 5, decay=pi.HalfLife(hours=48), at_time=at)
    np.testing.assert_array_equal(after.ids, before.ids)
    back.add(base[600:601], t=t[600])  # a new week opens a new shard numbered after the others
    assert back.shard_info()[-1]["number"] == max(i["number"] for i in back.shard_info())
    back.close()
    # a time shard moved into another range is refused
    manifest = tmp_path / "tx" / "sharded.json"
    doc = json.loads(manifest.read_text())
    first, second = (tmp_path / "tx" / e["dir"] for e in doc["shards"][:2])
    shutil.move(first, tmp_path / "tx" / "tmp")
    shutil.move(second, first)
    shutil.move(tmp_path / "tx" / "tmp", second)
    with pytest.raises(pi.IndexFormatError, match="outside its range"):
        ShardedIndex.load(tmp_path / "tx")


def test_time_partition_arguments_are_checked():
    with pytest.raises(ValueError, match="shards= applies"):
        ShardedIndex(16, partition="time", shards=4)
    with pytest.raises(ValueError, match="apply to partition='time'"):
        ShardedIndex(16, time_span=WEEK)
    with pytest.raises(TypeError, match="time_span"):
        ShardedIndex(16, partition="time", time_span=7)
    with pytest.raises(ValueError, match="at least one second"):
        ShardedIndex(16, partition="time", time_span=timedelta(0))
    s = ShardedIndex(16, shards=1, kind="flat")
    with pytest.raises(ValueError, match="drop_before needs partition='time'"):
        s.drop_before(np.datetime64("2026-01-01"))
    with pytest.raises(ValueError, match="max_restarts"):
        ShardedIndex(16, actor_options={"max_restarts": 3})
    with pytest.raises(TypeError, match="decay"):  # options fail before any remote call
        s.search_scored(np.zeros((1, 16)), 1, decay="half-life")
    for flag in ("touch", "allow_partial", "prune"):
        with pytest.raises(TypeError, match=flag):
            s.search_scored(np.zeros((1, 16)), 1, **{flag: "yes"})
    with pytest.raises(TypeError, match="allow_partial"):
        s.search(np.zeros((1, 16)), 1, allow_partial=1)
    with pytest.raises(ValueError, match="outside"):  # a query outside the ball, checked here
        s.search_scored(np.full((1, 16), 0.9), 1)
    s.close()


def test_a_time_partition_opens_at_most_max_shards(tmp_path):
    # A one-second span over rows a second apart once started an actor per row.
    second = timedelta(seconds=1)
    x = pi.expmap0(np.random.default_rng(5).normal(size=(70, 16)) * 0.3).astype(np.float32)
    t = np.datetime64("2026-01-01T00:00:00", "us") + np.arange(70).astype("timedelta64[s]")
    s = ShardedIndex(16, kind="flat", partition="time", time_span=second)
    assert s.max_shards == 64
    with pytest.raises(ValueError, match=r"would open 65 new time shards .* more than max_shards=64"):
        s.add(x[:65], t=t[:65])
    assert s.shards == 0 and s.ntotal == 0 and s.actors == []  # refused before any actor started
    s.close()
    s = ShardedIndex(16, kind="flat", partition="time", time_span=second, max_shards=3)
    s.add(x[:2], t=t[:2])
    too_many = r"would open 2 new time shards .* beside the 2 open: more than max_shards=3"
    with pytest.raises(ValueError, match=too_many):
        s.add(x[2:4], t=t[2:4])
    assert s.shards == 2 and s.ntotal == 2
    s.add(x[2:5], t=t[[0, 1, 2]])  # rows for open shards need none, and one more fits
    assert s.shards == 3 and s.ntotal == 5
    s.save(tmp_path / "t")
    s.close()
    back = ShardedIndex.load(tmp_path / "t")  # the bound is saved with the index
    assert back.max_shards == 3 and back.shards == 3
    with pytest.raises(ValueError, match="max_shards=3"):
        back.add(x[5:6], t=t[5:6])
    back.close()
    with pytest.raises(ValueError, match=r"max_shards must be in \[1, 4096\]"):
        ShardedIndex.load(tmp_path / "t", max_shards=0)


def test_shard_counts_are_checked_before_any_actor_starts():
    for bad, error in ((0, ValueError), (4097, ValueError), (2.0, TypeError), (True, TypeError)):
        with pytest.raises(error, match="max_shards"):
            ShardedIndex(16, partition="time", max_shards=bad)
        with pytest.raises(error, match="shards"):
            ShardedIndex(16, shards=bad)  # more than a saved manifest may list, too
    with pytest.raises(ValueError, match="max_shards apply to partition='time'"):
        ShardedIndex(16, shards=2, max_shards=4)
