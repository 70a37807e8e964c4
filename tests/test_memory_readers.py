"""Several processes, one store: read-only Memories follow their writer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone

import pytest

from poincare_index.memory.journal import Journal
from poincare_memory import Memory

WRITER = """
import os, sys, time
import pytest

from poincare_index.memory.journal import Journal
from poincare_memory import Memory
path, acks, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
mem = Memory(path=path, checkpoint_every=40, num_threads=1)
while open(acks + ".ready").read().count("ready") < 2:  # both readers are following
    time.sleep(0.01)
for i in range(n):
    mem.add(f"note number {i} about the release", id=f"m{i}")
    if i % 7 == 3:
        os.write(fd, f"~m{i - 1}\\n".encode())  # about to delete: from now on either state is right
        mem.delete(f"m{i - 1}")
        os.write(fd, f"-m{i - 1}\\n".encode())
    os.write(fd, f"+m{i}\\n".encode())  # written after the add returned: acknowledged
mem.close()
os.write(fd, b"done\\n")
"""

READER = """
import json, sys, time
import pytest

from poincare_index.memory.journal import Journal
from poincare_memory import Memory
path, acks = sys.argv[1], sys.argv[2]
mem = Memory(path=path, read_only=True, num_threads=1)
with open(acks + ".ready", "a") as f:
    f.write("ready\\n")
checks, stale, lags = 0, [], []
while True:
    lines = open(acks).read().split()
    done = "done" in lines
    added = {l[1:] for l in lines if l.startswith("+")}
    deleted = {l[1:] for l in lines if l.startswith("-")}
    deleting = {l[1:] for l in lines if l.startswith("~")}
    started = time.perf_counter()
    missing = []
    for mid in sorted(added - deleting)[-20:]:  # acknowledged before this check began
        checks += 1
        if mem.get(mid) is None:
            missing.append(mid)
    if missing:  # a delete the writer began after the acks were read is not staleness
        deleting = {l[1:] for l in open(acks).read().split() if l.startswith("~")}
        stale.extend(m for m in missing if m not in deleting)
    for mid in sorted(deleted)[-5:]:
        checks += 1
        if mid in mem:
            stale.append("deleted " + mid)
    lags.append(time.perf_counter() - started)
    mem.search("release note", k=3, touch=False)
    if done:
        break
