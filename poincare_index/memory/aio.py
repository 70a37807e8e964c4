"""AsyncMemory: the Memory API as coroutines, for asyncio services.

Every call runs the blocking work (embedding, index search, log writes) in a worker thread via
``asyncio.to_thread``, so the event loop stays responsive; the wrapped Memory is thread-safe.

Parity is built, not listed: every public method of :class:`Memory` (and of its
:class:`Session`) gets a coroutine of the same name and signature here, and a test checks that
nothing public is missing. Properties (``decay``, ``path``, ...) and ``namespaces`` are plain
attributes, as on Memory; ``session()`` returns an :class:`AsyncSession`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from .memory import Memory
from .mirror import mirror
from .session import Session

__all__ = ["AsyncMemory", "AsyncSession"]


def _coroutine(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self._target, name), *args, **kwargs)

    return call


def _read_target(name: str) -> Callable[[Any], Any]:
    return lambda self: getattr(self._target, name)


class AsyncSession:
    """A :class:`Session` whose methods are coroutines."""

    def __init__(self, session: Session) -> None:
        self._target = session
        self.id = session.id

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None


class AsyncMemory:
    """``mem = AsyncMemory(decay=...)`` (same arguments as Memory) or ``AsyncMemory(memory)``."""

    def __init__(self, memory: Memory | None = None, /, **kwargs: Any) -> None:
        if memory is not None and kwargs:
            raise TypeError("pass a Memory or Memory's arguments, not both")
        if memory is not None and not isinstance(memory, Memory):
            raise TypeError(f"expected a Memory, got {type(memory).__name__}")
        self.memory = memory if memory is not None else Memory(**kwargs)
        self._target = self.memory

    def session(self, session_id: str | None = None) -> AsyncSession:
        """An :class:`AsyncSession` (see :meth:`Memory.session`); creating one does no I/O."""
        return AsyncSession(self.memory.session(session_id))

    def __len__(self) -> int:
        return len(self.memory)

    def __contains__(self, id: object) -> bool:
        return id in self.memory

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()  # type: ignore[attr-defined]  # made by mirror


mirror(Memory, AsyncMemory, _coroutine, _read_target)
mirror(Session, AsyncSession, _coroutine, _read_target)
