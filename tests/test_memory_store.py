"""Memory persistence: reopen as it was, a killed writer loses nothing acknowledged, locks,
namespaces, corrupted files refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

import poincare_index as pi
from poincare_index.embed import CallableEmbedder, HashingEmbedder
from poincare_memory import (
    Ebbinghaus,
    HalfLife,
    Memory,
    Product,
    RecoveryWarning,
    StoreLockedError,
    ValidityWindow,
)

NOW = datetime(2026, 6, 1, 12, tzinfo=timezone.utc)
TEXTS = [
    f"note {i}: {w}" for i, w in enumerate("alpha beta gamma delta epsilon zeta eta theta iota kappa".split())
]


def fill(mem: Memory) -> None:
    for i, text in enumerate(TEXTS):
        mem.add(text, id=f"n{i}", t=NOW - timedelta(days=i), metadata={"even": i % 2 == 0})
    mem.search("alpha", k=3, at_time=NOW)  # touches
    mem.update("n3", "note 3: delta revised", metadata={"rev": 2})
    mem.invalidate("n4", at=NOW - timedelta(days=1))
    mem.delete("n5")


def snapshot_of(mem: Memory):
    hits = [
        (r.id, round(r.score, 12), r.access_count)
        for r in mem.search("note delta", k=8, at_time=NOW, touch=False)
    ]
    return hits, mem.to_arrow().to_pylist()


@pytest.mark.parametrize("checkpoint_every", [1_000, 3])
def test_reopen_gives_the_same_memories_and_results(tmp_path, checkpoint_every):
    decay = Product(Ebbinghaus(stability_hours=48, boost_per_access=0.5), ValidityWindow())
    with Memory(decay=decay, depth_bias=0.05, path=tmp_path, checkpoint_every=checkpoint_every) as mem:
        fill(mem)
        before = snapshot_of(mem)
    again = Memory(path=tmp_path)  # configuration from the store
    assert again.decay == decay and again.depth_bias == 0.05 and again.time_coef == 1.0
    assert snapshot_of(again) == before
    assert again["n3"].metadata == {"even": False, "rev": 2} and "n5" not in again
    again.close()


def test_reopen_without_close_replays_the_log(tmp_path):
    mem = Memory(decay=HalfLife(hours=24), path=tmp_path)
    fill(mem)
    before = snapshot_of(mem)
    mem._ns.unlock()  # simulate the process dying: no close, no checkpoint
    again = Memory(path=tmp_path)
    assert snapshot_of(again) == before
    again.close()


def test_killed_writer_loses_nothing_acknowledged(tmp_path):
    child = textwrap.dedent(
        f"""
        import sys
        from poincare_memory import Memory, HalfLife
        mem = Memory(decay=HalfLife(hours=24), path={str(tmp_path)!r})
        i = 0
        while True:
            mid = mem.add(f"memory number {{i}} about topic {{i % 13}}", id=f"k{{i}}")
            print(mid, flush=True)
            i += 1
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    acknowledged = []
    assert proc.stdout is not None
    for line in proc.stdout:
        acknowledged.append(line.strip())
        if len(acknowledged) == 300:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    acknowledged += [line.strip() for line in proc.stdout.read().splitlines() if line.strip()]
    mem = Memory(path=tmp_path)
    assert all(a in mem for a in acknowledged), "an acknowledged add was lost"
    assert len(mem) >= len(acknowledged)
    assert mem.search("topic 5", k=1, touch=False)[0].text.endswith("topic 5")
    mem.close()


def test_a_second_writer_is_refused(tmp_path):
    mem = Memory(path=tmp_path)
    mem.add("x", id="x")
    with pytest.raises(StoreLockedError, match="open for writing"):
        Memory(path=tmp_path)
    code = f"from poincare_memory import Memory; Memory(path={str(tmp_path)!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode != 0 and "StoreLockedError" in out.stderr
    reader = Memory(path=tmp_path, read_only=True)  # readers need no lock
    assert reader["x"].text == "x"
    with pytest.raises(PermissionError):
        reader.add("y")
    mem.close()
    Memory(path=tmp_path).close()  # the lock went with close


