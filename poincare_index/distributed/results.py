"""What a sharded search returns, and the merge of the shards' top-k lists into one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..scored import ScoredResults
from .pruning import ScoreBound
from .slots import ShardSlot

__all__ = ["ShardedSearchResult", "ShardedScoredResults", "merge_scored"]


class ShardedSearchResult(tuple):  # type: ignore[type-arg]
    """``(D, I)`` (it unpacks as the local indexes' result), with ``answered`` and ``missing``:
    the numbers of the shards that answered and of those left out (only with
    ``allow_partial=True``; otherwise a failing shard raises)."""

    answered: tuple[int, ...]
    missing: tuple[int, ...]

    def __new__(
        cls, D: NDArray[np.float32], I: NDArray[np.int64], answered: tuple[int, ...], missing: tuple[int, ...]
    ) -> ShardedSearchResult:
        out = super().__new__(cls, (D, I))
        out.answered, out.missing = answered, missing
        return out

    @property
    def partial(self) -> bool:
        return bool(self.missing)


@dataclass(frozen=True)
class ShardedScoredResults(ScoredResults):
    """:class:`ScoredResults` and where they came from: ``sources`` (nq, k) the shard number of
    each result (-1 for padding), ``shards_read`` how many shards got a call, ``shards_total``
    how many there are, ``reads_per_query`` how many shards each query was sent to, and the
    numbers of the shards that ``answered`` and of those ``missing`` (``allow_partial=True``)."""

    sources: NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), np.int64))
    shards_read: int = 0
    shards_total: int = 0
    reads_per_query: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    answered: tuple[int, ...] = ()
    missing: tuple[int, ...] = ()

    @property
    def partial(self) -> bool:
        return bool(self.missing)


def merge_scored(
    call: Callable[..., tuple[list[Any], list[int]]], slots: list[ShardSlot], q: NDArray[np.float32], k: int,
    options: dict[str, Any], bound: ScoreBound | None, allow_partial: bool,
) -> ShardedScoredResults:  # fmt: skip
    """The fused top-k over ``slots``. Without a ``bound`` every slot gets every query in one
    wave. With one, the slots (newest first) are read in waves of 1, 2, 4, ...; before each wave
    a query is kept for a slot only while the slot's score bound reaches the query's k-th score
    so far, and a slot no query needs is skipped. ``call`` is :meth:`ShardSet.call` or one
    with the same answers (the index's, which may take the compiled path)."""
    nq = q.shape[0]
    acc = [
        np.full((nq, k), -1, np.int64), np.full((nq, k), -np.inf), np.full((nq, k), np.inf),
        np.full((nq, k), np.inf), np.zeros((nq, k)), np.full((nq, k), -np.inf),
        np.full((nq, k), -1, np.int64),  # the shard number of each result
    ]  # fmt: skip
    reads = np.zeros(nq, np.int64)
    answered: list[int] = []
    missing: list[int] = []
    pending = list(slots)
    wave = 1 if bound is not None else max(len(pending), 1)
    while pending:
        needs = []
        for slot in pending:
            if bound is None or slot.t_min is None or slot.t_max is None:
                need = np.ones(nq, dtype=bool)
            else:
                need = bound.scores(slot.t_min, slot.t_max, slot.max_access) >= acc[1][:, k - 1]
            if need.any():
                needs.append((slot, need))
        batch, rest = needs[:wave], needs[wave:]
        pending = [slot for slot, _ in rest]
        wave *= 2
        if not batch:
            break
        whole = (q, k, options)  # one object: the index sees every shard asked the same
        args = [whole if need.all() else (q[need], k, options) for _, need in batch]
        parts, lost = call([slot for slot, _ in batch], "search_scored", args, allow_partial=allow_partial)
        missing.extend(lost)
        got = [(slot, need, part) for (slot, need), part in zip(batch, parts) if part is not None]
        for slot, need, _ in got:
            answered.append(slot.number)
            reads[need] += 1
        full = [(slot.number, part) for slot, need, part in got if need.all()]
        if full:  # the shards asked every query: merged in one sort
            _merge_into(acc, slice(None), full, k)
        for slot, need, part in got:
            if not need.all():
                _merge_into(acc, np.flatnonzero(need), [(slot.number, part)], k)
    return ShardedScoredResults(
        acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], sources=acc[6],
        shards_read=len(answered) + len(missing), shards_total=len(slots), reads_per_query=reads,
        answered=tuple(sorted(answered)), missing=tuple(sorted(missing)),
    )  # fmt: skip


def _merge_into(
    acc: list[NDArray[Any]], rows: NDArray[np.int64] | slice, parts: list[tuple[int, tuple[Any, ...]]], k: int
) -> None:
    """Merges shards' (number, (ids, scores, distances, depths, weights, log weights)) for
    ``rows`` into the running top-k (best score first, ties by id, padding last)."""
    cols = [np.concatenate([acc[j][rows]] + [np.asarray(p[j]) for _, p in parts], axis=1) for j in range(6)]
    marks = [np.where(np.asarray(p[0]) >= 0, number, -1) for number, p in parts]
    src = np.concatenate([acc[6][rows]] + marks, axis=1)
    ids = cols[0]
    order = np.lexsort((np.where(ids < 0, np.iinfo(np.int64).max, ids), -cols[1]), axis=1)[:, :k]
    for j, c in enumerate(cols + [src]):
        acc[j][rows] = np.take_along_axis(c, order, axis=1)
