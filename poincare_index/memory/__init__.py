"""The agent-memory layer: :class:`Memory` (text in, time-aware recall out) on a PoincareIndex.

Files: memory.py (the Memory class), search.py (vector / keyword / hybrid ranking), rows.py
(input checks), log.py + store.py (persistence: append-only log and snapshots), opening.py
(configuration), keyword.py (BM25 + rank fusion), session.py, retention.py (Retention, Parquet archives),
tokens.py (token counting), result.py (Result, MemoryStats), aio.py (AsyncMemory).
"""

from __future__ import annotations

from .aio import AsyncMemory
from .memory import Memory
from .result import Explanation, MemoryStats, Result
from .retention import Retention
from .session import Session
from .store import StoreLockedError
from .tokens import approx_token_count

__all__ = [
    "Memory",
    "AsyncMemory",
    "Result",
    "Explanation",
    "MemoryStats",
    "Session",
    "Retention",
    "StoreLockedError",
    "approx_token_count",
]
