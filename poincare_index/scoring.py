"""What a fused search ranks by, fixed once per call: ``score = -distance + depth_bias * depth +
time_coef * log(time_weight)``, the weight from a decay policy evaluated at one query time.

One frozen :class:`ScoringSpec` carries every time setting (decay, at_time, depth_bias,
time_coef, future_weight, future_tolerance) from where a call takes them (an index's
``search_scored``, a Memory's search, the sharded index) to the core, which gets it as one
struct; each setting is validated once, when the spec is made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import numpy as np

from . import _core, _time
from ._validation import as_finite_float
from .decay import (
    DEFAULT_FUTURE_TOLERANCE,
    DEFAULT_FUTURE_WEIGHT,
    READS_ACCESS,
    DecayPolicy,
    check_future_tolerance,
    check_future_weight,
    policy_terms,
)

__all__ = ["ScoringSpec"]


@dataclass(frozen=True)
class ScoringSpec:
    """The scoring of one search at the query time ``at_us`` (microseconds since the epoch, UTC;
    :meth:`at` builds one from a datetime). Points stamped more than ``future_tolerance`` after
    the query time weigh ``future_weight``. TypeError / ValueError on a bad setting."""

    at_us: int
    decay: DecayPolicy | None = None
    depth_bias: float = 0.0
    time_coef: float = 1.0
    future_weight: float = DEFAULT_FUTURE_WEIGHT
    future_tolerance: timedelta = DEFAULT_FUTURE_TOLERANCE
    _core_spec: Any = field(default=None, init=False, repr=False, compare=False)
    _terms: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Every scored search makes one: the common values (floats, the default future settings)
        # are checked by a type test, anything else by the validators that convert it.
        if self.decay is not None and not isinstance(self.decay, DecayPolicy):
            raise TypeError(f"decay must be a decay policy or None, got {type(self.decay).__name__}")
        set_ = object.__setattr__  # frozen: the checked values replace the given ones once
        at = self.at_us
        if type(at) is not int or not _time.MIN_TIME_US <= at <= _time.MAX_TIME_US:
            set_(self, "at_us", _checked_micros(at))
        for name in ("depth_bias", "time_coef"):
            value = getattr(self, name)
            if type(value) is not float or not math.isfinite(value):
                set_(self, name, as_finite_float(value, name))
        if self.future_weight is not DEFAULT_FUTURE_WEIGHT:
            set_(self, "future_weight", check_future_weight(self.future_weight))
        if self.future_tolerance is not DEFAULT_FUTURE_TOLERANCE:
            check_future_tolerance(self.future_tolerance)

    @classmethod
    def at(cls, at_time: Any = None, **settings: Any) -> ScoringSpec:
        """The spec at ``at_time`` (a datetime, numpy datetime64 or ISO string; None: now; a
        naive datetime is local time) with ``settings`` (decay, depth_bias, time_coef,
        future_weight, future_tolerance)."""
        return cls(_time.as_time_scalar(at_time, "at_time"), **settings)

    def replace(self, **changes: Any) -> ScoringSpec:
        """This spec with some settings changed (checked as the constructor checks them)."""
        return replace(self, **changes)

    @property
    def future_tolerance_us(self) -> int:
        return self.future_tolerance // timedelta(microseconds=1)

    @property
    def log_future_weight(self) -> float:
        return math.log(self.future_weight)

    @property
    def terms(self) -> Any:
        """The decay policy as the core's (n, 3) rows [kind, p0, p1] (made on first use)."""
        terms = self._terms
        if terms is None:
            terms = policy_terms(self.decay)
            object.__setattr__(self, "_terms", terms)
        return terms

    @property
    def reads_access(self) -> bool:
        """Whether the weight depends on access counts (a per-bucket bound then needs their max)."""
        return any(int(kind) in READS_ACCESS for kind in self.terms[:, 0])

    def core(self) -> Any:
        """The spec as the core's struct (made on first use, kept with the spec)."""
        spec = self._core_spec
        if spec is None:
            spec = _core.ScoreSpec(
                self.terms, self.at_us, self.future_weight, self.future_tolerance_us,
                self.depth_bias, self.time_coef,
            )  # fmt: skip
            object.__setattr__(self, "_core_spec", spec)
        return spec

    def __getstate__(self) -> dict[str, Any]:
        # Sent to shards (Ray pickles it in memory, never into a file): the core's struct is
        # made again where it is used.
        state = dict(self.__dict__)
        state["_core_spec"] = state["_terms"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


def _checked_micros(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"at_us must be an int (microseconds since the epoch), got {type(value).__name__}")
    return _time.check_micros(int(value), "at_us")
