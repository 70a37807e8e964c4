"""Fused-score search: the result type and the call into the core shared by both indexes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _time
from ._validation import as_finite_float, as_flag, as_matrix, as_positive_int, check_result_size
from .decay import (
    DEFAULT_FUTURE_TOLERANCE,
    DEFAULT_FUTURE_WEIGHT,
    READS_ACCESS,
    DecayPolicy,
    check_future_tolerance,
    check_future_weight,
    policy_terms,
)
from .filters import compile_filter

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
    if allowed <= index.filter_scan_fraction * mask.shape[0] or index.kind == "flat":
        return None, np.flatnonzero(mask).astype(np.uint32), ids
    return mask.view(np.uint8), None, ids


def run_scored(
    index: IndexBase,
    q: ArrayLike,
    k: int,
    ef: int,
    *,
    decay: DecayPolicy | None,
    at_time: Any,
    depth_bias: float,
    time_coef: float,
    filters: Any,
    touch: bool,
    future_weight: float = DEFAULT_FUTURE_WEIGHT,
    future_tolerance: timedelta = DEFAULT_FUTURE_TOLERANCE,
) -> ScoredResults:
    arr = as_matrix(q, index.dim, "query")
    k = as_positive_int(k, "k")
    check_result_size(arr.shape[0], k)
    ef = as_positive_int(ef, "ef")
    terms = policy_terms(decay)
    at_us = _time.as_time_scalar(at_time, "at_time")
    depth_bias = as_finite_float(depth_bias, "depth_bias")
    time_coef = as_finite_float(time_coef, "time_coef")
    fw = check_future_weight(future_weight)
    tolerance_us = check_future_tolerance(future_tolerance)
    as_flag(touch, "touch")
    mask, slots, expected_ids = allowed_rows(index, filters)
    columns = index._columns
    buckets: tuple[Any, ...] = (None, None, None, None, None)
    if index.kind == "hnsw" and decay is not None and time_coef > 0 and slots is None:
        order, starts, t_min, t_max = columns.time_buckets()
        if any(term[0] in READS_ACCESS for term in terms):
            max_access = columns.bucket_max_access(order, starts)
        else:  # the bound does not depend on access counts
            max_access = np.zeros(t_min.shape[0], dtype=np.uint32)
        buckets = (order, starts, t_min, t_max, max_access)
    budget = max(index.time_scan_rows, 0)
    if touch:
        columns.allocate_access()
    with columns.buffers() as (t, valid_from, valid_until, access):
        ids, scores, dist, depths, logw = index._core.search_scored(
            arr, k, ef, depth_bias, time_coef, terms, at_us, fw, tolerance_us,
            t, valid_from, valid_until, access, mask, slots, bool(touch), *buckets, budget,
            expected_ids,
        )  # fmt: skip
    with np.errstate(under="ignore"):
        weights = np.exp(logw)
    return ScoredResults(ids, scores, dist, depths, weights, logw)