def test_namespaces_are_isolated(tmp_path):
    a = Memory(path=tmp_path, namespace="agent_1")
    b = Memory(path=tmp_path, namespace="agent_2", decay=HalfLife(hours=1))
    a.add("the launch code is blue", id="secret")
    b.add("the weather is blue today", id="w")
    assert [r.id for r in b.search("launch code blue", k=5)] == ["w"]
    assert [r.id for r in a.search("weather", k=5)] == ["secret"]
    assert Memory.namespaces(tmp_path) == ["agent_1", "agent_2"]
    a.close()
    b.close()
    assert Memory(path=tmp_path, namespace="agent_2", read_only=True).decay == HalfLife(hours=1)
    with pytest.raises(ValueError, match="namespace"):
        Memory(path=tmp_path, namespace="../escape")


def test_embedder_mismatch_is_refused(tmp_path):
    Memory(path=tmp_path, embedder=HashingEmbedder(dim=64)).close()
    with pytest.raises(ValueError, match="embedder mismatch"):
        Memory(path=tmp_path, embedder=HashingEmbedder(dim=128))
    Memory(path=tmp_path).close()  # rebuilt from the saved spec
    toy = CallableEmbedder(lambda ts: np.ones((len(ts), 4)), dim=4, name="toy-model")
    Memory(path=tmp_path, namespace="custom", embedder=toy).close()
    with pytest.raises(ValueError, match="toy-model"):
        Memory(path=tmp_path, namespace="custom")
    Memory(path=tmp_path, namespace="custom", embedder=toy).close()


def _log_file(tmp_path):
    ns = tmp_path / "default"
    return sorted(ns.glob("log-*.bin"))[-1]


def test_torn_tail_is_dropped_and_corruption_refused(tmp_path):
    mem = Memory(path=tmp_path)
    for i in range(5):
        mem.add(f"m{i}", id=f"m{i}")
    mem._ns.unlock()
    log = _log_file(tmp_path)
    data = log.read_bytes()
    log.write_bytes(data[:-7])  # the last add torn mid-write (never acknowledged)
    with pytest.warns(RecoveryWarning, match="up to number 4"):
        mem = Memory(path=tmp_path)
    assert sorted(r.id for r in mem) == ["m0", "m1", "m2", "m3"]
    mem.add("m9", id="m9")  # appends after the cut
    mem._ns.unlock()
    mem = Memory(path=tmp_path)
    assert "m9" in mem and len(mem) == 5
    mem._ns.unlock()
    data = bytearray(log.read_bytes())
    data[40] ^= 0xFF  # inside the first record
    log.write_bytes(bytes(data))
    with pytest.raises(pi.IndexFormatError, match="checksum"):
        Memory(path=tmp_path)


def test_corrupted_config_and_snapshot_are_refused(tmp_path):
    with Memory(path=tmp_path) as mem:
        mem.add("x", id="x")
    cfg = tmp_path / "default" / "config.json"
    body = json.loads(cfg.read_text())
    body["time_coef"] = 5.0
    cfg.write_text(json.dumps(body))
    with pytest.raises(pi.IndexFormatError, match="checksum"):
        Memory(path=tmp_path)
    body["time_coef"] = 1.0
    cfg.write_text(json.dumps(body))
    rows = next((tmp_path / "default").glob("snap-*/rows.arrow"))
    rows.write_bytes(rows.read_bytes()[:-10])
    with pytest.raises(pi.IndexFormatError, match="rows.arrow"):
        Memory(path=tmp_path)


def test_read_only_needs_an_existing_store(tmp_path):
    with pytest.raises(FileNotFoundError):
        Memory(path=tmp_path / "none", read_only=True)
    with pytest.raises(ValueError, match="path"):
        Memory(read_only=True)


