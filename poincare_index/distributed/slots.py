"""The driver's view of its shards: one slot per shard actor, the calls it makes on them (bounded
waits, errors re-raised as themselves, a dead shard named by its number), and restoration: with
a checkpoint, a dead shard is brought back from its last save and the writes acknowledged since
then are re-applied from the slot's log, so no acknowledged write is lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._closing import ClosedError

__all__ = ["ShardSlot", "ShardSet", "ShardUnavailableError"]


def own_exception(exc: Any) -> BaseException:
    """The exception a remote method raised, from Ray's RayTaskError around it (a KeyError
    stays a KeyError); a RuntimeError with Ray's message when it carries none."""
    return exc.cause if isinstance(exc.cause, BaseException) else RuntimeError(str(exc))


class ShardUnavailableError(RuntimeError):
    """A shard actor died, did not answer in time, or could not be restored; the message names
    the shard by its number."""


@dataclass
class ShardSlot:
    """One shard: its actor, what the driver knows of its rows (stamp bounds of every row sent,
    an upper bound of its access counts) and, with a checkpoint, where it was last saved and the
    writes acknowledged since: (sequence number, method, arguments), replayed in that order."""

    number: int
    actor: Any
    bucket: int | None = None
    t_min: int | None = None
    t_max: int | None = None
    max_access: int = 0
    saved_path: str | None = None
    saved_seq: int = 0
    log: list[tuple[int, str, tuple[Any, ...]]] = field(default_factory=list)
    retired: bool = False  # dropped (drop_before): a call that still reaches it gets nothing

    def note_times(self, t_us: NDArray[np.int64]) -> None:
        """Widens the stamp bounds to cover rows stamped ``t_us`` (removals never narrow them:
        bounds, not exact ranges)."""
        if t_us.size:
            lo, hi = int(t_us.min()), int(t_us.max())
            self.t_min = lo if self.t_min is None else min(self.t_min, lo)
            self.t_max = hi if self.t_max is None else max(self.t_max, hi)

    def saved(self, path: str, seq: int) -> None:
        """The shard's file at ``path`` holds every write up to ``seq``: later ones stay logged."""
        self.saved_path, self.saved_seq = path, seq
        self.log = [entry for entry in self.log if entry[0] > seq]


