"""Fused-score search: the result type and the call into the core shared by both indexes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import as_flag, as_matrix, as_positive_int, check_result_size
from .filters import compile_filter
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
    index: IndexBase, filters: Any
) -> tuple[NDArray[np.uint8] | None, NDArray[np.uint32] | None, NDArray[np.int64] | None]:
    """(mask for the traversal, or slots for an exact scan, and the ids per slot the filter was
    evaluated for) of a filter; all None for none.

    Below ``index.filter_scan_fraction`` of the rows allowed, the allowed slots are scanned
    exactly: a graph walk would visit many disallowed nodes per returnable one. The ids are
    read before the filter: a slot an add reuses meanwhile holds another id, and the core does
    not return it (the mask was not computed for that point).
    """
    if filters is None:
        return None, None, None
    ids, table = index._columns.filter_snapshot()
    mask = compile_filter(filters, table)
    allowed = int(mask.sum())
    if index._exact_scan or allowed <= index.filter_scan_fraction * mask.shape[0]:
        return None, np.flatnonzero(mask).astype(np.uint32), ids
    return mask.view(np.uint8), None, ids


def run_scored(
    index: IndexBase, q: ArrayLike, k: int, ef: int, spec: ScoringSpec, filters: Any, touch: bool
) -> ScoredResults:
    """One validated scored search of ``index`` (``spec`` already checked when it was made)."""
    arr = as_matrix(q, index.dim, "query")
    k = as_positive_int(k, "k")
    check_result_size(arr.shape[0], k)
    ef = as_positive_int(ef, "ef")
    as_flag(touch, "touch")
    mask, slots, expected_ids = allowed_rows(index, filters)
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
    if touch:
        columns.allocate_access()
    with columns.buffers() as time_columns:
        ids, scores, dist, depths, logw = index._core.search_scored(
            arr, k, ef, spec.core(), time_columns, mask, slots, expected_ids, bool(touch), buckets, budget
        )
    with np.errstate(under="ignore"):
        weights = np.exp(logw)
    return ScoredResults(ids, scores, dist, depths, weights, logw)