def test_a_dropped_memory_gives_its_lock_back(tmp_path):
    import gc

    mem = Memory(path=tmp_path)
    mem.add("kept", id="k")
    del mem
    gc.collect()
    again = Memory(path=tmp_path)  # no StoreLockedError; the add is in the log
    assert again["k"].text == "kept"
    again.close()


def test_a_damaged_record_length_is_corruption_not_a_torn_tail(tmp_path):
    mem = Memory(path=tmp_path)
    for i in range(3):
        mem.add(f"m{i}", id=f"m{i}")
    del mem
    log = _log_file(tmp_path)
    data = bytearray(log.read_bytes())
    data[8 + 3] ^= 0x40  # the first record's length field
    log.write_bytes(bytes(data))
    with pytest.raises(pi.IndexFormatError, match="header"):
        Memory(path=tmp_path)
    assert log.read_bytes() == bytes(data)  # nothing was truncated away


def test_update_that_triggers_a_checkpoint_keeps_one_version(tmp_path):
    mem = Memory(path=tmp_path, checkpoint_every=2)
    mem.add("cats sleep all day", id="a")
    mem.update("a", "dogs run in the park")
    mem.add("filler", id="f")
    del mem
    again = Memory(path=tmp_path)
    assert len(again) == 2 and [r.text for r in again.list({"id": "a"})] == ["dogs run in the park"]
    assert [r.text for r in again.search("park", k=5) if r.id == "a"] == ["dogs run in the park"]
    again.close()


def test_a_failed_checkpoint_loses_and_undoes_nothing(tmp_path, monkeypatch):
    from poincare_index.memory import store

    mem = Memory(path=tmp_path, checkpoint_every=1)
    mem.add("one", id="a")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.NamespaceDir, "write_snapshot", disk_full)
    with pytest.warns(RuntimeWarning, match="checkpoint failed"):
        mem.add("two", id="b")
    assert "b" in mem
    monkeypatch.undo()
    del mem
    again = Memory(path=tmp_path)
    assert sorted(r.id for r in again) == ["a", "b"]
    again.close()


def test_a_closed_memory_refuses_work(tmp_path):
    mem = Memory(path=tmp_path)
    mem.add("x", id="x")
    mem.close()
    for call in (mem.checkpoint, lambda: mem.search("x"), lambda: mem.add("y"), lambda: mem.delete("x")):
        with pytest.raises(ValueError, match="closed"):
            call()
    other = Memory(path=tmp_path)
    assert other["x"].access_count == 0
    other.close()


def test_read_only_opens_while_the_writer_checkpoints(tmp_path):
    import threading

    mem = Memory(path=tmp_path, checkpoint_every=3)
    mem.add("start", id="s")
    stop = threading.Event()

    def write():
        i = 0
        while not stop.is_set():
            mem.add(f"memory {i}", id=f"w{i}")
            i += 1

    t = threading.Thread(target=write)
    t.start()
    try:
        for _ in range(30):
            reader = Memory(path=tmp_path, read_only=True)
            assert "s" in reader
    finally:
        stop.set()
        t.join()
        mem.close()


@pytest.mark.parametrize("persistent", [False, True])
def test_deleting_most_memories_compacts_the_index(tmp_path, persistent):
    mem = Memory(decay=HalfLife(hours=24), path=tmp_path if persistent else None, compact_min_rows=50)
    mem.add_many(
        [f"memory {i} about topic {i % 9}" for i in range(100)], [f"k{i}" for i in range(100)], t=NOW
    )
    mem.search("topic 3", k=5, at_time=NOW)  # some access counts
    before = {r.id: (r.access_count, r.metadata) for r in mem}
    mem.delete(filters={"id": {"$in": [f"k{i}" for i in range(0, 100, 2)]}})  # half: not yet
    assert len(mem.index.columns) == 100
    mem.delete("k1")  # now more than half of the rows are deleted
    assert len(mem.index.columns) == 49 and len(mem) == 49
    assert {r.id: (r.access_count, r.metadata) for r in mem} == {k: v for k, v in before.items() if k in mem}
    hits = [(r.id, round(r.score, 9)) for r in mem.search("topic 3", k=5, at_time=NOW, touch=False)]
    assert all(int(h[0][1:]) % 2 == 1 and h[0] != "k1" for h in hits)
    mem.add("after compaction", id="new", t=NOW)
    assert mem["new"].text == "after compaction"
    if persistent:
        del mem
        again = Memory(path=tmp_path)
        assert len(again) == 50 and len(again.index.columns) == 50
        assert [
            (r.id, round(r.score, 9)) for r in again.search("topic 3", k=5, at_time=NOW, touch=False)
        ] == hits
        again.close()


