"""MemoryService: namespaces of :class:`~poincare_index.memory.Memory` hosted on Ray actors, for a
service that keeps one memory per user or agent and serves them from many processes.

Each namespace lives on one host actor, chosen by a hash of its name (the same on every driver
and run for a given number of hosts); a host opens a namespace on its first call, as
``Memory(path=path, namespace=name, **memory_options)``. :class:`RemoteMemory` offers Memory's
methods by the same names and signatures (built from Memory's, and a test checks that none is
missing); each call is one remote call to the namespace's host, which runs it on its Memory and
sends back the return value, or raises the Memory's own exception (a ValueError stays a
ValueError). What cannot cross a process boundary stays on the host: ``index`` and ``inspect``
are not offered, and ``Session.end(archive=...)`` writes its file on the host's machine.

Durability is the Memory's own: with a ``path``, every acknowledged write is in the namespace's
log when the call returns, a host that dies (killed, its process or node gone) is restarted by
Ray and reopens each namespace from its files on the next call to it, so no acknowledged write
is lost (on a multi-node cluster the path must be a shared file system); the call that was in
flight raises :class:`ShardUnavailableError` and was not acknowledged. Without a path the
namespaces live in the hosts' memory only: a dead host's namespaces are gone, and every later
call to them raises :class:`ShardUnavailableError` saying so.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import _time
from .._closing import ClosedError, refuse_when_closed
from .._validation import as_positive_int
from ..memory.memory import Memory
from ..memory.mirror import mirror
from ..memory.session import Session, session_id_or_new
from ..memory.store import valid_namespace
from ._ray_support import as_seconds, import_ray
from .routing import shard_of
from .slots import ShardUnavailableError, own_exception

__all__ = ["MemoryService", "RemoteMemory", "RemoteSession"]

# Memory's members that a remote memory does not offer: the index object and the inspector's
# web server live in the host's process; the constructor's own keywords are the service's.
_NOT_REMOTE = ("index", "inspect")
_SET_BY_SERVICE = ("path", "namespace")


class _Host:
    """The actor behind a MemoryService host: the namespaces it opened, by name."""

    def __init__(self, path: str | None, options: dict[str, Any]) -> None:
        self.path = path
        self.options = options
        self.open: dict[str, Memory] = {}
        self.lock = threading.Lock()  # the actor runs calls on several threads

    def _memory(self, name: str) -> Memory:
        with self.lock:
            memory = self.open.get(name)
            if memory is None:
                memory = Memory(path=self.path, namespace=name, **self.options)
                self.open[name] = memory
            return memory

    def call(self, name: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return getattr(self._memory(name), method)(*args, **kwargs)

    def attribute(self, name: str, attribute: str) -> Any:
        return getattr(self._memory(name), attribute)

    def call_session(
        self, name: str, session_id: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        return getattr(self._memory(name).session(session_id), method)(*args, **kwargs)

    def close_namespace(self, name: str) -> None:
        with self.lock:
            memory = self.open.pop(name, None)
        if memory is not None:
            memory.close()

    def names(self) -> list[str]:
        with self.lock:
            return sorted(self.open)

    def close(self) -> None:
        with self.lock:
            memories, self.open = list(self.open.values()), {}
        for memory in memories:
            memory.close()

    def pid(self) -> int:
        return os.getpid()


@refuse_when_closed("MemoryService")
class MemoryService:
    """``MemoryService(path=None, *, hosts=2, actor_options=None, call_timeout=60.0,
    **memory_options)``: ``hosts`` Ray actors holding namespaces of Memory. ``memory_options``
    are Memory's keywords (``decay``, ``embedder``, ``retention``, ...; not ``path`` or
    ``namespace``), the same for every namespace; ``actor_options`` go to Ray's
    ``.options()`` (``num_cpus``, ``scheduling_strategy``, ...; default: 1 CPU, up to 4
    calls at once per host). Without ``ray.init(...)`` first, Ray starts a local cluster.

    >>> service = MemoryService("memories", hosts=2, decay=HalfLife(hours=24))  # doctest: +SKIP
    >>> alice = service.namespace("alice")                                     # doctest: +SKIP
    >>> alice.add("likes tea"); alice.search("drinks", k=1)                    # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        hosts: int = 2,
        actor_options: dict[str, Any] | None = None,
        call_timeout: float = 60.0,
        **memory_options: Any,
    ) -> None:
        self._closed = False
        ray = import_ray()
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        self._hosts = as_positive_int(hosts, "hosts")
        if actor_options is not None and not isinstance(actor_options, dict):
            raise TypeError(f"actor_options must be a dict, got {type(actor_options).__name__}")
        for key in _SET_BY_SERVICE:
            if key in memory_options:
                raise TypeError(f"MemoryService sets {key!r} itself: give path= to the service")
        try:  # a misspelt keyword fails here, not on the first call to each host
            inspect.signature(Memory).bind_partial(**memory_options)
        except TypeError as exc:
            raise TypeError(f"memory_options: {exc}") from None
        self._path = None if path is None else str(Path(path).absolute())
        if self._path is not None:
            Path(self._path).mkdir(parents=True, exist_ok=True)
        self._timeout = as_seconds(call_timeout, "call_timeout")
        options = {"num_cpus": 1, "max_concurrency": 4, **(actor_options or {})}
        if "max_restarts" in options:
            raise ValueError("MemoryService chooses max_restarts itself (restarted with a path, not without)")
        # With a path a restarted host reopens its namespaces from their files; without one it
        # would come back empty, so it stays dead and its namespaces say so.
        options["max_restarts"] = -1 if self._path is not None else 0
        remote = ray.remote(_Host)
        self._actors = [
            remote.options(**options).remote(self._path, dict(memory_options)) for _ in range(self._hosts)
        ]

    @property
    def hosts(self) -> int:
        return self._hosts

    @property
    def path(self) -> str | None:
        return self._path

    @property
    def actors(self) -> list[Any]:
        """The host actor handles, in host order (for operators and fault tests)."""
        return list(self._actors)

    def host_of(self, name: str) -> int:
        """The host that holds namespace ``name``: splitmix64(crc32(name)) mod hosts."""
        key = zlib.crc32(valid_namespace(name).encode())
        return int(shard_of(np.array([key], dtype=np.int64), self._hosts)[0])

    def namespace(self, name: str) -> RemoteMemory:
        """The :class:`RemoteMemory` of namespace ``name`` (TypeError / ValueError for a name
        Memory would refuse); opening it happens on its host at its first call."""
        valid_namespace(name)
        return RemoteMemory(self, name)

    def namespaces(self) -> list[str]:
        """The namespaces open on the hosts and those stored under the path, sorted."""
        names: set[str] = set()
        for host, actor in enumerate(self._actors):
            names.update(self._get(host, None, "names", actor.names.remote()))
        if self._path is not None:
            names.update(Memory.namespaces(self._path))
        return sorted(names)

    def close(self) -> None:
        """Closes every open namespace (each Memory's own close: its log and state flushed)
        and ends the host actors. Every later call on the service, and on its namespaces and
        their sessions, raises ClosedError. Idempotent."""
        if self._closed:
            return
        ray = import_ray()
        self._closed = True
        refs = [a.close.remote() for a in self._actors]
        try:
            for ref in refs:
                try:
                    ray.get(ref, timeout=self._timeout)
                except ray.exceptions.RayActorError:
                    pass  # a dead host has nothing left to flush (with a path, its log is on disk)
        finally:
            for actor in self._actors:
                ray.kill(actor, no_restart=True)

    def __enter__(self) -> MemoryService:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryService(path={self._path!r}, hosts={self._hosts})"

    # ---- calls ---------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:  # closed while a call of a namespace was on its way here
            raise ClosedError("MemoryService: this MemoryService is closed")

    def _get(self, host: int, name: str | None, what: str, ref: Any) -> Any:
        """The answer of one remote call: the Memory's own exception as itself; a dead or
        silent host as ShardUnavailableError naming it (and the namespace)."""
        ray = import_ray()
        where = f"memory host {host}" + ("" if name is None else f" (namespace {name!r})")
        try:
            return ray.get(ref, timeout=self._timeout)
        except ray.exceptions.RayTaskError as exc:
            raise own_exception(exc) from None
        except ray.exceptions.GetTimeoutError:
            raise ShardUnavailableError(f"{where} did not answer {what} within {self._timeout:g} s") from None
        except ray.exceptions.RayActorError as exc:
            if self._path is None:
                raise ShardUnavailableError(
                    f"{where} died during {what}; its namespaces were held in memory only (no path) "
                    "and are lost"
                ) from exc
            raise ShardUnavailableError(
                f"{where} died during {what}, which was not acknowledged; Ray restarts the host and "
                "the namespace reopens from its files on the next call"
            ) from exc

    def _call(self, name: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._check_open()
        host = self.host_of(name)
        args, kwargs = _time.with_local_zone(args), _time.with_local_zone(kwargs)  # a host's zone may differ
        return self._get(host, name, method, self._actors[host].call.remote(name, method, args, kwargs))

    def _attribute(self, name: str, attribute: str) -> Any:
        self._check_open()
        host = self.host_of(name)
        return self._get(host, name, attribute, self._actors[host].attribute.remote(name, attribute))

    def _call_session(
        self, name: str, session_id: str, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        self._check_open()
        host = self.host_of(name)
        args, kwargs = _time.with_local_zone(args), _time.with_local_zone(kwargs)
        ref = self._actors[host].call_session.remote(name, session_id, method, args, kwargs)
        return self._get(host, name, f"session.{method}", ref)

    def _close_namespace(self, name: str) -> None:
        if self._closed:
            return
        host = self.host_of(name)
        self._get(host, name, "close", self._actors[host].close_namespace.remote(name))


def _forward(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: RemoteMemory, *args: Any, **kwargs: Any) -> Any:
        return self._service._call(self._name, name, args, kwargs)

    return call


def _forward_session(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(self: RemoteSession, *args: Any, **kwargs: Any) -> Any:
        return self.memory._service._call_session(self.memory._name, self.id, name, args, kwargs)

    return call


def _read_remote(name: str) -> Callable[[RemoteMemory], Any]:
    def read(self: RemoteMemory) -> Any:
        return self._service._attribute(self._name, name)

    return read


class RemoteSession:
    """A :class:`~poincare_index.memory.Session` of a remote namespace: the same methods, each a
    call to the namespace's host (the session is a tag on memories, so it holds no state there)."""

    def __init__(self, memory: RemoteMemory, session_id: str | None = None) -> None:
        self.memory = memory
        self.id = session_id_or_new(session_id)

    @property
    def _closed(self) -> bool | str:
        """What the closed-check reads: a session closes with its namespace's handle."""
        return self.memory._closed

    @property
    def closed(self) -> bool:
        """True once its :class:`RemoteMemory` (or the service) was closed."""
        return bool(self._closed)

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __repr__(self) -> str:
        return f"RemoteSession({self.id!r} of {self.memory!r})"


class RemoteMemory:
    """Namespace ``name`` of a :class:`MemoryService`: Memory's methods and properties, each a
    remote call to the host that holds it (see the module's docstring for what differs)."""

    def __init__(self, service: MemoryService, name: str) -> None:
        self._service = service
        self._name = name
        self._own_closed = False

    @property
    def _closed(self) -> bool | str:
        """What the closed-check reads (see _closing.py): closed itself, or through its service."""
        if self._own_closed:
            return f"namespace {self._name!r} of this MemoryService is closed"
        if self._service._closed:
            return f"the MemoryService of namespace {self._name!r} is closed"
        return False

    @property
    def closed(self) -> bool:
        """True once this handle or its service was closed: every other call then raises
        ClosedError."""
        return bool(self._closed)

    @property
    def namespace(self) -> str:
        return self._name

    def session(self, session_id: str | None = None) -> RemoteSession:
        """A :class:`RemoteSession` (see :meth:`Memory.session`); making one sends nothing."""
        return RemoteSession(self, session_id)

    def close(self) -> None:
        """Closes the namespace on its host (its log and state flushed); a later call on this
        handle raises ClosedError (``service.namespace(name)`` opens it again). Idempotent."""
        if not self._own_closed:
            self._own_closed = True
            self._service._close_namespace(self._name)

    def __len__(self) -> int:
        return int(self._service._call(self._name, "__len__", (), {}))

    def __enter__(self) -> RemoteMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteMemory({self._name!r}, host {self._service.host_of(self._name)})"


mirror(Memory, RemoteMemory, _forward, _read_remote, _NOT_REMOTE)
mirror(Session, RemoteSession, _forward_session, None)
# After mirror(): the members it gave them refuse calls once closed, as their own do (the one
# check: the forwards above need none of their own).
refuse_when_closed("namespace")(RemoteMemory)
refuse_when_closed("session")(RemoteSession)
