"""On a local Ray cluster: a closed ShardedIndex, MemoryService, RemoteMemory and RemoteSession
refuse every call (their public surface enumerated as in test_closed.py), a save after close
leaves the earlier save loadable, and a sharded save never replaces a good one with a worse one:
cut off midway, with no shard, racing another save, or meeting another index's shard
directories of the same names."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("ray")

from test_closed import answered_or_refused, assert_refuses_every_call, in_threads  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index import _interrupts  # noqa: E402
from poincare_index._closing import ClosedError  # noqa: E402
from poincare_index.distributed import MemoryService, ShardedIndex, files  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")


def _points(n: int, seed: int) -> np.ndarray:
    return pi.expmap0(np.random.default_rng(seed).normal(size=(n, 16)) * 0.3).astype(np.float32)


def _listing(path) -> dict[str, object]:
    return {p.name: p.read_bytes() if p.is_file() else sorted(q.name for q in p.iterdir())
            for p in sorted(path.iterdir())}  # fmt: skip


def test_a_closed_sharded_index_refuses_every_call_and_its_save_stays(tmp_path):
    x = _points(300, 0)
    s = ShardedIndex(16, shards=2, kind="flat", checkpoint_path=tmp_path / "ck")
    s.add(x)
    s.save()
    before = _listing(tmp_path / "ck")
    s.close()
    # Before: the save deleted the shard folders and wrote a manifest of 0 shards.
    called = assert_refuses_every_call(s, "this index is closed")
    expected = {"save", "add", "search", "search_scored", "ntotal", "shards", "__len__", "drop_before"}
    assert expected <= set(called)
    with pytest.raises(ClosedError, match=r"^ShardedIndex\.save: this index is closed$"):
        files.save(s, str(tmp_path / "ck"))  # the file layer refuses it too
    assert _listing(tmp_path / "ck") == before
    back = ShardedIndex.load(tmp_path / "ck")
    assert back.ntotal == 300
    np.testing.assert_array_equal(back.reconstruct_batch([0, 299]), x[[0, 299]])
    # A save that a load would refuse is refused itself, before anything is written.
    slots, back._set.slots = back._set.slots, []
    with pytest.raises(ValueError, match="cannot be saved, a load would refuse it: 0 shards"):
        back.save(tmp_path / "ck")
    back._set.slots = slots
    assert _listing(tmp_path / "ck") == before
    back.close()


def test_a_search_running_while_the_index_closes_answers_whole_or_refuses(tmp_path):
    x, q = _points(2000, 1), _points(50, 2)
    s = ShardedIndex(16, shards=2, kind="flat", checkpoint_path=tmp_path / "ck")
    s.add(x)
    outcomes: list[str] = []
    running = threading.Event()

    def answer() -> None:
        D, I = s.search(q, 10)
        assert I.shape == (50, 10) and np.all(I >= 0)  # never a partial answer

    def search() -> None:
        for _ in range(400):
            outcomes.append(answered_or_refused(answer))
            running.set()

    join = in_threads([search])
    assert running.wait(60)
    s.close()  # no restoration starts for the shards it ends, though a checkpoint could restore them
    errors = join(120)
    assert not errors, errors[:3]
    assert "answered" in outcomes and "refused" in outcomes


def test_a_closed_memory_service_and_its_handles_refuse_every_call():
    service = MemoryService(None, hosts=1)
    alice, bob = service.namespace("alice"), service.namespace("bob")
    session = alice.session("s1")
    session.add("met on Tuesday")
    assert len(alice) == 1
    bob.close()  # a handle closed on its own; the service and the other handles go on
    called = assert_refuses_every_call(bob, "namespace 'bob' of this MemoryService is closed")
    assert {"add", "search", "get", "decay", "session", "__len__"} <= set(called)
    assert len(alice) == 1 and not alice.closed
    service.close()
    called = assert_refuses_every_call(service, "this MemoryService is closed")
    assert {"namespace", "namespaces", "host_of", "hosts", "actors"} <= set(called)
    called = assert_refuses_every_call(session, "the MemoryService of namespace 'alice' is closed")
    assert "add" in called
    assert_refuses_every_call(alice, "the MemoryService of namespace 'alice' is closed")


def test_two_indexes_saving_to_one_path_keep_their_own_shards(tmp_path):
    # Each shard names its folder by its write count: a second index with as many writes used
    # to take the first one's folders for its own and save nothing of its data.
    a, b = ShardedIndex(16, shards=1, kind="flat"), ShardedIndex(16, shards=1, kind="flat")
    xa, xb = _points(100, 3), _points(100, 4)
    a.add(xa)
    b.add(xb)
    a.save(tmp_path / "p")
    b.save(tmp_path / "p")
    shards = [e["dir"] for e in json.loads((tmp_path / "p" / "sharded.json").read_text())["shards"]]
    assert shards == ["shard-0-2"]  # past a's shard-0-1
    b.save(tmp_path / "p")  # no write since: the same folder, not a new one
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == ["shard-0-2", "sharded.json"]
    back = ShardedIndex.load(tmp_path / "p")
    np.testing.assert_array_equal(back.reconstruct_batch([0, 99]), xb[[0, 99]])
    back.close()

    # Saves of both from two threads at once take turns; the last one stands whole.
    def grow_and_save(index, x) -> None:
        for i in range(3):
            index.add(x[i : i + 1])
            index.save(tmp_path / "p")

    errors = in_threads([lambda: grow_and_save(a, xa), lambda: grow_and_save(b, xb)])(120)
    assert not errors, errors
    back = ShardedIndex.load(tmp_path / "p")
    assert back.ntotal == 103
    assert any(np.array_equal(back.reconstruct(101), x[1]) for x in (xa, xb))  # its second add
    back.close()
    a.close()
    b.close()


@pytest.mark.parametrize("step", ["sharded.save:manifest", "sharded.save:cleanup"])
def test_a_sharded_save_cut_off_leaves_a_loadable_save(tmp_path, step):
    x = _points(200, 5)
    s = ShardedIndex(16, shards=1, kind="flat")
    s.add(x[:100])
    s.save(tmp_path / "p")

    def fail(at: str) -> None:
        if at == step:
            raise OSError(f"injected at {at}")

    s.add(x[100:])
    _interrupts.set_fault_hook(fail)
    try:
        with pytest.raises(OSError, match="injected"):
            s.save(tmp_path / "p")
    finally:
        _interrupts.set_fault_hook(None)
    back = ShardedIndex.load(tmp_path / "p")  # the old save before the manifest, the new one after
    assert back.ntotal == (100 if step == "sharded.save:manifest" else 200)
    back.close()
    s.save(tmp_path / "p")  # the next save tidies up what the cut-off one left
    names = sorted(p.name for p in (tmp_path / "p").iterdir())
    listed = json.loads((tmp_path / "p" / "sharded.json").read_text())["shards"]
    assert names == sorted([e["dir"] for e in listed] + ["sharded.json"])
    s.close()
