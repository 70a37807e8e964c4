"""Retrieval counters that last: searches and tokens retrieved, per hour and per session.

A writer keeps them in ``usage.json`` beside the store's configuration (checksummed, replaced
atomically at every checkpoint and on close), so ``stats()`` after reopening continues where
the last session stopped and ``stats(since=...)`` answers for a period (hour resolution). A
crash loses the counts since the last checkpoint, never the memories. Read-only openers count
their own searches in memory only (they do not write to the store).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._checked import checked_int, checked_list
from .._core import IndexFormatError

__all__ = ["UsageCounter", "Usage"]

_US_PER_HOUR = 3_600_000_000
USAGE_VERSION = 1


@dataclass(frozen=True)
class Usage:
    """Searches and the tokens (by the store's token counter) of the texts they returned."""

    retrievals: int = 0
    tokens_retrieved: int = 0

    @property
    def tokens_per_retrieval(self) -> float:
        return self.tokens_retrieved / self.retrievals if self.retrievals else 0.0


class UsageCounter:
    """Counts per (hour, session) bucket; thread-safe."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[int, str], list[int]] = {}
        self._lock = threading.Lock()

    def record(self, at_us: int, session: str | None, tokens: int) -> None:
        key = (at_us - at_us % _US_PER_HOUR, session or "")
        with self._lock:
            bucket = self._buckets.setdefault(key, [0, 0])
            bucket[0] += 1
            bucket[1] += tokens

    def total(self, since_us: int | None = None) -> tuple[Usage, dict[str, Usage]]:
        """(all searches, per session) in the hours from the one holding ``since_us`` on."""
        start = None if since_us is None else since_us - since_us % _US_PER_HOUR
        overall, sessions = [0, 0], {}
        with self._lock:
            items = list(self._buckets.items())
        for (hour, session), (n, tokens) in items:
            if start is not None and hour < start:
                continue
            overall[0] += n
            overall[1] += tokens
            if session:
                s = sessions.setdefault(session, [0, 0])
                s[0] += n
                s[1] += tokens
        return Usage(*overall), {k: Usage(*v) for k, v in sorted(sessions.items())}

    # ---- persistence ----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        with self._lock:
            rows = [
                [hour, session, n, tokens] for (hour, session), (n, tokens) in sorted(self._buckets.items())
            ]
        return {"version": USAGE_VERSION, "buckets": rows}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], where: str) -> UsageCounter:
        """The counter a file holds; IndexFormatError naming what is wrong."""
        if checked_int(dict(doc), "version", where) != USAGE_VERSION:
            raise IndexFormatError(f"{where}: usage format version {doc['version']} is not supported")
        out = cls()
        for i, row in enumerate(checked_list(dict(doc), "buckets", where)):
            if not (isinstance(row, list) and len(row) == 4 and isinstance(row[1], str)):
                raise IndexFormatError(f"{where}: bucket {i} is not [hour, session, searches, tokens]")
            cell = {"hour": row[0], "searches": row[2], "tokens": row[3]}
            hour = checked_int(cell, "hour", f"{where} bucket {i}")
            n = checked_int(cell, "searches", f"{where} bucket {i}", 0)
            tokens = checked_int(cell, "tokens", f"{where} bucket {i}", 0)
            out._buckets[(hour, row[1])] = [n, tokens]
        return out


def load_usage(directory: Path) -> UsageCounter:
    from .._durable import read_json_checked

    path = directory / "usage.json"
    if not path.exists():  # a new store, or one written before step 7
        return UsageCounter()
    return UsageCounter.from_json(read_json_checked(path, "the usage counters"), str(path))


def save_usage(directory: Path, counter: UsageCounter) -> None:
    from .._durable import write_json_atomic

    write_json_atomic(directory / "usage.json", counter.to_json())
