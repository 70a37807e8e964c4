"""Decay policies: a point's time weight w in (0, 1] at a query time.

Each policy is a frozen dataclass with the formula in its docstring and a numpy ``weight`` (the
reference); the index evaluates the same formula in C++ on the column buffers inside the search
(``PoincareIndex.search_scored``). Times: dt = at_time - t in hours. A point stamped after
at_time did not exist yet: every policy gives it ``future_weight`` (default 1e-6), the same idea
as outside a validity window, so it can still be found when nothing else matches.

The score a search ranks by is ``-distance + depth_bias * depth + time_coef * log(w)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from . import _time

__all__ = [
    "DecayPolicy",
    "HalfLife",
    "Ebbinghaus",
    "ValidityWindow",
    "Exponential",
    "Product",
    "generative_agents_recency",
    "DEFAULT_FUTURE_WEIGHT",
]

DEFAULT_FUTURE_WEIGHT = 1e-6
# A point stamped at most this long after at_time counts as stamped at at_time: the clocks of
# the machine that stamped it and the one that asks differ by a few seconds, and a memory
# written "just now" elsewhere must not drop to future_weight.
DEFAULT_FUTURE_TOLERANCE = timedelta(minutes=5)

# Term kinds shared with csrc/temporal.h (kept in sync by tests/test_decay.py).
_HALF_LIFE, _EBBINGHAUS, _VALIDITY, _EXPONENTIAL, _CUSTOM = 1, 2, 3, 4, 5
# Kinds whose weight reads the access count (a bound over a time bucket needs its largest).
READS_ACCESS = (_EBBINGHAUS, _CUSTOM)


def _positive(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def _non_negative(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return v


def check_future_weight(value: Any) -> float:
    v = _positive(value, "future_weight")
    if v > 1:
        raise ValueError(f"future_weight must be in (0, 1], got {value!r}")
    return v


def check_future_tolerance(value: Any) -> int:
    """A timedelta >= 0 (at most a day) -> microseconds; TypeError/ValueError otherwise."""
    if not isinstance(value, timedelta):
        raise TypeError(f"future_tolerance must be a datetime.timedelta, got {type(value).__name__}")
    if not timedelta(0) <= value <= timedelta(days=1):
        raise ValueError(f"future_tolerance must be between 0 and one day, got {value}")
    return value // timedelta(microseconds=1)


@dataclass(frozen=True)
class _Inputs:
    dt_hours: NDArray[np.float64]
    future: NDArray[np.bool_]
    at_us: int
    valid_from: NDArray[np.int64]
    valid_until: NDArray[np.int64]
    access_count: NDArray[np.float64]


class DecayPolicy:
    """Base class: ``weight`` evaluates the policy; subclasses define ``_log_weight``."""

    def weight(
        self,
        t: Any,
        at_time: Any = None,
        valid_from: Any = None,
        valid_until: Any = None,
        access_count: Any = 0,
        *,
        future_weight: float = DEFAULT_FUTURE_WEIGHT,
        future_tolerance: timedelta = DEFAULT_FUTURE_TOLERANCE,
    ) -> Any:
        """w in (0, 1] of points stamped ``t`` at ``at_time`` (default now), float64.

        ``t`` may be one time or an array/list of times; ``valid_from``/``valid_until`` (None or
        NaT: open) and ``access_count`` broadcast against it. Returns a float for a single time.
        A stamp up to ``future_tolerance`` after at_time counts as at_time (clock skew); later
        ones weigh ``future_weight``.
        """
        return np.exp(
            self.log_weight(
                t,
                at_time,
                valid_from,
                valid_until,
                access_count,
                future_weight=future_weight,
                future_tolerance=future_tolerance,
            )  # fmt: skip
        )

    def log_weight(
        self,
        t: Any,
        at_time: Any = None,
        valid_from: Any = None,
        valid_until: Any = None,
        access_count: Any = 0,
        *,
        future_weight: float = DEFAULT_FUTURE_WEIGHT,
        future_tolerance: timedelta = DEFAULT_FUTURE_TOLERANCE,
    ) -> Any:
        """log w (exact even where w underflows to 0)."""
        fw = check_future_weight(future_weight)
        tolerance_us = check_future_tolerance(future_tolerance)
        scalar = not isinstance(t, (list, tuple, np.ndarray, pa.Array, pa.ChunkedArray)) and not hasattr(
            t, "__arrow_array__"
        )
        t_us = _time.as_time_column([t] if scalar else t, 1 if scalar else len(t), "t")
        n = t_us.shape[0]
        at_us = _time.as_time_scalar(at_time, "at_time")
        vf = _time.as_time_column(valid_from, n, "valid_from", open_end=_time.OPEN_START)
        vu = _time.as_time_column(valid_until, n, "valid_until", open_end=_time.OPEN_END)
        counts = np.broadcast_to(np.asarray(access_count, dtype=np.float64), (n,))
        if np.any(counts < 0):
            raise ValueError("access_count must be >= 0")
        dt = _time.hours_between(at_us, t_us)
        future = t_us > at_us + tolerance_us  # times lie in 1678..2261 and tolerance <= 1 day: no overflow
        inputs = _Inputs(np.maximum(dt, 0.0), future, at_us, vf, vu, counts)
        out = np.where(inputs.future, math.log(fw), self._log_weight(inputs))
        return float(out[0]) if scalar else out

    def _log_weight(self, x: _Inputs) -> NDArray[np.float64]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _terms(self) -> list[tuple[int, float, float]]:  # pragma: no cover - abstract
        """(kind, p0, p1) terms whose log weights add up to this policy's (for the C++ core)."""
        raise NotImplementedError

    def _log_bound(self, min_age_hours: float, max_access_count: float) -> float:
        """An upper bound of log w over points at least ``min_age_hours`` old with at most
        ``max_access_count`` accesses (see :func:`log_weight_bound`), from the terms: every
        built-in term decays with age and none grows past 0, so the bound is the sum of the
        terms at the youngest age (a validity term: 0)."""
        dt = max(float(min_age_hours), 0.0)
        total = 0.0
        for kind, p0, p1 in self._terms():
            if kind == _HALF_LIFE:
                total -= math.log(2.0) * dt / p0
            elif kind == _EXPONENTIAL:
                total -= p0 * dt
            elif kind == _EBBINGHAUS:
                stability = p0 * (1.0 + p1 * max_access_count) if p1 > 0 else p0
                total -= dt / stability if math.isfinite(stability) else 0.0
        return total