def test_metadata_updates_do_not_touch_the_graph_and_survive_reopening(tmp_path):
    """An update that keeps the text changes times and metadata in place: the graph and the slots
    stay as they were (before, each such update re-added the vector: 2,900 of them on 100
    memories cut the others' self-recall from 371 to 257 of 415). Logged, so a reopened store
    (and one reopened after a checkpoint) sees the same fields."""
    path = tmp_path / "store"
    mem = Memory(path=path, decay=HalfLife(hours=24))
    for i in range(40):
        mem.add(
            f"note number {i} about topic {i % 7}", id=f"n{i}", t=NOW - timedelta(hours=i), metadata={"k": i}
        )
    slots = mem._rows.index._core.slots
    links = mem._rows.index.check_integrity()["links"]
    for round_ in range(5):
        for i in range(10):
            mem.update(f"n{i}", metadata={"k": 100 + round_, "round": round_}, t=NOW - timedelta(days=round_))
    mem.update("n11", valid_until=NOW + timedelta(days=1), metadata={"k": None})
    assert mem._rows.index._core.slots == slots and mem._rows.index.check_integrity()["links"] == links
    r = mem["n3"]
    assert r.metadata == {"k": 104, "round": 4} and r.t == NOW - timedelta(days=4)
    assert mem["n11"].metadata == {} and mem["n11"].valid_until == NOW + timedelta(days=1)
    assert [h.id for h in mem.search("note number 3", k=40, filters={"round": 4}, touch=False)].count(
        "n3"
    ) == 1
    with pytest.raises(ValueError):
        mem.update("n5", metadata={"k": "not an int"})  # a type clash changes nothing, logs nothing
    assert mem["n5"].metadata["k"] == 104
    mem.close()
    again = Memory(path=path, decay=HalfLife(hours=24))
    assert again["n3"].metadata == {"k": 104, "round": 4} and again["n3"].t == NOW - timedelta(days=4)
    assert again["n11"].metadata == {} and len(again) == 40
    again.checkpoint()
    again.update("n0", metadata={"k": 7})
    again.close()
    third = Memory(path=path, decay=HalfLife(hours=24))
    assert third["n0"].metadata == {"k": 7, "round": 4} and third["n3"].metadata["round"] == 4
    third.close()