class ShardSet:
    """The slots and the calls on them. ``make_actor(path, seq)`` starts a shard actor (from a
    saved index when ``path`` is given, its sequence number at ``seq``). ``call_timeout``
    bounds every wait for an answer and ``restore_timeout`` a restoration or the start of a new
    shard; ``write_lock`` is the index's (restorations hold it); ``recover`` turns
    restoration (and the write log it needs) on."""

    def __init__(
        self, make_actor: Callable[[str | None, int], Any], *, call_timeout: float, restore_timeout: float,
        recover: bool, write_lock: Any,
    ) -> None:  # fmt: skip
        self.slots: list[ShardSlot] = []
        self._make_actor = make_actor
        self.call_timeout, self.restore_timeout, self.recover = call_timeout, restore_timeout, recover
        # Restorations take the index's write lock: no write is between its acknowledgement and
        # its log entry while the log is read, and writes wait for a restoration to finish.
        self._write_lock = write_lock
        self._log_lock = threading.Lock()
        # Set by close(): a call still running then fails as closed, and nothing is restored.
        self.closed = False

    def open(
        self, number: int, bucket: int | None = None, path: str | None = None, seq: int = 0
    ) -> ShardSlot:
        """A new slot with a new actor (an empty shard, or the one saved at ``path``); the actor
        starts in the background (see :meth:`started`)."""
        slot = ShardSlot(number, self._make_actor(path, seq), bucket, saved_path=path, saved_seq=seq)
        self.slots.append(slot)
        return slot

    def started(self, slots: Sequence[ShardSlot]) -> list[dict[str, Any]]:
        """Waits (at most ``restore_timeout``) until the actors of ``slots`` run; their
        descriptions."""
        return self.call(slots, "describe", [()] * len(slots), timeout=self.restore_timeout)[0]

    def log(self, slot: ShardSlot, seq: int, method: str, args: tuple[Any, ...]) -> None:
        """Records an acknowledged write (only with ``recover``: nothing else replays it)."""
        if self.recover:
            with self._log_lock:
                slot.log.append((seq, method, args))

    def mark_saved(self, slot: ShardSlot, path: str, seq: int) -> None:
        """``slot`` was saved to ``path`` holding every write up to ``seq`` (its log is trimmed)."""
        with self._log_lock:
            slot.saved(path, seq)

    def call(
        self, slots: Sequence[ShardSlot], method: str, args: Sequence[tuple[Any, ...]], *,
        allow_partial: bool = False, timeout: float | None = None,
        on_answer: Callable[[int, Any], None] | None = None, label: str | None = None,
    ) -> tuple[list[Any], list[int]]:  # fmt: skip
        """``method(*args[i])`` on every slot at once, one wait for all. Returns (the answers, in
        slot order, None for a shard that did not answer; the numbers of those shards, only
        with ``allow_partial``). A shard's own exception is re-raised as itself (a KeyError stays
        a KeyError). A dead shard is restored and asked again when ``recover`` is on; otherwise,
        and for a shard that does not answer within ``call_timeout``, ShardUnavailableError
        names it, unless ``allow_partial`` lists it as missing instead. A slot retired meanwhile
        answers None. ``timeout`` replaces ``call_timeout`` (for the first call on new actors,
        which waits for them to start). ``on_answer(i, answer)`` is called for every shard that
        answered, before anything is raised: a write logs what was acknowledged even when
        another shard fails. ``label`` names the call in errors (default: ``method``)."""
        import ray

        wait = self.call_timeout if timeout is None else timeout
        started = time.monotonic()
        actors = [s.actor for s in slots]  # the ones asked: a restoration elsewhere may replace them
        refs = [getattr(a, method).remote(*x) for a, x in zip(actors, args)]
        try:
            answers = list(ray.get(refs, timeout=wait))  # one wait for all: the common case
        except (ray.exceptions.RayTaskError, ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        else:
            if on_answer is not None:
                for i, answer in enumerate(answers):
                    on_answer(i, answer)
            return answers, []
        return self._sort_out(
            slots, actors, refs, method, args, wait, started, allow_partial, on_answer, label or method
        )

    def _sort_out(
        self, slots: Sequence[ShardSlot], actors: list[Any], refs: list[Any], method: str,
        args: Sequence[tuple[Any, ...]], wait: float, started: float, allow_partial: bool,
        on_answer: Callable[[int, Any], None] | None, label: str,
    ) -> tuple[list[Any], list[int]]:  # fmt: skip
        """The slow path of :meth:`call`: which shards failed, and how."""
        import ray

        answered: list[tuple[int, Any]] = []
        error: BaseException | None = None
        # One failing early leaves the others the rest of the bound.
        left = max(wait - (time.monotonic() - started), 0.0)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=left)
        self._check_open(label)  # its actors were ended: neither dead shards nor a partial answer
        done = set(ready)
        answers: list[Any] = [None] * len(slots)
        missing: list[int] = []
        for i, (slot, ref) in enumerate(zip(slots, refs)):
            problem = None
            if ref not in done:
                problem = f"shard {slot.number} did not answer {label} within {wait:g} s"
            else:
                try:
                    answers[i] = ray.get(ref)
                    answered.append((i, answers[i]))
                    continue
                except ray.exceptions.RayTaskError as exc:
                    if error is None:
                        error = own_exception(exc)
                    continue
                except ray.exceptions.RayActorError as exc:
                    if slot.retired:
                        continue
                    problem = f"shard {slot.number} is unavailable: {type(exc).__name__}"
                    if self.recover and not allow_partial and error is None:
                        try:
                            self.restore(slot, actors[i])
                            answers[i] = self._call_one(slot, method, args[i])
                            answered.append((i, answers[i]))
                            continue
                        except BaseException as failed:  # noqa: BLE001 - raised after the others are in
                            error = failed
                            continue
            if allow_partial:
                missing.append(slot.number)
            elif error is None:
                hint = "" if self.recover else " (give the index a checkpoint_path to restore dead shards)"
                error = ShardUnavailableError(problem + hint)
        if on_answer is not None:
            for i, answer in answered:
                on_answer(i, answer)
        if error is not None:
            raise error
        return answers, missing

    def _call_one(self, slot: ShardSlot, method: str, args: tuple[Any, ...]) -> Any:
        import ray

        ref = getattr(slot.actor, method).remote(*args)
        try:
            return ray.get(ref, timeout=self.call_timeout)
        except ray.exceptions.RayTaskError as exc:
            raise own_exception(exc) from None
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
            raise ShardUnavailableError(
                f"shard {slot.number} failed again after it was restored: {type(exc).__name__}"
            ) from None

    def restore(self, slot: ShardSlot, dead: Any) -> None:
        """Replaces the dead actor ``dead`` of ``slot`` by one loaded from the slot's last save
        (an empty shard if it was never saved), then replays the slot's log. A call that finds
        another thread restoring waits for it, at most ``restore_timeout``."""
        import ray

        if not self._write_lock.acquire(timeout=self.restore_timeout):
            raise ShardUnavailableError(
                f"shard {slot.number} is being restored and was not back within {self.restore_timeout:g} s"
            )
        try:
            self._check_open("restore")
            if slot.actor is not dead:  # another call restored it meanwhile
                return
            with self._log_lock:
                entries = sorted(e for e in slot.log if e[0] > slot.saved_seq)
            actor = None
            try:
                actor = self._make_actor(slot.saved_path, slot.saved_seq)
                replies = ray.get(
                    [getattr(actor, method).remote(*a) for _, method, a in entries]
                    + [actor.describe.remote()],
                    timeout=self.restore_timeout,
                )
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
                _kill(actor)
                raise ShardUnavailableError(
                    f"shard {slot.number} could not be restored from {slot.saved_path or 'an empty shard'} "
                    f"within {self.restore_timeout:g} s: {type(exc).__name__}"
                ) from None
            except ray.exceptions.RayTaskError as exc:
                _kill(actor)
                raise ShardUnavailableError(f"shard {slot.number} could not be restored: {exc}") from None
            # Each replayed write must land on the number it had: else the log is not this shard's.
            got = [r[1] if isinstance(r, tuple) else r for r in replies[:-1]]
            want = [seq for seq, _, _ in entries]
            if got != want:
                _kill(actor)
                raise ShardUnavailableError(
                    f"shard {slot.number}: the replayed writes got sequence numbers {got[:5]} "
                    f"where the log has {want[:5]}; the shard was not restored"
                )
            slot.actor = actor
            ray.kill(dead)
        finally:
            self._write_lock.release()

    def _check_open(self, label: str) -> None:
        if self.closed:
            raise ClosedError(f"ShardedIndex: this index was closed during the call ({label})")

    def close(self) -> None:
        """Ends every shard actor; calls still running raise ClosedError (see _sort_out)."""
        self.closed = True
        for slot in self.slots:
            _kill(slot.actor)
        self.slots = []


def _kill(actor: Any) -> None:
    import ray

    if actor is not None:
        ray.kill(actor)