@dataclass(frozen=True)
class HalfLife(DecayPolicy):
    """w = 2^(-dt / hours): the weight halves every ``hours``."""

    hours: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "hours", _positive(self.hours, "hours"))

    def _log_weight(self, x: _Inputs) -> NDArray[np.float64]:
        return -math.log(2.0) * x.dt_hours / self.hours

    def _terms(self) -> list[tuple[int, float, float]]:
        return [(_HALF_LIFE, self.hours, 0.0)]


@dataclass(frozen=True)
class Ebbinghaus(DecayPolicy):
    """w = exp(-dt / S) with S = stability_hours * (1 + boost_per_access * access_count).

    Every search that returns a point with ``touch=True`` increments its access_count, so points
    retrieved often decay more slowly.
    """

    stability_hours: float
    boost_per_access: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "stability_hours", _positive(self.stability_hours, "stability_hours"))
        object.__setattr__(self, "boost_per_access", _non_negative(self.boost_per_access, "boost_per_access"))

    def _log_weight(self, x: _Inputs) -> NDArray[np.float64]:
        s = self.stability_hours * (1.0 + self.boost_per_access * x.access_count)
        return -x.dt_hours / s

    def _terms(self) -> list[tuple[int, float, float]]:
        return [(_EBBINGHAUS, self.stability_hours, self.boost_per_access)]


