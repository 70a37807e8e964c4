"""Which time shards a fused search can skip: an upper bound of the score any point of a shard
can reach, from the shard's stamp bounds and the query alone.

score = -d(q, x) + depth_bias depth(x) + time_coef log w(x). depth is the distance from the
origin, so depth(q) - d <= depth(x) <= depth(q) + d (the triangle inequality), and over d >= 0
the first two terms are at most ``depth_bias depth(q)`` for -1 <= depth_bias <= 1 and
``-depth(q)`` below -1; above 1 they are unbounded and nothing is skipped. log w is bounded by
the shard's youngest possible stamp (every decay term falls with age; see
:func:`poincare_index.decay.log_weight_bound`), and needs time_coef >= 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..decay import log_weight_bound
from ..geometry import depth
from ..scoring import ScoringSpec

_US_PER_HOUR = 3_600_000_000


@dataclass(frozen=True)
class ScoreBound:
    """The bound of one search call: ``geometric`` holds the per-query bound of the distance and
    depth terms, ``spec`` the call's scoring (the time term's settings)."""

    geometric: NDArray[np.float64]
    spec: ScoringSpec

    @classmethod
    def of(cls, q: NDArray[np.float32], curvature: float, spec: ScoringSpec) -> ScoreBound | None:
        """The bound for this call, or None where none exists (depth_bias > 1, time_coef < 0)."""
        if spec.depth_bias > 1.0 or spec.time_coef < 0.0:
            return None
        q_depth = depth(q.astype(np.float64), curvature)
        geometric = spec.depth_bias * q_depth if spec.depth_bias >= -1.0 else -q_depth
        return cls(geometric, spec)

    def log_weight(self, t_min: int, t_max: int, max_access: int) -> float:
        """An upper bound of log w over points stamped in [t_min, t_max] (microseconds) whose
        access counts are at most ``max_access``. A stamp up to the tolerance after at_time
        counts as at_time; later ones weigh future_weight."""
        spec = self.spec
        if spec.decay is None:
            return 0.0
        latest_present = spec.at_us + spec.future_tolerance_us
        bound = -math.inf
        if t_min <= latest_present:  # some point is not in the future
            youngest = min(t_max, latest_present)
            age_hours = max(spec.at_us - youngest, 0) / _US_PER_HOUR
            bound = log_weight_bound(spec.decay, age_hours, float(max_access))
        if t_max > latest_present:
            bound = max(bound, spec.log_future_weight)
        return bound

    def scores(self, t_min: int, t_max: int, max_access: int) -> NDArray[np.float64]:
        """Per query, an upper bound of the score of any point of such a shard (with a margin
        of 1e-9 relative for the rounding of the shards' float64 scores)."""
        logw = self.log_weight(t_min, t_max, max_access)
        time_coef = self.spec.time_coef
        bound = self.geometric if time_coef == 0.0 else self.geometric + time_coef * logw
        # -inf stays -inf (inf - inf would be NaN, and NaN >= k-th is never true).
        return np.where(np.isfinite(bound), bound + 1e-9 * (1.0 + np.abs(bound)), bound)
