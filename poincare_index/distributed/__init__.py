"""Beyond one machine: :class:`ShardedIndex`, the index API over shards that are Ray actors.
Needs the ``[ray]`` extra; Ray is imported when a ShardedIndex is made, not with this module."""

from .sharded import ShardedIndex, ShardUnavailableError, shard_of

__all__ = ["ShardedIndex", "ShardUnavailableError", "shard_of"]
