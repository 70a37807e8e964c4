"""A readers-writer lock for the index's columns and the Memory's structure."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ReadWriteLock"]


class ReadWriteLock:
    """Many readers (searches) or one writer (growing the arrays). A waiting writer goes first:
    searches that arrive after it wait, so a stream of searches cannot starve an add.

    Reads nest: a thread that already reads (or writes) may read again without waiting (a filter
    callable that looks a memory up during a search). Taking the write lock while reading would
    wait forever, so it raises instead."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer: int | None = None  # the writing thread's ident
        self._writers_waiting = 0
        self._readers_waiting = 0
        self._local = threading.local()

    # Both context managers take the lock inside their try: a KeyboardInterrupt that Python
    # raises right after the lock is taken (at the condition's exit, a call) still releases it.
    @contextmanager
    def reading(self) -> Iterator[None]:
        me = threading.get_ident()
        depth = getattr(self._local, "depth", 0)
        held = False
        try:
            with self._cond:
                if depth == 0 and self._writer != me:
                    self._readers_waiting += 1
                    try:
                        while self._writer is not None or self._writers_waiting:
                            self._cond.wait()
                    finally:
                        self._readers_waiting -= 1
                        self._cond.notify_all()  # a writer in let_readers_in() waits for this
                self._readers += 1
                held = True
            self._local.depth = depth + 1
            yield
        finally:
            self._local.depth = depth
            if held:
                with self._cond:
                    self._readers -= 1
                    if self._readers == 0:
                        self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        if getattr(self._local, "depth", 0):
            raise RuntimeError(
                "a write was started while this thread is reading (e.g. a filter callable that "
                "adds or deletes during a search); do it after the read returns"
            )
        held = False
        try:
            with self._cond:
                self._writers_waiting += 1
                try:
                    while self._writer is not None or self._readers:
                        self._cond.wait()
                finally:
                    self._writers_waiting -= 1
                self._writer = threading.get_ident()
                held = True
            yield
        finally:
            if held:
                with self._cond:
                    self._writer = None
                    self._cond.notify_all()

    def let_readers_in(self, timeout: float = 0.05) -> None:
        """Between two writes of one long job (a retention run's chunks): waits, up to ``timeout``
        seconds, until the readers waiting now have entered. Without it the writing thread takes
        the lock again before a woken reader runs, and searches wait for the whole job."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._readers_waiting and self._writer is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)
