"""Beyond one machine: :class:`ShardedIndex`, the index API over shards that are Ray actors, and
:class:`MemoryService`, namespaces of Memory on Ray actors. Needs the ``[ray]`` extra; Ray is
imported when one of them is made, not with this module."""

from .memory_service import MemoryService, RemoteMemory, RemoteSession
from .results import ShardedScoredResults, ShardedSearchResult
from .routing import shard_of
from .sharded import ShardedIndex
from .slots import ShardUnavailableError

__all__ = [
    "MemoryService", "RemoteMemory", "RemoteSession", "ShardedIndex", "ShardUnavailableError",
    "ShardedScoredResults", "ShardedSearchResult", "shard_of",
]  # fmt: skip
