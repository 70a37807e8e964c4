"""The agent-memory layer: :class:`Memory` (text in, time-aware recall out) on a PoincareIndex.

Files: memory.py (the Memory class: a front over the parts it owns), state.py (MemoryRows: the
rows, what each operation does to them, compaction's rebuild, every read of them), search.py
(SearchRequest, checked when made, and vector / keyword / hybrid ranking over the rows),
journal.py + log.py + store.py (persistence: append-only log, snapshots, replay, readers
following the writer), rows.py (input checks), opening.py (configuration), keyword.py
(incremental BM25 + score fusion), session.py, retention.py (Retention, Parquet archives),
usage.py (lasting stats counters), tokens.py (token counting), result.py (Result, MemoryStats),
aio.py (AsyncMemory).
"""

from __future__ import annotations

from .aio import AsyncMemory
from .log import LogDamageError, RecoveryWarning
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
    "LogDamageError",
    "RecoveryWarning",
    "approx_token_count",
]
