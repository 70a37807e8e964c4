"""The agent-memory layer: :class:`Memory` (text in, time-aware recall out) on a PoincareIndex.

Files: memory.py (the Memory class), state.py (what each operation does to the state, and
compaction), search.py (vector / keyword / hybrid ranking), rows.py (input checks), log.py +
store.py + journal.py (persistence: append-only log, snapshots, replay, readers following the
writer), opening.py (configuration), keyword.py (incremental BM25 + score fusion), session.py,
retention.py (Retention, Parquet archives), usage.py (lasting stats counters), views.py (results
and tables), tokens.py (token counting), result.py (Result, MemoryStats), aio.py (AsyncMemory).
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
