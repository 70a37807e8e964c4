"""A write cut off at any step leaves every part of the object consistent: the index's columns
agree with its core (a prefix of whole chunks), a Memory holds all of an add or none of it, a
save of a broken object is refused, and a store reopened from its log equals the object.

Exceptions are injected at each named step (poincare_index._interrupts.fault_point) and, for the
case the issue found, right after the core's add returned (a proxy around the core), which is
where a Ctrl-C used to land between the core and its columns."""

from __future__ import annotations

import numpy as np
import pytest

import poincare_index as pi
from poincare_index import _interrupts
from poincare_index.embed import HashingEmbedder
from poincare_memory import Memory

INDEX_STEPS = ("index.add:columns", "index.add:core", "index.add:done")
MEMORY_STEPS = ("memory.add:apply", "memory.add:log", "memory.add:logged")
ERRORS = (KeyboardInterrupt, MemoryError, OSError)


class _Fault:
    """Raises ``error`` at the ``nth`` time (0-based) ``step`` is reached."""

    def __init__(self, step: str, nth: int, error: type[BaseException]) -> None:
        self.step, self.nth, self.error, self.seen, self.fired = step, nth, error, 0, False

    def __call__(self, step: str) -> None:
        if step != self.step:
            return
        self.seen += 1
        if self.seen - 1 == self.nth:
            self.fired = True
            raise self.error(f"injected at {step}")


@pytest.fixture
def fault():
    installed = []

    def install(step: str, nth: int, error: type[BaseException]) -> _Fault:
        f = _Fault(step, nth, error)
        installed.append(_interrupts.set_fault_hook(f))
        return f

    yield install
    _interrupts.set_fault_hook(None)


