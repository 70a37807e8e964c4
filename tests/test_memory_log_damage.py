"""A Memory's log after a crash or damage: a torn tail is cut off and reported; damage before
it, a missing log or a gap between logs refuses to open; recover=True opens with every
operation up to the damage and says what it dropped (docs/reliability.md)."""

from __future__ import annotations

import gc
import os
import warnings
from datetime import datetime, timedelta, timezone

import pytest

from poincare_index.memory.log import scan_log
from poincare_memory import LogDamageError, Memory, RecoveryWarning, StoreLockedError

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
SNAPSHOT = 30  # memories folded into the snapshot, by one add_many: operation number 1


def killed_store(path, checkpoint_every=10_000):
    """30 memories checkpointed, then 10 adds, a delete and an update in the log; the writer
    dropped without close(), as by a crash. Returns {id: text} as acknowledged."""
    mem = Memory(path=path, num_threads=1, checkpoint_every=checkpoint_every)
    mem.add_many([f"fact number {i}" for i in range(SNAPSHOT)], [f"s{i}" for i in range(SNAPSHOT)], t=T0)
    mem.checkpoint()
    for i in range(10):
        mem.add(f"later fact {i}", id=f"l{i}", t=T0 + timedelta(hours=i))
    mem.delete("s0")
    mem.update("s1", "the first fact, rewritten")
    held = {r.id: r.text for r in mem}
    del mem
    gc.collect()
    return held


def logs(path):
    return sorted((path / "default").glob("log-*.bin"))


