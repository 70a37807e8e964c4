"""Input checks shared by the public API: the right exception, naming what was wrong and where."""

from __future__ import annotations

import math
import numbers
import os
from typing import Any

import numpy as np
from numpy.typing import NDArray


def as_matrix(x: Any, dim: int, name: str) -> NDArray[np.float32]:
    """A C-contiguous float32 (n, dim) copy/view of ``x``; TypeError/ValueError otherwise.

    Finite values and ball membership are checked by the core on the float32 values as stored.
    """
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a numeric array, got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} is not a rectangular numeric array: {exc}") from None
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a numeric (float or int) array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-dimensional (n, {dim}), got shape {arr.shape}"
            + ("; use x.reshape(1, -1) for a single vector" if arr.ndim == 1 else "")
        )
    if arr.shape[1] != dim:
        raise ValueError(f"{name} has dimension {arr.shape[1]}, the index has dimension {dim}")
    with np.errstate(over="ignore"):  # overflow to inf is reported by the core as Inf
        return np.ascontiguousarray(arr, dtype=np.float32)


def as_ids(ids: Any, name: str = "ids") -> NDArray[np.int64]:
    """A 1-D int64 array of ids; TypeError for non-integers, ValueError for out-of-range ones."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name} must be integers, got {type(ids).__name__}")
    if isinstance(ids, numbers.Integral) and not isinstance(ids, bool):
        ids = [ids]
    arr = np.asarray(ids)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-dimensional, got shape {arr.shape}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} holds a value above the int64 range")
    return np.ascontiguousarray(arr, dtype=np.int64)


def as_id(value: Any, name: str = "id") -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    v = int(value)
    if not (np.iinfo(np.int64).min <= v <= np.iinfo(np.int64).max):
        raise KeyError(f"id {v} is outside the int64 range")
    return v


def as_positive_int(value: Any, name: str) -> int:
    return as_int_in(value, name, 1, 2**31 - 1)


def as_int_in(value: Any, name: str, low: int, high: int) -> int:
    """``value`` as an int in [low, high]: TypeError for a non-integer (bool included), else one
    ValueError for any value outside, naming the range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    v = int(value)
    if not low <= v <= high:
        if high == 2**31 - 1:
            raise ValueError(
                f"{name} must be >= {low}, got {v}" if v < low else f"{name} must be < 2**31, got {v}"
            )
        raise ValueError(f"{name} must be in [{low}, {high}], got {v}")
    return v


# The most result entries (queries x k) one search call may ask for: FAISS pads every row to k,
# so k far above ntotal would allocate for nothing; 2**27 entries are ~1.5 GiB of (D, I) here
# (scored results hold five float64/int64 arrays: ~5 GiB).
MAX_RESULT_ENTRIES = 2**27


def check_result_size(nq: int, k: int) -> None:
    """ValueError when nq x k result entries would not fit the per-call limit."""
    if nq * k > MAX_RESULT_ENTRIES:
        raise ValueError(
            f"k={k} for {nq} queries asks for {nq * k:,} results, more than {MAX_RESULT_ENTRIES:,} "
            "per call (results are padded to k, as in FAISS): lower k or search in batches"
        )


def as_finite_float(value: Any, name: str) -> float:
    """A real number that is finite; TypeError for non-numbers (bools too), ValueError for NaN/Inf."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def as_unit_interval(value: Any, name: str) -> float:
    """A real number in [0, 1]; TypeError for non-numbers, ValueError outside (NaN included)."""
    v = as_finite_float(value, name)
    if not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return v


def as_flag(value: Any, name: str) -> bool:
    """True or False (numpy's bools too); TypeError for anything else, 0 and 1 included."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")
    return bool(value)


# An index's pool starts this many threads at most: more never helps on a machine this runs on,
# and past the process's thread limit starting them fails deep in the core ("Resource
# temporarily unavailable") instead of naming the argument.
MAX_THREADS = 1024


def as_num_threads(value: Any) -> int:
    """``num_threads``: an int in [1, MAX_THREADS], or None for every core this process may run on."""
    if value is None:
        try:
            return max(1, min(MAX_THREADS, len(os.sched_getaffinity(0))))
        except AttributeError:  # pragma: no cover - not Linux
            return max(1, min(MAX_THREADS, os.cpu_count() or 1))
    return as_int_in(value, "num_threads", 1, MAX_THREADS)


def as_texts(texts: Any, where: str = "texts") -> list[str]:
    """A list of str, or TypeError naming the first bad entry."""
    if isinstance(texts, str):
        raise TypeError(f"{where} must be a sequence of str, not one str")
    try:
        out = list(texts)
    except TypeError:
        raise TypeError(f"{where} must be a sequence of str, got {type(texts).__name__}") from None
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{where}[{i}] must be a str, got {type(t).__name__}")
    return out
