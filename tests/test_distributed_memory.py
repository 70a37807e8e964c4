"""MemoryService on a real local Ray cluster: every Memory method offered remotely, results equal
to a local Memory given the same calls, the Memory's own exceptions, sessions, and a host whose
process is SIGKILLed coming back with every acknowledged write (with a path) or saying its
namespaces are lost (without)."""

from __future__ import annotations

import inspect
import os
import signal
import time
from datetime import datetime, timedelta, timezone

import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("ray")

import ray  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index.distributed import MemoryService, RemoteMemory, RemoteSession, ShardUnavailableError  # noqa: E402
from poincare_index.memory.memory import Memory  # noqa: E402
from poincare_index.memory.session import Session  # noqa: E402

pytestmark = pytest.mark.usefixtures("local_ray")

T0 = datetime(2026, 3, 1, tzinfo=timezone.utc)
NOTES = ["likes green tea", "allergic to peanuts", "works on hyperbolic indexes", "runs on Sundays",
         "prefers window seats", "reads about Ray actors", "drinks coffee at noon"]  # fmt: skip


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_every_public_member_of_memory_and_session_is_offered():
    assert _public(Memory) - {"index", "inspect"} <= _public(RemoteMemory)
    assert _public(Session) <= _public(RemoteSession) | {"memory", "id"}
    # the same signatures, so a caller's keywords are checked as Memory checks them
    assert inspect.signature(RemoteMemory.search) == inspect.signature(Memory.search)
    assert inspect.signature(RemoteSession.add) == inspect.signature(Session.add)


def _fill(memory) -> list[str]:
    return [memory.add(text, t=T0 + timedelta(hours=i), metadata={"n": i}) for i, text in enumerate(NOTES)]


def test_namespaces_answer_as_local_memories_and_persist(tmp_path):
    decay = pi.HalfLife(hours=24)
    service = MemoryService(tmp_path / "svc", hosts=2, decay=decay)
    names = ["alice", "bob", "carol", "dave"]
    assert {service.host_of(n) for n in names} == {0, 1}  # both hosts hold some
    at = T0 + timedelta(days=1)
    for name in names:
        remote, local = service.namespace(name), Memory(decay=decay, path=tmp_path / "local", namespace=name)
        ids = _fill(remote)
        assert ids == [i for i in ids if isinstance(i, str)] and len(remote) == len(NOTES)
        _fill(local)
        for query in ("tea", "Ray"):
            got = remote.search(query, k=3, at_time=at, filters={"n": {"$gte": 1}})
            want = local.search(query, k=3, at_time=at, filters={"n": {"$gte": 1}})
            assert [r.text for r in got] == [r.text for r in want]
            assert [r.score for r in got] == pytest.approx([r.score for r in want], rel=1e-12)
        assert remote.get(ids[2]).text == NOTES[2]
        assert remote.decay == decay and remote.path == tmp_path / "svc" / name
        local.close()
    assert service.namespaces() == sorted(names)
    service.close()
    # everything acknowledged is in the files: a plain Memory opens them
    reopened = Memory(path=tmp_path / "svc", namespace="carol")
    assert sorted(r.text for r in reopened.list()) == sorted(NOTES)
    reopened.close()
    with pytest.raises(ValueError, match="closed"):
        service.namespace("alice")


def test_the_memory_s_own_exceptions_come_back_as_themselves(tmp_path):
    service = MemoryService(tmp_path, hosts=2)
    alice = service.namespace("alice")
    mid = alice.add("first note", t=T0)
    with pytest.raises(TypeError):
        alice.add(42)
    with pytest.raises(ValueError, match="exists"):
        alice.add("again", id=mid)
    with pytest.raises(KeyError):
        alice.update("no-such-id", text="x")
    with pytest.raises(ValueError):
        service.namespace("../escape")  # refused on the driver
    with pytest.raises(TypeError):
        service.namespace(7)
    assert len(alice) == 1  # nothing the refused calls sent was written
    alice.close()
    with pytest.raises(ValueError, match="closed"):
        alice.search("note")
    with pytest.raises(ValueError, match="closed"):
        alice.decay  # noqa: B018 - a property is a remote call too
    assert len(service.namespace("alice")) == 1  # opened again
    service.close()


def test_bad_service_arguments_are_refused_before_any_actor_starts(tmp_path):
    with pytest.raises(TypeError, match="path"):
        MemoryService(tmp_path, path=tmp_path)
    with pytest.raises(TypeError, match="namespace"):
        MemoryService(tmp_path, namespace="x")
    with pytest.raises(TypeError, match="memory_options"):
        MemoryService(tmp_path, decy=pi.HalfLife(hours=1))
    with pytest.raises(ValueError):
        MemoryService(tmp_path, hosts=0)
    with pytest.raises(ValueError):
        MemoryService(tmp_path, call_timeout=float("nan"))
    with pytest.raises(ValueError, match="max_restarts"):
        MemoryService(tmp_path, actor_options={"max_restarts": 3})


def test_sessions_are_scoped_on_the_host(tmp_path):
    service = MemoryService(tmp_path, hosts=1)
    bob = service.namespace("bob")
    bob.add("outside any session", t=T0)
    with bob.session("s1") as s:
        s.add("inside the session", t=T0)
        assert [r.text for r in s.search("session", k=5, at_time=T0)] == ["inside the session"]
        assert len(s.list()) == 1
    assert s.end() == 1
    assert [r.text for r in bob.list()] == ["outside any session"]
    service.close()


def _sigkill_host(service: MemoryService, host: int) -> int:
    actor = service.actors[host]
    pid = ray.get(actor.pid.remote())
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.slow
def test_a_killed_host_comes_back_with_every_acknowledged_write(tmp_path):
    service = MemoryService(tmp_path, hosts=2, call_timeout=60)
    alice = service.namespace("alice")
    ids = _fill(alice)
    assert alice.delete(ids[0]) == 1
    host = service.host_of("alice")
    old = _sigkill_host(service, host)
    deadline = time.monotonic() + 60
    while True:  # Ray restarts the host; the call in flight when it died may fail, none after
        try:
            assert ray.get(service.actors[host].pid.remote(), timeout=30) != old
            break
        except ray.exceptions.RayActorError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert sorted(r.text for r in alice.list()) == sorted(NOTES[1:])
    alice.add("after the restart", t=T0)
    assert len(alice) == len(NOTES)
    service.close()


def test_without_a_path_a_dead_host_says_its_namespaces_are_lost():
    service = MemoryService(hosts=1)
    eve = service.namespace("eve")
    eve.add("held in memory only", t=T0)
    _sigkill_host(service, 0)
    with pytest.raises(ShardUnavailableError, match="memory host 0 .*'eve'.*lost"):
        for _ in range(100):  # the death may take a moment to be seen
            eve.search("memory")
            time.sleep(0.1)
    service.close()
