"""JSON forms of the things a store saves: decay policies and metadata values (no pickle)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

from .. import decay as _decay
from .._time import datetime_to_micros, micros_to_datetime

__all__ = ["policy_to_json", "policy_from_json", "value_to_json", "value_from_json", "check_metadata_value"]


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
    raise TypeError(f"decay must be a poincare_index decay policy or None, got {type(policy).__name__}")


def policy_from_json(spec: Any) -> _decay.DecayPolicy | None:
    if spec is None:
        return None
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"not a saved decay policy: {spec!r}")
    kind = spec["type"]
    if kind == "HalfLife":
        return _decay.HalfLife(hours=spec["hours"])
    if kind == "Ebbinghaus":
        return _decay.Ebbinghaus(
            stability_hours=spec["stability_hours"], boost_per_access=spec["boost_per_access"]
        )
    if kind == "ValidityWindow":
        return _decay.ValidityWindow(outside_weight=spec["outside_weight"])
    if kind == "Exponential":
        return _decay.Exponential(rate=spec["rate"], per=timedelta(seconds=spec["per_seconds"]))
    if kind == "Product":
        parts = [policy_from_json(p) for p in spec["policies"]]
        return _decay.Product(*[p for p in parts if p is not None])
    raise ValueError(f"unknown saved decay policy type {kind!r}")


def check_metadata_value(key: str, value: Any, where: str) -> None:
    """Metadata values are JSON scalars or datetimes (so the log stores them without pickle)."""
    if value is None or isinstance(value, (str, bool, int, datetime)):
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
    if isinstance(value, dict) and "$datetime_us" in value:
        return micros_to_datetime(int(value["$datetime_us"])).astimezone(timezone.utc)
    return value
