"""A closed Memory (and its sessions) refuses every call with ClosedError naming the call, and a
checkpoint after close never replaces the store's last one (tests/test_closed.py's enumeration of
the public surface, applied to the memory layer)."""

from __future__ import annotations

import threading

import pytest
from test_closed import assert_refuses_every_call

from poincare_index._closing import ClosedError
from poincare_memory import AsyncMemory, Memory


def test_a_closed_memory_refuses_every_call(tmp_path):
    mem = Memory(path=tmp_path, num_threads=1)
    mem.add("kept", id="a")
    session = mem.session("s1")
    mem.close()
    called = assert_refuses_every_call(mem, "this Memory is closed")
    assert {"add", "search", "checkpoint", "refresh", "__len__", "__contains__"} <= set(called)
    assert len(called) >= 30
    assert_refuses_every_call(session, "its Memory is closed")
    with Memory(path=tmp_path, num_threads=1) as again:  # the store is as it was closed
        assert [r.id for r in again] == ["a"]


def test_a_closed_in_memory_store_and_its_async_front_refuse_too():
    mem = Memory()
    mem.add("x", id="a")
    front = AsyncMemory(mem)
    mem.close()
    assert_refuses_every_call(mem, "this Memory is closed")
    assert front.closed is True


def test_a_write_waiting_for_the_lock_while_the_memory_closes_is_refused(tmp_path):
    mem = Memory(path=tmp_path, num_threads=1)
    mem.add("before", id="a")
    outcome: list[object] = []
    with mem._lock.writing():  # a write in progress
        writer = threading.Thread(target=lambda: outcome.append(_try(lambda: mem.add("late", id="b"))))
        writer.start()
        writer.join(0.2)  # it passed the closed check and waits for the lock
        mem._closed = True  # close() would take the lock the test holds: its flag is what matters
    writer.join()
    mem._closed = False
    mem.close()
    assert isinstance(outcome[0], ClosedError)
    with Memory(path=tmp_path, num_threads=1) as again:
        assert [r.id for r in again] == ["a"]


def _try(call):
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - the outcome is the exception
        return exc


def test_closing_twice_is_harmless_and_the_error_is_a_value_error(tmp_path):
    mem = Memory(path=tmp_path)
    mem.close()
    mem.close()
    with pytest.raises(ValueError, match=r"Memory\.add: this Memory is closed"):
        mem.add("x")