def _points(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return pi.expmap0(rng.normal(size=(n, dim)) * 0.3).astype(np.float32)


def _index_with_churn(kind: str) -> pi.PoincareIndex | pi.PoincareFlatIndex:
    """60 points with metadata, 30 of them removed, so the next adds reuse slots."""
    if kind == "hnsw":
        index = pi.PoincareIndex(8, M=8, ef_construction=32, num_threads=1)
    else:
        index = pi.PoincareFlatIndex(8, num_threads=1)
    index._add_chunk = 25  # several chunks per add
    index.add(_points(60, 8, 0), metadata={"tag": [f"a{i}" for i in range(60)]})
    index.remove_ids(np.arange(0, 60, 2))
    return index


def _assert_whole(index, before_ids: set[int], batch_ids: np.ndarray) -> None:
    """Consistent, and holding the ids before the call plus a prefix of whole chunks of the batch."""
    index._check_consistent()
    cols = index.columns
    assert len(cols) == index._core.slots
    live = np.asarray(index._core.live_slots(), dtype=bool)
    held = set(cols.column("id").to_numpy()[live].tolist())
    added = held - before_ids
    assert before_ids <= held
    n_added = len(added)
    assert added == set(batch_ids[:n_added].tolist())
    assert n_added % index._add_chunk == 0 or n_added == len(batch_ids)
    assert index.ntotal == len(held)
    # every held point's row carries its own metadata and time
    tags = cols.column("tag").to_pylist()
    ids = cols.column("id").to_numpy()
    for row in np.flatnonzero(live):
        i = int(ids[row])
        assert tags[row] == (f"a{i}" if i < 60 else f"b{i}"), (row, i, tags[row])


@pytest.mark.parametrize("kind", ["hnsw", "flat"])
@pytest.mark.parametrize("step", INDEX_STEPS)
@pytest.mark.parametrize("nth", [0, 1])
@pytest.mark.parametrize("error", ERRORS)
def test_an_index_add_cut_off_at_any_step_keeps_a_prefix_of_whole_chunks(
    tmp_path, fault, kind, step, nth, error
):
    index = _index_with_churn(kind)
    before = set(np.asarray(index._core.slot_ids())[np.asarray(index._core.live_slots(), bool)].tolist())
    ids = np.arange(100, 170, dtype=np.int64)
    f = fault(step, nth, error)
    with pytest.raises(error):
        index.add_with_ids(_points(70, 8, 1), ids, metadata={"tag": [f"b{i}" for i in ids]})
    assert f.fired
    _interrupts.set_fault_hook(None)
    _assert_whole(index, before, ids)
    # the object goes on: the next add, a save and a load agree
    index.add_with_ids(
        _points(10, 8, 2), np.arange(500, 510), metadata={"tag": [f"b{i}" for i in range(500, 510)]}
    )
    index.save(tmp_path / "i")
    again = pi.read_index(tmp_path / "i")
    q = _points(5, 8, 3)
    np.testing.assert_array_equal(index.search(q, 5)[1], again.search(q, 5)[1])
    assert index.columns.equals(again.columns)


class _AddThenRaise:
    """The core, whose add raises KeyboardInterrupt after it completed (a Ctrl-C that Python
    raises right after the call returns): works on any version of the index."""

    def __init__(self, core) -> None:
        self._c, self.calls = core, 0

    def __getattr__(self, name):
        return getattr(self._c, name)

    def add(self, *args):
        self._c.add(*args)
        self.calls += 1
        if self.calls == 2:
            raise KeyboardInterrupt


def test_a_ctrl_c_right_after_the_cores_add_keeps_that_chunks_columns(tmp_path):
    index = pi.PoincareIndex(8, M=8, ef_construction=32, num_threads=1)
    index._add_chunk = 20
    index.add(_points(30, 8, 0))
    index.save(tmp_path / "good")
    index._core = _AddThenRaise(index._core)
    with pytest.raises(KeyboardInterrupt):
        index.add(_points(100, 8, 1))
    assert index.ntotal == 30 + 40 and len(index.columns) == 70  # two whole chunks
    index._core = index._core._c
    index.add(_points(5, 8, 2))  # the next add works
    index.save(tmp_path / "good")
    assert pi.read_index(tmp_path / "good").ntotal == 75


def test_save_refuses_an_inconsistent_index_and_keeps_the_good_file(tmp_path):
    index = pi.PoincareIndex(8, M=8, ef_construction=32, num_threads=1)
    index.add(_points(30, 8, 0))
    index.save(tmp_path / "good")
    index._columns._rows = type(index._columns._rows)(20, None)  # columns behind the core
    with pytest.raises(pi.InconsistentStateError, match="20 rows but the index has 30 slots"):
        index.save(tmp_path / "good")
    assert pi.read_index(tmp_path / "good").ntotal == 30


# ---- Memory ------------------------------------------------------------------------------------


def _memory(path) -> Memory:
    m = Memory(embedder=HashingEmbedder(dim=16), path=path)
    m.index._add_chunk = 4  # add_many goes in several index chunks
    return m


def _contents(m: Memory) -> dict[str, str]:
    return {r.id: r.text for r in m.list()}


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("step", MEMORY_STEPS + INDEX_STEPS)
@pytest.mark.parametrize("error", ERRORS)
def test_a_memory_add_many_cut_off_at_any_step_is_all_or_nothing(tmp_path, fault, persistent, step, error):
    m = _memory(tmp_path / "store" if persistent else None)
    m.add_many([f"old {i}" for i in range(5)], [f"o{i}" for i in range(5)])
    before = _contents(m)
    batch = [f"new {i}" for i in range(10)]
    f = fault(step, 1 if step.startswith("index") else 0, error)
    try:
        m.add_many(batch, [f"n{i}" for i in range(10)])
        raised = False
    except error:
        raised = True
    _interrupts.set_fault_hook(None)
    assert f.fired and raised
    got = _contents(m)
    acknowledged = step == "memory.add:logged"  # cut off after the log: the add stands
    expected = dict(before, **{f"n{i}": t for i, t in enumerate(batch)}) if acknowledged else before
    assert got == expected and len(m) == len(expected)
    m.index._check_consistent()
    assert m.search("new 3", k=1)[0].id == ("n3" if acknowledged else m.search("new 3", k=1)[0].id)
    # the next writes work, and a reader of the log (a reopened store) sees the same memories
    m.add("after", id="after")
    m.update("o1", "old one, updated")
    m.delete("o2")
    expected = dict(expected, after="after", o1="old one, updated")
    del expected["o2"]
    assert _contents(m) == expected
    if persistent:
        reader = Memory(embedder=HashingEmbedder(dim=16), path=tmp_path / "store", read_only=True)
        assert _contents(reader) == expected
        reader.close()
        m.close()
        assert _contents(_memory(tmp_path / "store")) == expected


def test_a_failed_log_write_then_an_acknowledged_add_reopens(tmp_path, monkeypatch):
    """The add whose log write failed took index rows; the next record must not leave a log that
    the store refuses on reopening (it did: 'the log does not follow its snapshot')."""
    from poincare_index.memory import log as log_module

    m = _memory(tmp_path / "s")
    m.add("first", id="a")
    real = log_module.LogWriter.append

    def full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(log_module.LogWriter, "append", full)
    with pytest.raises(OSError):
        m.add("second", id="b")
    monkeypatch.setattr(log_module.LogWriter, "append", real)
    m.add("third", id="c")
    reader = Memory(embedder=HashingEmbedder(dim=16), path=tmp_path / "s", read_only=True)
    assert _contents(reader) == {"a": "first", "c": "third"}


@pytest.mark.parametrize("error", ERRORS)
def test_an_update_cut_off_keeps_the_old_memory(tmp_path, fault, error):
    m = _memory(tmp_path / "s")
    m.add("original", id="x")
    fault("memory.add:log", 0, error)
    with pytest.raises(error):
        m.update("x", "changed")
    _interrupts.set_fault_hook(None)
    assert m["x"].text == "original" and len(m) == 1
    m.update("x", "changed at last")
    reader = Memory(embedder=HashingEmbedder(dim=16), path=tmp_path / "s", read_only=True)
    assert _contents(reader) == {"x": "changed at last"}


def test_a_held_ctrl_c_is_raised_when_the_block_ends():
    import os
    import signal

    steps = []
    with pytest.raises(KeyboardInterrupt):
        with _interrupts.deferred_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("after the signal")  # the block runs to its end
    assert steps == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_roll_back_cut_off_itself_is_finished_by_the_next_write(tmp_path, fault, monkeypatch):
    m = _memory(tmp_path / "s")
    m.add("kept", id="k")
    fault("memory.add:log", 0, KeyboardInterrupt)
    calls = []
    real_remove = type(m._rows.keyword).remove

    def remove_fails_once(self, rows):
        calls.append(rows)
        if len(calls) == 1:
            raise MemoryError("during the roll-back")
        return real_remove(self, rows)

    monkeypatch.setattr(type(m._rows.keyword), "remove", remove_fails_once)
    with pytest.raises(MemoryError):
        m.add_many(["a", "b"], ["a", "b"])
    _interrupts.set_fault_hook(None)
    assert m._journal.pending is not None
    m.add("next", id="n")  # settles the roll-back first
    assert m._journal.pending is None
    assert _contents(m) == {"k": "kept", "n": "next"} and len(m) == 2
    m.index._check_consistent()
    reader = Memory(embedder=HashingEmbedder(dim=16), path=tmp_path / "s", read_only=True)
    assert _contents(reader) == {"k": "kept", "n": "next"}
