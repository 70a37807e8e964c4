"""A user's own decay: ``w = fn(age_hours, access_count)`` compiled by numba (extra ``[numba]``)
to a C callback that the index's fused search calls per candidate, at C speed, without the GIL.

The fused search stops early with a bound of the weight per time bucket, so the policy declares
how its weight can be bounded, and the declaration is checked on a grid when it is made:

* ``bound="age"``: non-increasing in age for every access count (the bucket's bound is the
  largest weight over the counts up to the bucket's largest, at its youngest age);
* ``bound="age_and_access"``: also non-decreasing in the access count (one call per bucket);
* ``bound="none"``: no promise; the bound is w <= 1, always right, and the search reads more.

Saved stores keep the policy's ``name`` and ``bound`` only, never code (no pickle, no code in
files): re-supply the same ``CustomDecay`` as ``decay=`` when opening the store.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

from .decay import _CUSTOM, DecayPolicy, _Inputs

__all__ = ["CustomDecay", "BOUNDS"]

BOUNDS = {"none": 0, "age": 1, "age_and_access": 2}
# The grid the declaration is checked on: ages 0 and 1e-3 h .. 1e6 h (114 years), access counts
# 0 .. 1000.
_GRID_AGES = np.concatenate([[0.0], np.geomspace(1e-3, 1e6, 160)])
_GRID_COUNTS = np.array([0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100, 200, 500, 1000], dtype=np.float64)
_TINY = np.finfo(np.float64).tiny  # what a weight outside (0, 1] counts as (csrc/temporal.cpp)
_SLACK = 1e-12  # relative rounding allowed in the monotonicity checks


def _numba() -> Any:
    try:
        import numba
    except ImportError:
        raise ImportError(
            'CustomDecay compiles its function with numba: pip install ".[numba]" '
            "(from a checkout of poincare_index)"
        ) from None
    return numba


def clamped_log(w: NDArray[np.float64]) -> NDArray[np.float64]:
    """log of weights clamped to (0, 1] as the core clamps them (NaN and <= 0: the tiniest)."""
    w = np.where(w > 0.0, np.minimum(w, 1.0), _TINY)  # NaN > 0 is False
    return np.log(w)


class CustomDecay(DecayPolicy):
    """w = ``fn(age_hours, access_count)`` in (0, 1] (0 read as the underflow of a tiny weight:
    the smallest positive double), age in hours (float64, >= 0) and the
    point's access count (as float64). ``fn`` is a plain Python function numba can compile in
    nopython mode (math, numpy scalars), pure and thread-safe; it is compiled twice, to a
    ``numba.cfunc`` for the index and to a vectorised ufunc for :meth:`weight`. numba reads
    the globals and closure variables ``fn`` uses once, when it compiles: changing them later
    does not change the policy (make a new ``CustomDecay`` instead).

    ``bound``: see the module; ``name``: how saved stores refer to it (default: the function's
    name). ValueError when the declared bound, or the range (0, 1], does not hold on the grid;
    TypeError when ``fn`` is not callable or numba cannot compile it as a function of two floats.
    """

    def __init__(
        self, fn: Callable[[float, float], float], *, bound: str = "age", name: str | None = None
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be a function of (age_hours, access_count), got {type(fn).__name__}")
        if not isinstance(bound, str) or bound not in BOUNDS:
            raise ValueError(f"bound must be one of {sorted(BOUNDS)}, got {bound!r}")
        label = getattr(fn, "__name__", None) if name is None else name
        if not isinstance(label, str) or not label or len(label) > 200:
            raise ValueError(f"name must be a non-empty str of at most 200 characters, got {label!r}")
        numba = _numba()
        signature = numba.float64(numba.float64, numba.float64)
        try:
            compiled = numba.cfunc(signature, nopython=True)(fn)
            vectorised = numba.vectorize([signature], nopython=True)(fn)
        except Exception as exc:  # numba raises its own TypingError and friends
            raise TypeError(
                f"CustomDecay {label!r}: numba cannot compile fn as float64(float64, float64): "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            ) from None
        address = int(compiled.address)
        if not 0 < address < 2**53:  # it travels to the core in a float64 (csrc/temporal.h)
            raise RuntimeError(
                f"CustomDecay {label!r}: the compiled function's address {address:#x} is out of range"
            )
        self._fn = fn
        self._cfunc = compiled  # owns the machine code the core calls: kept as long as the policy
        self._ufunc = vectorised
        self._address = address
        self.bound = bound
        self.name = label
        self._check_grid()

    def _check_grid(self) -> None:
        ages, counts = np.meshgrid(_GRID_AGES, _GRID_COUNTS, indexing="ij")
        w = self._ufunc(ages, counts)
        # 0 is allowed as the underflow of a tiny weight (exp(-800)); it counts as the smallest
        # positive double, as in the core.
        bad = ~((w >= 0.0) & (w <= 1.0))  # NaN fails both
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise ValueError(
                f"CustomDecay {self.name!r}: w({_GRID_AGES[i]:.6g} h, {_GRID_COUNTS[j]:g} accesses) = "
                f"{float(w[i, j])!r}, outside (0, 1]"
            )
        if self.bound in ("age", "age_and_access"):
            rises = w[1:] > w[:-1] * (1 + _SLACK)
            if rises.any():
                i, j = np.argwhere(rises)[0]
                raise ValueError(
                    f"CustomDecay {self.name!r} declares bound={self.bound!r} (non-increasing in age) "
                    f"but w({_GRID_AGES[i + 1]:.6g} h, {_GRID_COUNTS[j]:g}) = {w[i + 1, j]:.6g} > "
                    f"w({_GRID_AGES[i]:.6g} h, {_GRID_COUNTS[j]:g}) = {w[i, j]:.6g}"
                )
        if self.bound == "age_and_access":
            falls = w[:, 1:] < w[:, :-1] * (1 - _SLACK)
            if falls.any():
                i, j = np.argwhere(falls)[0]
                raise ValueError(
                    f"CustomDecay {self.name!r} declares bound='age_and_access' (non-decreasing in the "
                    f"access count) but w({_GRID_AGES[i]:.6g} h, {_GRID_COUNTS[j + 1]:g}) = "
                    f"{w[i, j + 1]:.6g} < w({_GRID_AGES[i]:.6g} h, {_GRID_COUNTS[j]:g}) = {w[i, j]:.6g}"
                )

    # ---- the DecayPolicy protocol -------------------------------------------------------
    def _log_weight(self, x: _Inputs) -> NDArray[np.float64]:
        return clamped_log(self._ufunc(x.dt_hours, x.access_count))

    def _terms(self) -> list[tuple[int, float, float]]:
        return [(_CUSTOM, float(self._address), float(BOUNDS[self.bound]))]

    def _log_bound(self, min_age_hours: float, max_access_count: float) -> float:
        """The bound the core takes over a bucket (csrc/temporal.cpp, custom_log_weight)."""
        if self.bound == "none":
            return 0.0
        if self.bound == "age_and_access":
            if not math.isfinite(max_access_count):
                return 0.0
            return float(clamped_log(self._ufunc(np.float64(min_age_hours), np.float64(max_access_count))))
        if not math.isfinite(max_access_count) or max_access_count > 256:
            return 0.0
        counts = np.arange(int(max_access_count) + 1, dtype=np.float64)
        return float(clamped_log(self._ufunc(np.full_like(counts, min_age_hours), counts)).max())

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CustomDecay)
            and other._fn is self._fn
            and other.bound == self.bound
            and other.name == self.name
        )

    def __hash__(self) -> int:
        return hash((id(self._fn), self.bound, self.name))

    def __reduce__(self) -> Any:
        # For Ray's transport to shard actors (cloudpickle carries the Python function): the
        # receiving process compiles its own callback; an address means nothing elsewhere.
        # Our file formats never hold this (see poincare_index.memory.codec).
        return (_rebuild, (self._fn, self.bound, self.name))

    def __repr__(self) -> str:
        return f"CustomDecay({self.name!r}, bound={self.bound!r})"


def _rebuild(fn: Callable[[float, float], float], bound: str, name: str) -> CustomDecay:
    return CustomDecay(fn, bound=bound, name=name)
