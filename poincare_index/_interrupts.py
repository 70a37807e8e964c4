"""What keeps a write whole when the caller is interrupted.

Python raises KeyboardInterrupt at whatever bytecode the main thread is running when SIGINT
arrives, so a cleanup written as ``except BaseException: undo()`` can itself be cut in half, and
an exception raised just after a step completed looks the same as one raised by the step. Two
rules make a write whole instead:

- A write's steps that change state run inside :func:`deferred_interrupts`: SIGINT is held back
  and raised when the block ends, i.e. between two steps, never inside one. Long C++ calls lose
  nothing by it: Python could not raise inside them anyway.
- Recovery after an exception decides from the state, never from which exception arrived
  where: the index's core says whether an add chunk went in (PoincareIndex._add_chunk_rows), and
  a Memory's one pending step, set before a write and replaced in the same step that logs it,
  says whether the write was acknowledged (memory.journal.Journal.add_logged, settle_pending).

:func:`fault_point` is the tests' hook: they install a function that raises at a named step, so
every step of a write is tested being cut off (tests/test_interrupted_writes.py and
tests/test_interrupted_memory.py).
"""

from __future__ import annotations

import os
import signal
import threading

try:  # the C functions behind signal.signal/getsignal, without their enum conversions (~8 us a call)
    import _signal as _raw_signal
except ImportError:  # pragma: no cover - not CPython
    _raw_signal = signal  # type: ignore[assignment]
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

__all__ = ["InconsistentStateError", "deferred_interrupts", "fault_point", "set_fault_hook"]


class InconsistentStateError(RuntimeError):
    """An object's parts disagree (a write was cut off and could not be settled): it refuses to
    be saved, so a good file on disk is never replaced by it."""


_held = threading.local()  # per thread: how deep in deferred_interrupts, and a held signal
_fault_hook: Callable[[str], None] | None = None


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Holds SIGINT back for the block and raises it (as the handler that was installed would)
    when the block ends. Nested blocks hold it until the outermost ends. Outside the main thread,
    or where the handler cannot be replaced, a no-op: Python delivers signals to the main thread
    only, so no KeyboardInterrupt can arrive in another thread."""
    depth = getattr(_held, "depth", 0)
    if depth > 0:
        _held.depth = depth + 1
        try:
            yield
        finally:
            _held.depth -= 1
        return
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _raw_signal.getsignal(signal.SIGINT) is None:  # installed from C: it cannot be put back
        yield
        return
    caught: list[tuple[int, Any]] = []

    def hold(signum: int, frame: Any) -> None:
        caught.append((signum, frame))

    try:
        previous = _raw_signal.signal(signal.SIGINT, hold)
    except (ValueError, OSError):  # pragma: no cover - e.g. an embedding without signals
        yield
        return
    _held.depth = 1
    try:
        yield
    finally:
        _held.depth = 0
        _raw_signal.signal(signal.SIGINT, previous)
        if caught:
            _deliver(previous, *caught[0])


def _deliver(handler: Any, signum: int, frame: Any) -> None:
    """Runs what SIGINT would have run under ``handler``."""
    if callable(handler):
        handler(signum, frame)  # the default handler raises KeyboardInterrupt here
    elif handler == signal.SIG_DFL:
        os.kill(os.getpid(), signum)
    # SIG_IGN (or None: installed from C): the signal was to be ignored


def fault_point(step: str) -> None:
    """Marks a step of a write; the test hook (if any) may raise there."""
    if _fault_hook is not None:
        _fault_hook(step)


def set_fault_hook(hook: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """Installs ``hook`` (called with each step's name; None removes it); returns the previous
    one. For tests only."""
    global _fault_hook
    previous, _fault_hook = _fault_hook, hook
    return previous
