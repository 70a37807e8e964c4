"""Beyond one machine: :class:`ShardedIndex`, the index API over shards that are Ray actors.
Needs the ``[ray]`` extra; Ray is imported when a ShardedIndex is made, not with this module."""

from .results import ShardedScoredResults, ShardedSearchResult
from .routing import shard_of
from .sharded import ShardedIndex
from .slots import ShardUnavailableError

__all__ = ["ShardedIndex", "ShardUnavailableError", "ShardedScoredResults", "ShardedSearchResult", "shard_of"]