def opened(path, **kwargs):
    """(memories as {id: text}, the RecoveryWarnings raised while opening)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mem = Memory(path=path, num_threads=1, **kwargs)
    held = {r.id: r.text for r in mem}
    mem.close()
    return held, [str(w.message) for w in caught if issubclass(w.category, RecoveryWarning)]


def record_ends(log):
    scan = scan_log(log)
    ends, pos = [], 8
    for _seq, header, blob in scan.records:
        import json

        head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
        pos += 20 + 4 + len(head) + len(blob)
        ends.append(pos)
    assert ends[-1] == scan.end == scan.size
    return ends


def test_a_clean_crash_reopens_with_everything_and_no_warning(tmp_path):
    held = killed_store(tmp_path)
    again, warned = opened(tmp_path)
    assert again == held and warned == []


def test_a_torn_tail_is_cut_off_and_reported_with_the_last_operation_kept(tmp_path):
    held = killed_store(tmp_path)
    log = logs(tmp_path)[-1]  # the one after the snapshot (the one before is kept for readers)
    ends = record_ends(log)
    data = log.read_bytes()
    log.write_bytes(data[: ends[-2] + 30])  # the update's record cut 30 bytes in
    again, warned = opened(tmp_path)
    assert again == dict(held, s1="fact number 1")  # everything but the unacknowledged update
    assert len(warned) == 1 and "30 bytes" in warned[0] and "up to number 12" in warned[0]
    assert log.stat().st_size == ends[-2]  # cut off: the next open says nothing
    assert opened(tmp_path) == (again, [])


def test_a_log_cut_in_half_is_reported(tmp_path):
    killed_store(tmp_path)
    log = logs(tmp_path)[-1]
    ends = record_ends(log)
    half = log.stat().st_size // 2
    assert half not in ends
    log.write_bytes(log.read_bytes()[:half])
    again, warned = opened(tmp_path)
    kept = sum(e <= half for e in ends)
    assert len(warned) == 1 and f"up to number {1 + kept}" in warned[0]
    assert len(again) == SNAPSHOT + kept


def test_a_zero_filled_tail_is_torn_not_damage(tmp_path):
    held = killed_store(tmp_path)
    log = logs(tmp_path)[-1]
    with open(log, "ab") as f:
        f.write(bytes(4096))  # a file extended by a power loss, its data never written
    again, warned = opened(tmp_path)
    assert again == held and len(warned) == 1 and "4096 bytes" in warned[0]


@pytest.mark.parametrize(
    "damage", ["emptied", "deleted", "header cut", "last record bit", "early record bit"]
)
def test_damage_refuses_to_open_and_recover_keeps_what_precedes_it(tmp_path, damage):
    held = killed_store(tmp_path)
    log = logs(tmp_path)[-1]
    ends = record_ends(log)
    data = bytearray(log.read_bytes())
    if damage == "emptied":
        log.write_bytes(b"")
    elif damage == "deleted":
        log.unlink()
    elif damage == "header cut":
        log.write_bytes(bytes(data[:5]))
    elif damage == "last record bit":
        data[ends[-2] + 40] ^= 0x01  # one bit of the update's payload: a whole record, wrong sum
        log.write_bytes(bytes(data))
    else:
        data[ends[2] + 40] ^= 0x10  # inside the fourth record (the fourth later fact)
        log.write_bytes(bytes(data))
    damaged = log.read_bytes() if log.exists() else None
    with pytest.raises(LogDamageError, match="recover=True") as refused:
        Memory(path=tmp_path, num_threads=1)
    assert log.exists() == (damage != "deleted")  # refused: nothing touched
    last = {"last record bit": 12, "early record bit": 4}.get(damage, 1)  # the operations kept
    assert refused.value.last_seq == last
    with pytest.raises(ValueError, match="read_only"):
        Memory(path=tmp_path, read_only=True, recover=True)
    with pytest.raises(LogDamageError):
        Memory(path=tmp_path, read_only=True)  # a reader refuses too

    again, warned = opened(tmp_path, recover=True)
    assert len(warned) == 1 and f"up to number {last}" in warned[0]
    expected = {f"s{i}": f"fact number {i}" for i in range(SNAPSHOT)}
    expected.update({f"l{i}": f"later fact {i}" for i in range(min(last - 1, 10))})
    if last == 12:
        del expected["s0"]
    assert again == expected and set(again) <= set(held) | {"s0"}
    if damage != "deleted":
        aside = list((tmp_path / "default").glob("log-*.bin.damaged"))
        assert len(aside) == 1 and aside[0].read_bytes() == damaged  # kept for inspection
    # Repaired: it opens without recover=, and what is added now lasts.
    with Memory(path=tmp_path, num_threads=1) as mem:
        mem.add("after the repair", id="new")
    again2, warned2 = opened(tmp_path)
    assert warned2 == [] and again2 == dict(expected, new="after the repair")


def failing_checkpoints(monkeypatch, count):
    """The next ``count`` snapshots fail after their log was started (CURRENT stays)."""
    from poincare_index.memory.store import NamespaceDir

    real, left = NamespaceDir.write_snapshot, [count]

    def write_snapshot(self, *args, **kwargs):
        if left[0] > 0:
            left[0] -= 1
            raise OSError("no space left (simulated)")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(NamespaceDir, "write_snapshot", write_snapshot)


def test_a_log_missing_between_the_checkpoint_and_a_later_one_is_refused(tmp_path, monkeypatch):
    mem = Memory(path=tmp_path, num_threads=1)
    mem.add_many([f"fact {i}" for i in range(5)], [f"s{i}" for i in range(5)], t=T0)
    mem.checkpoint()
    failing_checkpoints(monkeypatch, 2)
    for round_ in range(2):
        mem.add(f"round {round_}", id=f"r{round_}", t=T0)
        with pytest.raises(OSError, match="simulated"):
            mem.checkpoint()
    mem.add("last", id="last", t=T0)
    monkeypatch.undo()
    del mem
    gc.collect()
    chain = logs(tmp_path)[1:]  # log-1 is kept for readers
    assert [int(p.name[4:-4]) for p in chain] == [2, 3, 4]  # CURRENT still names the first snapshot
    with Memory(path=tmp_path, read_only=True) as reader:  # a writer's close would checkpoint
        assert {r.id for r in reader} == {"s0", "s1", "s2", "s3", "s4", "r0", "r1", "last"}
    middle = chain[1].read_bytes()
    chain[1].unlink()
    with pytest.raises(LogDamageError, match=r"operations 3\.\.3 are missing"):
        Memory(path=tmp_path, num_threads=1)
    chain[1].write_bytes(middle[: len(middle) - 9])  # a cut log that another follows: not a torn tail
    with pytest.raises(LogDamageError, match="follows it"):
        Memory(path=tmp_path, num_threads=1)
    again, warned = opened(tmp_path, recover=True)
    assert again.keys() == {"s0", "s1", "s2", "s3", "s4", "r0"} and "up to number 2" in warned[0]


def test_a_new_store_without_its_first_log_is_refused_and_an_unfinished_creation_is_finished(tmp_path):
    mem = Memory(path=tmp_path, num_threads=1)
    mem.add("only in the log", id="a")
    del mem
    gc.collect()
    log = logs(tmp_path)[-1]
    log.unlink()
    with pytest.raises(LogDamageError, match="missing"):
        Memory(path=tmp_path, num_threads=1)
    # A creation cut short before config.json: its empty first log alone; the next one finishes.
    other = tmp_path / "fresh"
    Memory(path=other, num_threads=1).close()
    (other / "default" / "config.json").unlink()
    for p in (other / "default").iterdir():
        if p.name not in ("LOCK", "log-0000000000000001.bin"):
            p.unlink()
    assert opened(other) == ({}, [])


def test_deleting_lock_while_a_writer_is_open_keeps_a_second_writer_out(tmp_path):
    mem = Memory(path=tmp_path, num_threads=1)
    os.unlink(tmp_path / "default" / "LOCK")
    with pytest.raises(StoreLockedError):
        Memory(path=tmp_path, num_threads=1)
    mem.close()
    Memory(path=tmp_path, num_threads=1).close()


def test_recover_is_a_flag_and_needs_a_store_on_disk(tmp_path):
    with pytest.raises(TypeError, match="recover"):
        Memory(path=tmp_path, recover=1)
    with pytest.raises(ValueError, match="path"):
        Memory(recover=True)
    held = killed_store(tmp_path)
    assert opened(tmp_path, recover=True) == (held, [])  # nothing damaged: nothing dropped, no warning
