"""Shard faults on a local Ray cluster: a killed or SIGKILLed shard is restored from its last save
plus the logged writes since (no acknowledged add, removal or access count lost), restoring under
concurrent calls, bounded waits, and partial results only when asked for."""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("ray")

import ray  # noqa: E402
from ray_helpers import access_total, kill_and_wait  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index.distributed import ShardedIndex, ShardUnavailableError, shard_of  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")


def _mirror_writes(s, single, base, t):
    """The same writes on the sharded index and on a single flat index."""
    for index in (s, single):
        index.add_with_ids(base[:200], np.arange(200), t=t[:200])
    if isinstance(s, ShardedIndex) and s._checkpoint is not None:
        s.save()
    for index in (s, single):  # acknowledged after the save: only the driver's log holds them
        index.add_with_ids(base[200:300], np.arange(200, 300), t=t[200:300])
        assert index.remove_ids([5, 250, 7]) == 3


def test_a_killed_shard_is_restored_from_its_save_and_the_log(stamped_data, tmp_path):
    base, queries, t = stamped_data
    s = ShardedIndex(16, shards=2, kind="flat", checkpoint_path=tmp_path / "ck")
    single = pi.PoincareFlatIndex(16)
    _mirror_writes(s, single, base, t)
    kw = dict(decay=pi.HalfLife(hours=24), at_time=t[300])
    s.search_scored(queries[:10], 3, touch=True, **kw)
    touched = [access_total(a) for a in s.actors]
    dead = s.actors[1]
    kill_and_wait(dead)
    r = s.search_scored(queries, 10, **kw)  # restores shard 1, then answers
    np.testing.assert_array_equal(r.ids, single.search_scored(queries, 10, **kw).ids)
    assert s.actors[1] is not dead and s.ntotal == 297
    assert [access_total(a) for a in s.actors] == touched  # the touches were replayed too
    # SIGKILL of the shard's process, then a write to it: restored, and the write is applied once
    pid = ray.get(s.actors[0].describe.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    on_zero = [i for i in range(1000, 1100) if shard_of(np.array([i]), 2)[0] == 0][:3]
    s.add_with_ids(base[300:303], on_zero, t=t[300:303])
    single.add_with_ids(base[300:303], on_zero, t=t[300:303])
    D, I = s.search(queries, 10)
    D1, I1 = single.search(queries, 10)
    np.testing.assert_array_equal(I, I1)
    np.testing.assert_array_equal(D, D1)
    # a save trims the log: what it holds is not replayed again
    s.save()
    assert all(not slot.log for slot in s._set.slots)
    kill_and_wait(s.actors[0])
    assert s.ntotal == 300
    s.close()


def test_a_never_saved_shard_is_rebuilt_from_the_log_under_concurrent_calls(stamped_data, tmp_path):
    base, queries, t = stamped_data
    s = ShardedIndex(16, shards=2, kind="hnsw", checkpoint_path=tmp_path / "ck", seed=3)
    s.add(base[:400], t=t[:400])
    before = s.search(queries, 5)
    kill_and_wait(s.actors[0])
    out, errors = [], []

    def ask() -> None:
        try:
            out.append(s.search(queries, 5))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and len(out) == 3
    for D, I in out:  # the same graph: the log replays the adds in their order
        np.testing.assert_array_equal(I, before[1])
        np.testing.assert_array_equal(D, before[0])
    s.close()


def test_without_a_checkpoint_a_dead_shard_raises_or_is_left_out_when_asked(stamped_data):
    base, queries, t = stamped_data
    s = ShardedIndex(16, shards=3, kind="flat")
    s.add(base[:300], t=t[:300])
    kill_and_wait(s.actors[2])
    with pytest.raises(ShardUnavailableError, match="shard 2 is unavailable.*checkpoint_path"):
        s.search(queries, 5)
    D, I = s.search(queries, 5, allow_partial=True)
    result = s.search(queries, 5, allow_partial=True)
    assert result.answered == (0, 1) and result.missing == (2,) and result.partial
    alive = np.arange(300)[shard_of(np.arange(300), 3) != 2]
    ref = pi.PoincareFlatIndex(16)
    ref.add_with_ids(base[alive], alive, t=t[alive])
    np.testing.assert_array_equal(I, ref.search(queries, 5)[1])
    r = s.search_scored(queries, 5, decay=pi.HalfLife(hours=10), at_time=t[300], allow_partial=True)
    assert r.missing == (2,) and r.answered == (0, 1)
    np.testing.assert_array_equal(
        r.ids, ref.search_scored(queries, 5, decay=pi.HalfLife(hours=10), at_time=t[300]).ids
    )
    with pytest.raises(ShardUnavailableError, match="shard 2"):
        s.search_scored(queries, 5)
    s.close()


def test_a_large_batch_travels_inline_in_chunks_or_is_stored_once(stamped_data, monkeypatch):
    from poincare_index.distributed import sharded as sharded_module

    base = stamped_data[0]
    big = np.ascontiguousarray(base[:2000])  # 2,000 16-d queries: 128 KB
    limit = sharded_module._INLINE_LIMIT
    assert limit <= big.nbytes <= sharded_module._SPLIT_LIMIT
    sent = sharded_module._handed_over("search", (big, 5, None, big[:10]))
    assert sent[0] == "search" and sent[2] == ((0, 2),)  # chunks for argument 0, sent after
    question, chunks = sent[1], sent[3:]
    assert question[0] is None and question[1:3] == (5, None) and question[3].shape == (10, 16)
    assert len(chunks) == 2 and all(isinstance(c, np.ndarray) and c.nbytes < limit for c in chunks)
    np.testing.assert_array_equal(np.concatenate(chunks), big)
    small = sharded_module._handed_over("search", (big[:10], 5, None, None))
    assert len(small) == 2 and small[1][0].shape == (10, 16)  # nothing to join
    monkeypatch.setattr(sharded_module, "_SPLIT_LIMIT", 64 * 1024)  # beyond it: stored once
    method, question, joined, stored = sharded_module._handed_over("search", (big, 5, None, big[:10]))
    assert method == "search" and joined == ((0, 1),) and isinstance(stored, ray.ObjectRef)
    assert question[:3] == (None, 5, None) and isinstance(question[3], np.ndarray)  # small: inline
    np.testing.assert_array_equal(ray.get(stored), big)


@pytest.mark.parametrize("split_limit", [None, 64 * 1024], ids=["inline-chunks", "stored-once"])
def test_a_large_batch_survives_a_restoration(stamped_data, tmp_path, monkeypatch, split_limit):
    from poincare_index.distributed import sharded as sharded_module

    if split_limit is not None:
        monkeypatch.setattr(sharded_module, "_SPLIT_LIMIT", split_limit)
    base, _, t = stamped_data
    big = np.ascontiguousarray(base[:2000])
    s = ShardedIndex(16, shards=2, kind="flat", checkpoint_path=tmp_path / "ck")
    single = pi.PoincareFlatIndex(16)
    for index in (s, single):
        index.add(base, t=t)
    s.save()
    D1, I1 = single.search(big, 5)
    D, I = s.search(big, 5)
    np.testing.assert_array_equal(I, I1)
    np.testing.assert_array_equal(D, D1)
    kill_and_wait(s.actors[0])
    D, I = s.search(big, 5)  # the restored shard is asked the same question again
    np.testing.assert_array_equal(I, I1)
    np.testing.assert_array_equal(D, D1)
    s.close()


@pytest.mark.slow
def test_a_shard_that_does_not_answer_is_named_within_the_bound(stamped_data):
    base, queries, _ = stamped_data
    s = ShardedIndex(16, shards=2, kind="flat", call_timeout=1.0)
    s.add(base[:100])
    busy = s.actors[1].__ray_call__.remote(lambda self: __import__("time").sleep(4))  # holds the actor
    with pytest.raises(ShardUnavailableError, match="shard 1 did not answer search within 1 s"):
        s.search(queries[:2], 3)
    partial = s.search(queries[:2], 3, allow_partial=True)
    assert partial.missing == (1,)
    ray.get(busy)
    assert s.search(queries[:2], 3).missing == ()
    with pytest.raises(ValueError, match="call_timeout"):
        ShardedIndex(16, shards=1, call_timeout=0)
    with pytest.raises(ValueError, match="no checkpoint_path"):
        s.save()
    s.close()


@pytest.mark.slow
def test_the_low_latency_path_answers_as_the_plain_one_and_falls_back(stamped_data, tmp_path):
    base, queries, t = stamped_data
    fast = ShardedIndex(16, shards=2, kind="flat", low_latency=True, checkpoint_path=tmp_path / "ck")
    plain = ShardedIndex(16, shards=2, kind="flat")
    for s in (fast, plain):
        s.add(base[:500], t=t[:500])
    kw = dict(decay=pi.HalfLife(hours=24), at_time=t[500])
    for _ in range(2):  # the second call reuses the compiled graph
        np.testing.assert_array_equal(fast.search(queries, 5)[1], plain.search(queries, 5)[1])
        np.testing.assert_array_equal(
            fast.search_scored(queries, 5, **kw).ids, plain.search_scored(queries, 5, **kw).ids
        )
    assert fast._fanout.failures == 0 and fast._fanout._graph is not None
    with pytest.raises(ValueError, match="unknown column"):  # the shard's own error; the graph stays
        fast.search(queries, 5, filters={"nope": 1})
    assert fast._fanout.failures == 0
    kill_and_wait(fast.actors[0])  # the compiled path fails; the plain one restores the shard
    np.testing.assert_array_equal(fast.search(queries, 5)[1], plain.search(queries, 5)[1])
    np.testing.assert_array_equal(fast.search(queries, 5)[1], plain.search(queries, 5)[1])  # recompiled
    assert fast._fanout.failures == 1 and fast._fanout._graph is not None
    with pytest.raises(TypeError, match="low_latency"):
        ShardedIndex(16, shards=1, low_latency="yes")
    fast.close()
    plain.close()
