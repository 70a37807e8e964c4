"""poincare_memory: the agent-memory API of poincare_index under the name the documentation uses.

>>> from poincare_memory import HalfLife, Memory
>>> mem = Memory(decay=HalfLife(hours=24 * 14))
"""

from __future__ import annotations

from poincare_index import (
    DecayPolicy,
    Ebbinghaus,
    Exponential,
    HalfLife,
    Product,
    ValidityWindow,
    generative_agents_recency,
)
from poincare_index.embed import CallableEmbedder, Embedder, HashingEmbedder, MiniLMEmbedder
from poincare_index.memory import (
    AsyncMemory,
    Explanation,
    LogDamageError,
    Memory,
    MemoryStats,
    RecoveryWarning,
    Result,
    Retention,
    Session,
    StoreLockedError,
    approx_token_count,
)

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
    "DecayPolicy",
    "HalfLife",
    "Ebbinghaus",
    "ValidityWindow",
    "Exponential",
    "Product",
    "generative_agents_recency",
    "Embedder",
    "HashingEmbedder",
    "CallableEmbedder",
    "MiniLMEmbedder",
]
