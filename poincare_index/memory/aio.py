"""AsyncMemory: the Memory API as coroutines, for asyncio services.

Every call runs the blocking work (embedding, index search, log writes) in a worker thread via
``asyncio.to_thread``, so the event loop stays responsive; the wrapped Memory is thread-safe.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .memory import Memory
from .result import MemoryStats, Result

__all__ = ["AsyncMemory"]


class AsyncMemory:
    """``mem = AsyncMemory(decay=...)`` (same arguments as Memory) or ``AsyncMemory(memory)``."""

    def __init__(self, memory: Memory | None = None, /, **kwargs: Any) -> None:
        if memory is not None and kwargs:
            raise TypeError("pass a Memory or Memory's arguments, not both")
        if memory is not None and not isinstance(memory, Memory):
            raise TypeError(f"expected a Memory, got {type(memory).__name__}")
        self.memory = memory if memory is not None else Memory(**kwargs)

    async def add(self, text: str, id: str | None = None, **kwargs: Any) -> str:
        return await asyncio.to_thread(self.memory.add, text, id, **kwargs)

    async def add_many(self, texts: Any, ids: Any = None, **kwargs: Any) -> list[str]:
        return await asyncio.to_thread(self.memory.add_many, texts, ids, **kwargs)

    async def search(self, query: str | None = None, k: int = 5, **kwargs: Any) -> list[Result]:
        return await asyncio.to_thread(self.memory.search, query, k, **kwargs)

    async def get(self, id: str) -> Result | None:
        return await asyncio.to_thread(self.memory.get, id)

    async def delete(self, id: str | None = None, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.memory.delete, id, **kwargs)

    async def update(self, id: str, text: str | None = None, **kwargs: Any) -> None:
        await asyncio.to_thread(self.memory.update, id, text, **kwargs)

    async def invalidate(self, id: str, at: Any = None) -> None:
        await asyncio.to_thread(self.memory.invalidate, id, at)

    async def forget(self, older_than: Any, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.memory.forget, older_than, **kwargs)

    async def list(self, filters: Any = None, **kwargs: Any) -> list[Result]:
        return await asyncio.to_thread(self.memory.list, filters, **kwargs)

    async def stats(self) -> MemoryStats:
        return await asyncio.to_thread(self.memory.stats)

    async def checkpoint(self) -> None:
        await asyncio.to_thread(self.memory.checkpoint)

    async def close(self) -> None:
        await asyncio.to_thread(self.memory.close)

    def __len__(self) -> int:
        return len(self.memory)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