@pytest.mark.parametrize("crash_at", ["rename", "current"])
def test_a_checkpoint_killed_midway_never_costs_the_live_snapshot(tmp_path, monkeypatch, crash_at):
    """A checkpoint right after reopening (nothing new: the same sequence number) used to delete
    the live snapshot directory, which CURRENT names, before renaming the new one into place; a
    kill in between left a store that would not open. Snapshot names now carry a nonce, so a
    checkpoint never writes over or deletes what CURRENT names, whichever step it dies at."""
    import poincare_index.memory.store as store

    path = tmp_path / "store"
    mem = Memory(path=path)
    for i in range(30):
        mem.add(f"memory {i}", id=f"m{i}", t=NOW)
    mem.checkpoint()
    mem.close()
    mem = Memory(path=path)  # reopened: a checkpoint now has the same sequence number

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # stands for SIGKILL at this point

    if crash_at == "rename":  # the snapshot directory's own rename, the last step before CURRENT
        real_replace = os.replace
        monkeypatch.setattr(
            store.os,
            "replace",
            lambda src, dst: (
                killed() if os.path.basename(dst).startswith("snap-") else real_replace(src, dst)
            ),
        )
    else:
        real = store.write_json_atomic
        monkeypatch.setattr(
            store, "write_json_atomic", lambda p, doc: killed() if p.name == "CURRENT" else real(p, doc)
        )
    with pytest.raises(KeyboardInterrupt):
        mem.checkpoint()
    monkeypatch.undo()
    mem._ns.unlock()  # the killed process's lock goes with it
    again = Memory(path=path)
    assert len(again) == 30 and again["m7"].text == "memory 7"
    again.add("after the crash", id="new", t=NOW)
    again.checkpoint()  # and the next checkpoint clears what the dead one left behind
    snaps = [p.name for p in (path / "default").iterdir() if p.name.startswith("snap-")]
    assert len(snaps) == 1 and not snaps[0].endswith(".tmp")
    again.close()
    assert len(Memory(path=path, read_only=True)) == 31


@pytest.mark.parametrize("name", ["../../x", "snap-0000000000000001-zz", 5, None])
def test_current_naming_anything_but_a_snapshot_is_refused(tmp_path, name):
    from poincare_index._durable import write_json_atomic

    path = tmp_path / "store"
    mem = Memory(path=path)
    mem.add("one", id="a", t=NOW)
    mem.checkpoint()
    mem.close()
    write_json_atomic(path / "default" / "CURRENT", {"snapshot": name, "seq": 1})
    with pytest.raises(pi.IndexFormatError, match="CURRENT"):
        Memory(path=path)


@pytest.mark.parametrize("read_only", [False, True])
def test_a_deleted_snapshot_is_reported_as_missing_by_its_path(tmp_path, read_only):
    import shutil

    with Memory(path=tmp_path) as mem:
        mem.add("one", id="a", t=NOW)
    (snap,) = (tmp_path / "default").glob("snap-*")
    shutil.rmtree(snap)
    with pytest.raises(pi.IndexFormatError, match="snapshot CURRENT names does not exist") as err:
        Memory(path=tmp_path, read_only=read_only)
    assert str(snap) in str(err.value) and "kept changing" not in str(err.value)
    snap.write_text("not a directory")
    with pytest.raises(pi.IndexFormatError, match="snapshot CURRENT names is not a directory"):
        Memory(path=tmp_path, read_only=read_only)


def test_memory_refuses_a_saved_index_or_a_file_as_its_store(tmp_path):
    index = pi.PoincareIndex(4)
    index.add(np.full((2, 4), 0.1, dtype=np.float32))
    index.save(tmp_path / "idx")
    with pytest.raises(FileExistsError, match="saved index"):
        Memory(path=tmp_path / "idx")
    assert not (tmp_path / "idx" / "default").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        Memory(path=tmp_path / "file")


def test_reading_a_log_from_where_the_last_read_ended_gives_the_records_appended_since(tmp_path):
    import numpy as np

    from poincare_index.memory.log import LogWriter, read_log

    path = tmp_path / "log-0000000000000001.bin"
    writer = LogWriter(path)
    for seq in range(1, 4):
        writer.append(seq, {"op": "touch", "rows": [seq]}, None)
    first, end = read_log(path)
    writer.append(4, {"op": "add", "n": 1}, np.ones((1, 3), dtype=np.float32))
    writer.append(5, {"op": "touch", "rows": [5]}, None)
    later, end2 = read_log(path, end)
    full, full_end = read_log(path)
    assert [r[0] for r in first] == [1, 2, 3] and [r[0] for r in later] == [4, 5]
    assert later == full[3:] and end2 == full_end
    with open(path, "ab") as f:
        f.write(b"\x07" * 5)  # a torn tail: not read, the valid prefix stays
    assert read_log(path, end2) == ([], end2)
    writer.close()
