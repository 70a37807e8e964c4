"""A Memory's writes cut off where a review found holes in the first version of the mechanism:
after each, the writer, a reader following its log and the store reopened agree, and nothing
hangs. Each case failed (or hung) before the fix it names."""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from datetime import datetime, timedelta, timezone

import pytest

from poincare_index import _interrupts
from poincare_index.embed import HashingEmbedder
from poincare_index.memory import log as log_module
from poincare_index.memory import retention as retention_module
from poincare_memory import Memory, Retention


def _memory(path, **kwargs) -> Memory:
    m = Memory(embedder=HashingEmbedder(dim=16), path=path, **kwargs)
    m.index._add_chunk = 4
    return m


def _contents(m: Memory) -> dict[str, str]:
    return {r.id: r.text for r in m.list()}


def _reader(path) -> dict[str, str]:
    r = Memory(embedder=HashingEmbedder(dim=16), path=path, read_only=True)
    try:
        return _contents(r)
    finally:
        r.close()


class _Raise:
    def __init__(self, step: str, error: type[BaseException]) -> None:
        self.step, self.error = step, error

    def __call__(self, step: str) -> None:
        if step == self.step:
            raise self.error(f"injected at {step}")


@pytest.fixture
def fault():
    yield lambda step, error: _interrupts.set_fault_hook(_Raise(step, error))
    _interrupts.set_fault_hook(None)


def _fail_first_call(obj, name: str, error: BaseException) -> None:
    real, calls = getattr(obj, name), []

    def once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real(*args, **kwargs)

    setattr(obj, name, once)


