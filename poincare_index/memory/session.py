"""Sessions: memories tagged with a session id, searched within that session only."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._closing import refuse_when_closed
from .result import Result

if TYPE_CHECKING:
    from .memory import Memory

__all__ = ["Session", "SESSION_KEY"]

SESSION_KEY = "session"  # the metadata key that tags a memory with its session


def session_id_or_new(session_id: str | None) -> str:
    """``session_id``, or a new random one for None; TypeError for anything but a non-empty str."""
    if session_id is None:
        return uuid.uuid4().hex
    if not isinstance(session_id, str) or not session_id:
        raise TypeError("session_id must be a non-empty str")
    return session_id


@refuse_when_closed("session")
class Session:
    """A scope over one Memory: ``add`` tags memories with ``metadata["session"] = id``;
    ``search``/``list`` see only this session's memories (a hard filter pushed into the index).

    Leaving a ``with`` block deletes nothing; :meth:`end` deletes the session's memories, or
    archives them to a Parquet file first (``end(archive="s1.parquet")``).
    """

    def __init__(self, memory: Memory, session_id: str | None = None) -> None:
        self.memory = memory
        self.id = session_id_or_new(session_id)

    @property
    def _closed(self) -> str | bool:
        """Closed with its Memory (the reason _closing shows)."""
        return "its Memory is closed" if self.memory.closed else False

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def _scoped(self, filters: Mapping[str, Any] | None) -> dict[str, Any]:
        own = {SESSION_KEY: self.id}
        return own if filters is None else {"$and": [own, dict(filters)]}

    def _metadata(self, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
        meta = dict(metadata or {})
        if meta.get(SESSION_KEY, self.id) != self.id:
            raise ValueError(f"metadata {SESSION_KEY!r} is set by the session ({self.id!r})")
        meta[SESSION_KEY] = self.id
        return meta

    def add(self, text: str, id: str | None = None, **kwargs: Any) -> str:
        kwargs["metadata"] = self._metadata(kwargs.get("metadata"))
        return self.memory.add(text, id, **kwargs)

    def add_many(self, texts: Any, ids: Any = None, **kwargs: Any) -> list[str]:
        metas = kwargs.get("metadata") or [None] * len(texts)
        kwargs["metadata"] = [self._metadata(m) for m in metas]
        return self.memory.add_many(texts, ids, **kwargs)

    def search(self, query: str | None = None, k: int = 5, **kwargs: Any) -> list[Result]:
        """Memory.search restricted to this session (see Memory.search's ``session=``)."""
        return self.memory.search(query, k, session=self.id, **kwargs)

    def list(self, filters: Any = None) -> list[Result]:
        """This session's memories (optionally narrowed by a dict or callable filter)."""
        self.memory.refresh()  # a reader: the writer's first session memory may be newer
        if not self.memory.has_metadata(SESSION_KEY):
            return []  # no memory was ever added in a session
        if filters is None or isinstance(filters, Mapping):
            return self.memory.list(self._scoped(filters))
        return [r for r in self.memory.list(self._scoped(None)) if filters(r)]

    def end(self, archive: str | os.PathLike[str] | None = None) -> int:
        """Delete this session's memories (after writing them to ``archive``, a new Parquet
        file, when given). Returns how many were removed."""
        self.memory.refresh()
        if not self.memory.has_metadata(SESSION_KEY):
            return 0
        if archive is None:
            return self.memory.delete(filters={SESSION_KEY: self.id})
        from datetime import timedelta

        return self.memory.forget(
            timedelta(0), at_time=_far_future(), filters={SESSION_KEY: self.id}, archive=archive
        )

    def __repr__(self) -> str:
        return f"Session({self.id!r})"


def _far_future() -> Any:
    from .._time import MAX_TIME_US, micros_to_datetime

    return micros_to_datetime(MAX_TIME_US)  # the latest time accepted (every memory is older)