@dataclass(frozen=True)
class ValidityWindow(DecayPolicy):
    """w = 1 when valid_from <= at_time < valid_until (a missing end is open), else
    ``outside_weight`` (default 1e-6): a fact that stopped being true stays findable when nothing
    else matches. Filter on the columns to drop it instead."""

    outside_weight: float = 1e-6

    def __post_init__(self) -> None:
        v = _positive(self.outside_weight, "outside_weight")
        if v > 1:
            raise ValueError(f"outside_weight must be in (0, 1], got {self.outside_weight!r}")
        object.__setattr__(self, "outside_weight", v)

    def _log_weight(self, x: _Inputs) -> NDArray[np.float64]:
        inside = (x.valid_from <= x.at_us) & (x.at_us < x.valid_until)
        return np.where(inside, 0.0, math.log(self.outside_weight))

    def _terms(self) -> list[tuple[int, float, float]]:
        return [(_VALIDITY, self.outside_weight, 0.0)]


@dataclass(frozen=True)
class Exponential(DecayPolicy):
    """w = exp(-rate * dt / per): ``rate`` e-folds per ``per`` (default one day)."""

    rate: float
    per: timedelta = field(default=timedelta(days=1))

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", _non_negative(self.rate, "rate"))
        if not isinstance(self.per, timedelta):
            raise TypeError(f"per must be a datetime.timedelta, got {type(self.per).__name__}")
        if self.per <= timedelta(0):
            raise ValueError(f"per must be a positive duration, got {self.per}")

    def _log_weight(self, x: _Inputs) -> NDArray[np.float64]:
        return -self.rate * x.dt_hours / _time.timedelta_hours(self.per)

    def _terms(self) -> list[tuple[int, float, float]]:
        return [(_EXPONENTIAL, self.rate / _time.timedelta_hours(self.per), 0.0)]


@dataclass(frozen=True, init=False)
class Product(DecayPolicy):
    """w = the product of the policies' weights, e.g. Product(HalfLife(hours=24 * 90),
    ValidityWindow())."""

    policies: tuple[DecayPolicy, ...]

    def __init__(self, *policies: DecayPolicy) -> None:
        if not policies:
            raise ValueError("Product needs at least one policy")
        for i, p in enumerate(policies):
            if not isinstance(p, DecayPolicy):
                raise TypeError(f"Product argument {i} is a {type(p).__name__}, not a decay policy")
        object.__setattr__(self, "policies", tuple(policies))

    def _log_weight(self, x: _Inputs) -> NDArray[np.float64]:
        total = np.zeros_like(x.dt_hours)
        for p in self.policies:
            total = total + p._log_weight(x)
        return total

    def _terms(self) -> list[tuple[int, float, float]]:
        return [term for p in self.policies for term in p._terms()]

    def _log_bound(self, min_age_hours: float, max_access_count: float) -> float:
        return sum(p._log_bound(min_age_hours, max_access_count) for p in self.policies)


def generative_agents_recency() -> HalfLife:
    """The 0.995^hours recency of Generative Agents (Park et al. 2023) as a half-life:
    hours = ln 2 / -ln 0.995, about 138.3 hours."""
    return HalfLife(hours=math.log(2.0) / -math.log(0.995))


def policy_terms(policy: DecayPolicy | None) -> NDArray[np.float64]:
    """(n_terms, 3) float64 [kind, p0, p1] rows for the core; no rows for ``None`` (w = 1)."""
    if policy is None:
        return np.zeros((0, 3), dtype=np.float64)
    if not isinstance(policy, DecayPolicy):
        raise TypeError(f"decay must be a decay policy or None, got {type(policy).__name__}")
    return np.asarray(policy._terms(), dtype=np.float64).reshape(-1, 3)


def log_weight_bound(policy: DecayPolicy | None, min_age_hours: float, max_access_count: float) -> float:
    """An upper bound of log w over every point at least ``min_age_hours`` old (at_time - t,
    clamped at 0) whose access count is at most ``max_access_count`` (inf: unknown), inside or
    outside any validity window: each policy's own bound (the built-in ones: the terms at the
    youngest age; a :class:`~poincare_index.CustomDecay` as it declared), summed over a Product."""
    if policy is None:
        return 0.0
    if not isinstance(policy, DecayPolicy):
        raise TypeError(f"decay must be a decay policy or None, got {type(policy).__name__}")
    return float(policy._log_bound(max(float(min_age_hours), 0.0), float(max_access_count)))