def test_a_failed_record_after_the_voids_were_logged_rolls_its_add_back(tmp_path, fault, monkeypatch):
    """Was: the void record moved the sequence number, so the failed add counted as logged."""
    m = _memory(tmp_path / "s")
    m.add("kept", id="k")
    fault("memory.add:log", KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        m.add_many(["a", "b"], ["a", "b"])
    _interrupts.set_fault_hook(None)
    real = log_module.LogWriter.append

    def add_records_fail(self, seq, header, vecs=None):
        if header.get("op") == "add":
            raise OSError(28, "No space left on device")
        return real(self, seq, header, vecs)

    monkeypatch.setattr(log_module.LogWriter, "append", add_records_fail)
    with pytest.raises(OSError):
        m.add("lost", id="B")
    monkeypatch.setattr(log_module.LogWriter, "append", real)
    m.add("after", id="C")
    assert _contents(m) == _reader(tmp_path / "s") == {"k": "kept", "C": "after"}


def _with_a_roll_back_pending(path, fault) -> Memory:
    """A store holding "kept", after an add whose log write failed and whose roll-back was cut
    off itself (left pending)."""
    m = _memory(path)
    m.add("kept", id="k")
    fault("memory.add:log", OSError)
    _fail_first_call(m._rows.index, "remove_ids", MemoryError("during the roll-back"))
    with pytest.raises(MemoryError):
        m.add("unlogged", id="u")
    _interrupts.set_fault_hook(None)
    assert m._journal.pending is not None
    return m


def test_a_checkpoint_with_a_roll_back_pending_does_not_deadlock(tmp_path, fault):
    m = _with_a_roll_back_pending(tmp_path / "s", fault)
    done = threading.Event()
    threading.Thread(target=lambda: (m.checkpoint(), done.set()), daemon=True).start()
    assert done.wait(20), "checkpoint() hung on the pending roll-back"
    m.close()
    assert _reader(tmp_path / "s") == {"k": "kept"}


def test_reads_never_show_or_touch_an_add_whose_roll_back_is_pending(tmp_path, fault):
    m = _with_a_roll_back_pending(tmp_path / "s", fault)
    assert "u" not in m and len(m) == 1
    assert [r.id for r in m.search("unlogged", k=2)] == ["k"]  # touches k only
    m.add("next", id="n")
    assert _contents(m) == _reader(tmp_path / "s") == {"k": "kept", "n": "next"}


def test_an_operation_logged_but_not_applied_is_applied_by_the_next_write(tmp_path):
    m = _memory(tmp_path / "s")
    m.add_many(["alpha", "beta"], ["a", "b"])
    _fail_first_call(m._rows.index, "remove_ids", MemoryError("applying"))
    with pytest.raises(MemoryError):
        m.delete("a")
    m.add("next", id="n")
    assert _contents(m) == {"b": "beta", "n": "next"}
    _fail_first_call(m._rows.index, "remove_ids", MemoryError("applying"))
    with pytest.raises(MemoryError):
        m.update("b", "beta two")  # logged; deleting the old row failed
    assert len(m) == 2 and _contents(m) == {"b": "beta two", "n": "next"}
    assert [r.text for r in m.search("beta", k=3, touch=False)].count("beta") == 0
    assert _reader(tmp_path / "s") == {"b": "beta two", "n": "next"}


def test_an_update_cut_off_after_its_record_finishes_it(tmp_path, fault):
    m = _memory(tmp_path / "s")
    m.add("original", id="x")
    fault("memory.add:logged", RuntimeError)
    with pytest.raises(RuntimeError):
        m.update("x", "changed")
    _interrupts.set_fault_hook(None)
    assert [(r.id, r.text) for r in m.list()] == [("x", "changed")]
    assert _reader(tmp_path / "s") == {"x": "changed"}


def test_a_rolled_back_add_takes_its_metadata_columns_with_it(tmp_path, fault):
    m = _memory(tmp_path / "s")
    m.add("kept", id="k")
    fault("memory.add:log", KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        m.add("never stored", id="x", metadata={"source": "web"})
    _interrupts.set_fault_hook(None)
    m.add("a number", id="y", metadata={"source": 3})  # the rolled-back str column is gone
    r = Memory(embedder=HashingEmbedder(dim=16), path=tmp_path / "s", read_only=True)
    assert m.to_arrow().equals(r.to_arrow())
    assert m.index.columns.equals(r.index.columns)


@pytest.mark.parametrize("error", [OSError, KeyboardInterrupt])
def test_a_compaction_cut_off_after_current_switched_is_followed(tmp_path, error):
    m = _memory(tmp_path / "s", compact_min_rows=4)
    m.add_many([f"t{i}" for i in range(6)], [f"m{i}" for i in range(6)])
    _fail_first_call(m._ns, "remove_stale", error("cut off while removing stale files"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            for i in range(4):
                m.delete(f"m{i}")
        except KeyboardInterrupt:
            pass
    assert len(m._rows.mids) == 2  # the rows follow the compacted snapshot CURRENT names
    # the next write's own compaction cannot rescue it: writing snapshots now fails
    _fail_first_call(m._ns, "write_snapshot", OSError(28, "No space left on device"))
    m.add("after", id="after")
    assert _contents(m) == _reader(tmp_path / "s") == {"m4": "t4", "m5": "t5", "after": "after"}


def test_a_retention_run_is_not_renumbered_by_a_compaction_between_its_deletes(monkeypatch):
    monkeypatch.setattr(retention_module, "DELETE_CHUNK_ROWS", 20)
    m = Memory(
        embedder=HashingEmbedder(dim=16), compact_min_rows=40, retention=Retention(max_age=timedelta(days=1))
    )
    m._retention.next_us = 2**62  # not due while the rows go in
    m.add_many(
        [f"t{i}" for i in range(50)],
        [f"m{i}" for i in range(50)],
        t=datetime(2020, 1, 1, tzinfo=timezone.utc),
    )
    assert m.apply_retention() == 50 and len(m) == 0


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_ctrl_c_inside_a_checkpoint_lands_after_it(tmp_path, fault):
    """A real SIGINT sent at the line after CURRENT switched (where a raised KeyboardInterrupt
    left the voids to be logged twice) is held until the snapshot's state is recorded."""
    import poincare_index.memory.journal as journal

    m = _memory(tmp_path / "s")
    m.add("kept", id="k")
    fault("memory.add:log", OSError)
    with pytest.raises(OSError):
        m.add("never", id="x")
    _interrupts.set_fault_hook(None)
    assert m._journal.unlogged_voids == [1]
    source = open(journal.__file__).read().splitlines()
    line = 1 + next(
        i for i, s in enumerate(source) if "self.unlogged_voids = none_left  # the snapshot holds" in s
    )
    sent = []

    def tracer(frame, event, arg):
        if frame.f_code.co_name != "write_snapshot_and_rotate":
            return None

        def local(frame, event, arg):
            if event == "line" and frame.f_lineno == line and not sent:
                sent.append(1)
                os.kill(os.getpid(), signal.SIGINT)
            return local

        return local

    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            m.checkpoint()
    finally:
        sys.settrace(None)
    assert sent and m._journal.unlogged_voids == []
    m.add("next", id="n")
    assert _reader(tmp_path / "s") == {"k": "kept", "n": "next"}


# ---- the second review's cases ----------------------------------------------------------------


def test_a_reader_follows_a_checkpoint_taken_while_voids_were_pending(tmp_path, fault):
    m = _memory(tmp_path / "s")
    m.add("kept", id="k")
    reader = Memory(embedder=HashingEmbedder(dim=16), path=tmp_path / "s", read_only=True)
    assert _contents(reader) == {"k": "kept"}
    fault("memory.add:log", OSError)
    with pytest.raises(OSError):
        m.add_many(["a", "b"], ["a", "b"])
    _interrupts.set_fault_hook(None)
    m.checkpoint()  # logs the voids first: the snapshot's sequence number names them
    assert _contents(reader) == {"k": "kept"}  # adopted the snapshot at its sequence number
    m.add("next", id="n")
    assert _contents(reader) == {"k": "kept", "n": "next"}  # was: IndexFormatError on every read


def test_a_search_that_waited_for_the_lock_never_sees_an_add_that_was_not_logged(
    tmp_path, fault, monkeypatch
):
    import time

    m = _memory(tmp_path / "s")
    m.add("kept", id="k")
    found = {}

    def searcher():
        found["ids"] = [r.id for r in m.search("never a", k=5)]  # touch=True logs what it returns

    real_add_logged = type(m._journal).add_logged

    def add_logged(self, *args, **kwargs):  # the writer lock is held: the search waits for it
        found["thread"] = threading.Thread(target=searcher)
        found["thread"].start()
        time.sleep(0.3)
        return real_add_logged(self, *args, **kwargs)

    monkeypatch.setattr(type(m._journal), "add_logged", add_logged)
    fault("memory.add:log", OSError)
    _fail_first_call(m._rows, "roll_back_add", MemoryError("roll-back cut off"))
    with pytest.raises(MemoryError):
        m.add_many(["never a", "never b"], ["a", "b"])
    _interrupts.set_fault_hook(None)
    found["thread"].join()
    assert found["ids"] == ["k"]
    m.add("next", id="n")
    assert _reader(tmp_path / "s") == {"k": "kept", "n": "next"}


def test_a_checkpoint_whose_new_log_fails_to_set_up_keeps_writing_where_readers_look(tmp_path, monkeypatch):
    m = _memory(tmp_path / "s")
    m.add("one", id="1")
    m.add("two", id="2")
    _fail_first_call(log_module, "fsync_dir", OSError(5, "EIO on the directory's fsync"))
    with pytest.raises(OSError):
        m.checkpoint()
    m.add("three", id="3")
    assert _reader(tmp_path / "s") == {"1": "one", "2": "two", "3": "three"}  # was {'1': 'one'}


def test_a_double_failure_in_the_index_is_settled_by_the_memorys_roll_back(tmp_path, fault, monkeypatch):
    from poincare_index.columns import ColumnStore

    m = _memory(tmp_path / "s")
    m.add("kept", id="k")
    real_undo, calls = ColumnStore.undo, []

    def undo_fails_once(self, token):
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError("undo cut off")
        return real_undo(self, token)

    monkeypatch.setattr(ColumnStore, "undo", undo_fails_once)
    fault("index.add:core", MemoryError)
    with pytest.raises(MemoryError):
        m.add_many(["a", "b"], ["a", "b"])
    _interrupts.set_fault_hook(None)
    assert m.to_arrow().num_rows == 1 and [r.id for r in m.search("kept", filters={"id": "k"})] == ["k"]
    m.index._check_consistent()


def test_a_readers_session_list_sees_the_writers_first_session_memory(tmp_path):
    w = _memory(tmp_path / "s")
    w.add("plain", id="p")
    r = Memory(embedder=HashingEmbedder(dim=16), path=tmp_path / "s", read_only=True)
    w.session("s1").add("in session", id="x")
    assert [x.id for x in r.session("s1").list()] == ["x"]