print(json.dumps({"checks": checks, "stale": stale[:10], "final": len(mem), "max_check_s": max(lags)}))
"""


def test_two_reader_processes_see_every_acknowledged_write(tmp_path):
    store, acks = tmp_path / "store", tmp_path / "acks"
    Memory(path=store).close()  # the store exists before the readers open it
    acks.write_text("")
    (tmp_path / "acks.ready").write_text("")
    n = 240
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(store), str(acks), str(n)],
                              cwd=tmp_path, stderr=subprocess.PIPE, text=True)  # fmt: skip
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(READER), str(store), str(acks)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    assert writer.wait(timeout=300) == 0, writer.stderr.read()[-3000:]
    for reader in readers:
        out, err = reader.communicate(timeout=300)
        assert reader.returncode == 0, err[-3000:]
        report = json.loads(out)
        assert report["stale"] == [] and report["checks"] > 20, report
        assert report["final"] == n - len([i for i in range(n) if i % 7 == 3])
    with Memory(path=store, read_only=True) as reader:
        assert reader.refresh() is False  # opened just now: nothing new


def test_refresh_in_one_process_tails_the_log_and_follows_a_checkpoint(tmp_path):
    t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    writer = Memory(path=tmp_path, checkpoint_every=10_000)
    writer.add("first fact", id="a", t=t)
    reader = Memory(path=tmp_path, read_only=True)
    assert len(reader) == 1
    writer.add("second fact", id="b", t=t + timedelta(hours=1))
    writer.update("a", "first fact, corrected")
    assert reader.get("b") is not None and reader["a"].text == "first fact, corrected"
    assert reader.refresh() is False
    writer.checkpoint()  # a new snapshot, the old log removed
    writer.delete("b")
    started = time.perf_counter()
    assert "b" not in reader and len(reader) == 1
    assert time.perf_counter() - started < 30
    assert writer.refresh() is False  # a writer is always current
    writer.close()
    reader.close()


def test_a_reader_outpaced_by_checkpoints_keeps_its_state_and_damage_still_raises(tmp_path, monkeypatch):
    import poincare_index as pi

    writer = Memory(path=tmp_path)
    writer.add("first fact", id="a")
    reader = Memory(path=tmp_path, read_only=True)
    writer.add("second fact", id="b")
    writer.checkpoint()
    writer.add("third fact", id="c")
    writer.checkpoint()  # two checkpoints on: the log with "b" is gone, the reader must reload
    counter = iter(range(100))

    def outpaced(self, ef_search, repair=False):  # the writer checkpoints again while the snapshot is read
        writer.add(f"fact {next(counter)}")
        writer.checkpoint()
        raise OSError("the snapshot was removed while being read")

    monkeypatch.setattr(Journal, "recover", outpaced)
    assert reader.refresh() is False and "b" not in reader._rows.row_of  # the last state, no error

    def damaged(self, ef_search, repair=False):  # the store stands still and does not load
        raise pi.IndexFormatError("damaged snapshot")

    monkeypatch.setattr(Journal, "recover", damaged)
    with pytest.raises(pi.IndexFormatError, match="damaged"):
        reader.refresh()
    monkeypatch.undo()
    assert "b" in reader and len(reader) == len(writer)
    writer.close()


def test_a_reader_pins_its_snapshot_so_checkpoints_during_its_read_remove_nothing_it_reads(
    tmp_path, monkeypatch
):
    from poincare_index.memory.store import NamespaceDir

    writer = Memory(path=tmp_path, checkpoint_every=10_000)
    writer.add_many([f"fact {i}" for i in range(20)], [f"f{i}" for i in range(20)])
    writer.checkpoint()
    writer.add("after the snapshot", id="tail")  # in the log the pinned snapshot needs
    read_snapshot = NamespaceDir.read_snapshot
    seen = []

    def read_while_the_writer_checkpoints(self, name, seq, num_threads, progress=False):
        if not seen:  # on the first read: two checkpoints land in the middle of it
            for n in range(2):
                writer.add(f"written during the read {n}", id=f"during{n}")
                writer.checkpoint()
            seen.append(name)
            assert (self.dir / name).is_dir()  # pinned: the checkpoints left it in place
        return read_snapshot(self, name, seq, num_threads, progress)

    monkeypatch.setattr(NamespaceDir, "read_snapshot", read_while_the_writer_checkpoints)
    reader = Memory(path=tmp_path, read_only=True)  # the old code retried, then gave up
    monkeypatch.undo()
    # The pinned snapshot and every log after it, the ones written during the read included.
    assert {"tail", "during0", "during1"} <= set(reader._rows.row_of) and len(reader._rows.row_of) == 23
    assert reader.refresh() is False
    writer.add("one more", id="more")
    writer.checkpoint()  # the pin is gone: this checkpoint removes the old snapshot and logs
    ns = tmp_path / "default"
    assert seen[0] not in {p.name for p in ns.iterdir()}
    assert len([p for p in ns.iterdir() if p.name.startswith("snap-")]) == 1
    # The log since the previous checkpoint stays one checkpoint more (for readers a little behind).
    assert len([p for p in ns.iterdir() if p.name.startswith("log-")]) == 2
    writer.close()
    reader.close()


def test_a_reader_that_keeps_up_follows_checkpoints_without_reloading_but_not_a_compaction(
    tmp_path, monkeypatch
):
    writer = Memory(path=tmp_path, compact_min_rows=40)
    writer.add_many([f"fact {i}" for i in range(30)], [f"f{i}" for i in range(30)])
    reader = Memory(path=tmp_path, read_only=True)
    loads = []
    real_recover = Journal.recover

    def counted(self, ef_search, repair=False):
        loads.append(self)
        return real_recover(self, ef_search, repair)

    monkeypatch.setattr(Journal, "recover", counted)
    for round_ in range(5):  # a checkpoint between each of the reader's looks
        writer.add_many([f"round {round_} fact {i}" for i in range(4)], [f"r{round_}.{i}" for i in range(4)])
        writer.delete(f"f{round_}")
        writer.checkpoint()
        assert f"r{round_}.3" in reader and f"f{round_}" not in reader and len(reader) == len(writer)
    assert loads == []  # every checkpoint followed through the kept logs
    writer.delete(filters={"id": {"$in": [f"f{i}" for i in range(5, 30)]}})  # most rows: compaction
    assert len(writer.index.columns) == len(writer)  # renumbered
    assert sorted(r.id for r in reader) == sorted(r.id for r in writer)
    assert len(loads) == 1  # a new row epoch: the reader loaded the compacted snapshot
    writer.add("after the compaction", id="late")
    assert reader["late"].text == "after the compaction"
    writer.close()
    reader.close()
