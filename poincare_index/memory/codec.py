"""JSON forms of the things a store saves: decay policies and metadata values (no pickle)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

from .. import decay as _decay
from .._time import MAX_TIME_US, MIN_TIME_US, _out_of_range, datetime_to_micros, micros_to_datetime
from ..custom_decay import BOUNDS, CustomDecay

__all__ = [
    "CustomDecayNeeded",
    "policy_to_json",
    "policy_from_json",
    "value_to_json",
    "value_from_json",
    "check_metadata_value",
]


class CustomDecayNeeded(ValueError):
    """A saved store's decay refers to a CustomDecay, which only its user can supply again."""


def policy_to_json(policy: _decay.DecayPolicy | None) -> Any:
    """A JSON value that :func:`policy_from_json` turns back into an equal policy."""
    if policy is None:
        return None
    if isinstance(policy, _decay.HalfLife):
        return {"type": "HalfLife", "hours": policy.hours}
    if isinstance(policy, _decay.Ebbinghaus):
        return {
            "type": "Ebbinghaus",
            "stability_hours": policy.stability_hours,
            "boost_per_access": policy.boost_per_access,
        }
    if isinstance(policy, _decay.ValidityWindow):
        return {"type": "ValidityWindow", "outside_weight": policy.outside_weight}
    if isinstance(policy, _decay.Exponential):
        return {"type": "Exponential", "rate": policy.rate, "per_seconds": policy.per.total_seconds()}
    if isinstance(policy, _decay.Product):
        return {"type": "Product", "policies": [policy_to_json(p) for p in policy.policies]}
    if isinstance(policy, CustomDecay):  # a reference only: the code is the user's to re-supply
        return {"type": "CustomDecay", "name": policy.name, "bound": policy.bound}
    raise TypeError(f"decay must be a poincare_index decay policy or None, got {type(policy).__name__}")


def policy_from_json(spec: Any, depth: int = 0) -> _decay.DecayPolicy | None:
    """The policy :func:`policy_to_json` wrote; ValueError/TypeError for anything else."""
    if spec is None:
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
        raise ValueError(f"not a saved decay policy: {spec!r}")
    if depth > 8:
        raise ValueError("saved decay policy nests Products more than 8 deep")
    fields = {
        "HalfLife": ("hours",),
        "Ebbinghaus": ("stability_hours", "boost_per_access"),
        "ValidityWindow": ("outside_weight",),
        "Exponential": ("rate", "per_seconds"),
        "Product": ("policies",),
    }
    kind = spec["type"]
    if kind == "CustomDecay":
        name, bound = spec.get("name"), spec.get("bound")
        if not isinstance(name, str) or not name or len(name) > 200 or bound not in BOUNDS:
            raise ValueError(f"saved CustomDecay reference is malformed: {spec!r}")
        raise CustomDecayNeeded(
            f"the store's decay uses CustomDecay {name!r} (bound={bound!r}), whose code is not saved: "
            f"pass decay=... with it when opening the store"
        )
    if kind not in fields:
        raise ValueError(f"unknown saved decay policy type {kind!r}")
    missing = [f for f in fields[kind] if f not in spec]
    if missing:
        raise ValueError(f"saved {kind} policy lacks {', '.join(missing)}")
    numbers = [spec[f] for f in fields[kind] if f != "policies"]
    if any(type(v) not in (int, float) or (type(v) is int and abs(v) > 2**63) for v in numbers):
        raise TypeError(f"saved {kind} policy has a parameter that is not a number: {spec!r}")
    if kind == "HalfLife":
        return _decay.HalfLife(hours=spec["hours"])
    if kind == "Ebbinghaus":
        return _decay.Ebbinghaus(
            stability_hours=spec["stability_hours"], boost_per_access=spec["boost_per_access"]
        )
    if kind == "ValidityWindow":
        return _decay.ValidityWindow(outside_weight=spec["outside_weight"])
    if kind == "Exponential":
        if not math.isfinite(spec["per_seconds"]) or not 0 < spec["per_seconds"] < 8e13:
            raise ValueError(f"saved Exponential policy has per_seconds {spec['per_seconds']!r}")
        return _decay.Exponential(rate=spec["rate"], per=timedelta(seconds=spec["per_seconds"]))
    if not isinstance(spec["policies"], list):
        raise TypeError("saved Product policy: policies must be a list")
    parts = [policy_from_json(p, depth + 1) for p in spec["policies"]]
    return _decay.Product(*[p for p in parts if p is not None])


def check_metadata_value(key: str, value: Any, where: str) -> None:
    """Metadata values are JSON scalars or datetimes (so the log stores them without pickle); a
    datetime must lie in 1678-01-01 .. 2261-12-31 UTC, the times the log reads back (see
    :func:`value_from_json`), so that no acknowledged add leaves a log that cannot be replayed."""
    if isinstance(value, datetime):
        us = datetime_to_micros(value)
        if not MIN_TIME_US <= us <= MAX_TIME_US:
            raise _out_of_range(f"{where}: metadata {key!r}", us)
        return
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: metadata {key!r} is {value!r}; NaN/Inf are not allowed")
        return
    raise TypeError(
        f"{where}: metadata {key!r} must be str, int, float, bool, datetime or None, "
        f"got {type(value).__name__}"
    )


def value_to_json(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$datetime_us": datetime_to_micros(value)}
    return value


def value_from_json(value: Any) -> Any:
    """The metadata value :func:`value_to_json` wrote; ValueError for one it cannot have."""
    if isinstance(value, dict):
        us = value.get("$datetime_us")
        if len(value) != 1 or type(us) is not int or not MIN_TIME_US <= us <= MAX_TIME_US:
            raise ValueError(f"saved metadata value {value!r} is not a datetime in 1678..2261")
        return micros_to_datetime(us).astimezone(timezone.utc)
    return value
