"""Fused-score search: the result type and the call into the core shared by both indexes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import as_flag, as_matrix, as_positive_int, check_result_size
from .filters import compile_filter
from .recall import Beam
from .scoring import ScoringSpec

if TYPE_CHECKING:
    from ._index_base import IndexBase

__all__ = ["ScoredResults"]


@dataclass(frozen=True)
class ScoredResults:
    """Top-k per query, best first, each array (nq, k).

    ``score = -distance + depth_bias * depth + time_coef * log(time_weight)``. Padding (fewer than
    k eligible points): id -1, score -inf, distance and depth +inf, time_weight 0.
    """

    ids: NDArray[np.int64]
    scores: NDArray[np.float64]
    distances: NDArray[np.float64]
    depths: NDArray[np.float64]
    time_weights: NDArray[np.float64]
    log_weights: NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def allowed_rows(
    index: IndexBase, filters: Any, exact: bool = False
) -> tuple[NDArray[np.uint8] | None, NDArray[np.uint32] | None, NDArray[np.int64] | None]:
    """(mask for the traversal, or slots for an exact scan, and the ids per slot the filter was
    evaluated for) of a filter; all None for none, or every slot when ``exact`` asks for a scan.

    Below ``index.filter_scan_fraction`` of the rows allowed, the allowed slots are scanned
    exactly: a graph walk would visit many disallowed nodes per returnable one. The ids are
    read before the filter: a slot an add reuses meanwhile holds another id, and the core does
    not return it (the mask was not computed for that point).
    """
    if filters is None:
        return (None, scan_slots(index, None), None) if exact else (None, None, None)
    ids, table = index._columns.filter_snapshot()
    mask = compile_filter(filters, table)
    allowed = int(mask.sum())
    if exact or index._exact_scan or allowed <= index.filter_scan_fraction * mask.shape[0]:
        return None, scan_slots(index, mask), ids
    return mask.view(np.uint8), None, ids


def scan_slots(index: IndexBase, mask: NDArray[Any] | None) -> NDArray[np.uint32]:
    """The slots an exact scan reads: those ``mask`` allows, or every slot (the scan itself skips
    removed points' slots)."""
    if mask is None:
        return np.arange(int(index._core.slots), dtype=np.uint32)
    return np.flatnonzero(mask).astype(np.uint32)


# Rounds of widening a search asked for a recall target may take (each at least doubles the
# width or ends in a scan, so four reach 16x the first width).
_WIDENING_ROUNDS = 4


def run_scored(
    index: IndexBase, q: ArrayLike, k: int, beam: Beam, spec: ScoringSpec, filters: Any, touch: bool
) -> ScoredResults:
    """One validated scored search of ``index`` (``spec`` already checked when it was made).

    With a recall target (``beam.target``) the walk's reach says, per query, how far down the
    distance order its answers lie; where the index's recall table says the width used does not
    reach the target that deep, the query is searched again wider, or scanned (docs/recall.md)."""
    arr = as_matrix(q, index.dim, "query")
    k = as_positive_int(k, "k")
    check_result_size(arr.shape[0], k)
    as_flag(touch, "touch")
    mask, slots, expected_ids = allowed_rows(index, filters, beam.exact)
    columns = index._columns
    buckets = None
    if index._prunes_by_time and spec.decay is not None and spec.time_coef > 0 and slots is None:
        order, starts, t_min, t_max = columns.time_buckets()
        if spec.reads_access:
            max_access = columns.bucket_max_access(order, starts)
        else:  # the bound does not depend on access counts
            max_access = np.zeros(t_min.shape[0], dtype=np.uint32)
        buckets = (order, starts, t_min, t_max, max_access)
    budget = max(index.time_scan_rows, 0)
    target = beam.target if slots is None else None  # a scan of slots is exact already
    widens = target is not None
    if touch:
        columns.allocate_access()

    def call(rows: NDArray[np.float32], ef: int, scan: bool) -> tuple[NDArray[Any], ...]:
        some = scan_slots(index, mask) if scan else slots
        with columns.buffers() as time_columns:
            return index._core.search_scored(  # type: ignore[no-any-return]
                rows, k, ef, spec.core(), time_columns, None if scan else mask, some, expected_ids,
                bool(touch) and not widens, None if scan else buckets, budget,
            )  # fmt: skip

    out = list(call(arr, beam.ef, False))
    if target is not None:
        _widen(index, arr, out, beam.ef, target, k, call)
        if touch:
            found = out[0][out[0] >= 0]
            slots_found = index._core.slots_of(found)
            columns.add_access(slots_found[slots_found >= 0])
    ids, scores, dist, depths, logw = out[:5]
    with np.errstate(under="ignore"):
        weights = np.exp(logw)
    return ScoredResults(ids, scores, dist, depths, weights, logw)


def _widen(
    index: IndexBase, arr: NDArray[np.float32], out: list[Any], ef: int, target: float, k: int, call: Any
) -> None:
    """Searches again, wider or by a scan, each query whose reach the width it was searched with
    does not cover at ``target`` (see run_scored); replaces its rows of ``out`` in place. A query
    whose answers a wider search left unchanged is settled: its top k no longer depends on the
    width, whatever the reach says."""
    used = np.full(arr.shape[0], ef, dtype=np.int64)
    settled = np.zeros(arr.shape[0], dtype=bool)
    for _ in range(_WIDENING_ROUNDS):
        # One decision per distinct (reach, width used): a batch has few of them.
        reach = np.where(settled, 0, out[5].astype(np.int64))
        pairs, which = np.unique(np.stack([reach, used], axis=1), axis=0, return_inverse=True)
        by_width: dict[tuple[int, bool], list[int]] = {}
        for p, (deep, width_used) in enumerate(pairs.tolist()):
            width, scan = index._width_for_reach(target, k, deep, width_used)
            if width > width_used:
                by_width.setdefault((width, scan), []).extend(np.flatnonzero(which.ravel() == p).tolist())
        if not by_width:
            return
        for (width, scan), rows in by_width.items():
            before = np.sort(out[0][rows], axis=1)
            part = call(arr[rows], width, scan)
            for dst, src in zip(out, part):
                dst[rows] = src
            used[rows] = width
            settled[rows] = np.all(np.sort(out[0][rows], axis=1) == before, axis=1)
