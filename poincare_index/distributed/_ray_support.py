"""Ray, imported on first use with an ImportError that names the extra, and the timeout check the
Ray-backed classes share."""

from __future__ import annotations

from typing import Any

from .._validation import as_finite_float

__all__ = ["import_ray", "as_seconds"]


def import_ray() -> Any:
    """The ``ray`` module; ImportError naming the ``[ray]`` extra when it is not installed."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            'poincare_index.distributed needs Ray: pip install ".[ray]" (from a checkout of poincare_index)'
        ) from exc
    return ray


def as_seconds(value: Any, name: str) -> float:
    """A positive, finite number of seconds (a timeout)."""
    seconds = as_finite_float(value, name)
    if seconds <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return seconds
