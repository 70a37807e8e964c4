"""A Memory's configuration: what a new store is given, and what a reopened one reads back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from .._validation import as_finite_float
from ..decay import (
    DEFAULT_FUTURE_TOLERANCE,
    DEFAULT_FUTURE_WEIGHT,
    DecayPolicy,
    check_future_tolerance,
    check_future_weight,
)
from ..embed import CallableEmbedder, Embedder, HashingEmbedder, MiniLMEmbedder
from ..index import as_storage
from ..scoring import ScoringSpec
from .codec import policy_from_json, policy_to_json
from .retention import Retention
from .store import NamespaceDir

__all__ = ["Config", "open_config", "embedder_spec", "check_arguments"]


def check_arguments(progress: Any, token_counter: Any, path: Any, read_only: Any, retention: Any) -> None:
    """Memory's own arguments that no part it hands them to checks (TypeError / ValueError)."""
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be True or False, got {type(progress).__name__}")
    if token_counter is not None and not callable(token_counter):
        raise TypeError("token_counter must be a callable str -> int")
    if path is None and read_only:
        raise ValueError("read_only=True needs a path")
    if retention is not None and not isinstance(retention, Retention):
        raise TypeError(f"retention must be a Retention(...) or None, got {type(retention).__name__}")


@dataclass(frozen=True)
class Config:
    decay: DecayPolicy | None
    embedder: Any
    depth_bias: float
    time_coef: float
    future_weight: float
    M: int
    ef_construction: int
    future_tolerance: timedelta = DEFAULT_FUTURE_TOLERANCE
    storage: str = "f32"  # what the index's graph walk reads (PoincareIndex(storage=...))

    def to_json(self) -> dict[str, Any]:
        """The fields config.json holds (see store.NamespaceDir.read_config)."""
        return {
            "embedder": embedder_spec(self.embedder),
            "decay": policy_to_json(self.decay),
            "depth_bias": self.depth_bias,
            "time_coef": self.time_coef,
            "future_weight": self.future_weight,
            "future_tolerance_s": self.future_tolerance.total_seconds(),
            "M": self.M,
            "ef_construction": self.ef_construction,
            "storage": self.storage,
        }

    def scoring(self, at_us: int, overrides: dict[str, Any]) -> ScoringSpec:
        """The scoring of one search at ``at_us``: the store's time settings (decay, depth_bias,
        time_coef, future_weight, future_tolerance) with the call's ``overrides`` in their place,
        each checked once, by the spec."""
        settings = {
            "decay": self.decay, "depth_bias": self.depth_bias, "time_coef": self.time_coef,
            "future_weight": self.future_weight, "future_tolerance": self.future_tolerance,
        }  # fmt: skip
        unknown = set(overrides) - set(settings)
        if unknown:
            raise TypeError(f"unknown time settings {sorted(unknown)}")
        return ScoringSpec(at_us, **{**settings, **overrides})


def embedder_spec(embedder: Any) -> dict[str, Any]:
    """How a saved store names (and, for the built-in ones, rebuilds) its embedder."""
    spec: dict[str, Any] = {"name": embedder.name, "dim": int(embedder.dim)}
    if isinstance(embedder, HashingEmbedder):
        spec.update(kind="hashing", radius=embedder.radius)
    elif isinstance(embedder, MiniLMEmbedder):
        spec.update(kind="minilm", scale=embedder.scale)
    else:
        spec.update(kind="custom")
    return spec


def _rebuild_embedder(spec: dict[str, Any]) -> Any:
    if spec.get("kind") == "hashing":
        return HashingEmbedder(dim=int(spec["dim"]), radius=float(spec["radius"]))
    if spec.get("kind") == "minilm":
        return MiniLMEmbedder(scale=float(spec["scale"]))
    raise ValueError(
        f"this store was built with the embedder {spec['name']!r} (dim {spec['dim']}); "
        "pass the same embedder= to reopen it"
    )


def _wrap_callable(fn: Any) -> CallableEmbedder:
    """A bare ``fn(texts) -> (n, d)`` Euclidean vectors: d from one probe call; the name (what a
    saved store checks) is the function's module and qualified name."""
    probe = np.asarray(fn(["dimension probe"]))
    if probe.ndim != 2 or probe.shape[0] != 1 or probe.shape[1] < 1:
        raise ValueError(
            f"embedder callable must return an (n, d) array for n texts, got shape {probe.shape}"
        )
    name = f"callable:{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    return CallableEmbedder(fn, int(probe.shape[1]), name)


def _check_embedder(embedder: Any) -> Any:
    if embedder is None:
        return HashingEmbedder()
    if callable(embedder) and not isinstance(embedder, Embedder):
        return _wrap_callable(embedder)
    if not isinstance(embedder, Embedder) or not isinstance(embedder.name, str):
        raise TypeError(
            f"embedder must have name (str), dim (int) and embed(texts), got {type(embedder).__name__}"
        )
    if isinstance(embedder.dim, bool) or not isinstance(embedder.dim, int) or embedder.dim < 1:
        raise ValueError(f"embedder.dim must be a positive int, got {embedder.dim!r}")
    return embedder


def open_config(
    ns: NamespaceDir | None,
    given: dict[str, Any],
    embedder: Any,
    M: int,
    ef_construction: int,
    read_only: bool,
) -> Config:
    """The configuration of a new store (from ``given`` and defaults, saved when there is a
    path) or of an existing one (saved values, overridden by ``given``; embedder checked).
    ``given["storage"]``, like M, is the store's own: a reopened store keeps its saved one, and a
    different one given is a ValueError (as another embedder is)."""
    storage = as_storage(given["storage"]) if "storage" in given else None
    if "decay" in given and given["decay"] is not None and not isinstance(given["decay"], DecayPolicy):
        raise TypeError(
            f"decay must be a decay policy (e.g. HalfLife(hours=...)) or None, "
            f"got {type(given['decay']).__name__}"
        )
    saved: dict[str, Any] = {}
    if ns is not None and ns.exists:
        saved = ns.read_config()
    elif ns is not None and read_only:
        raise FileNotFoundError(f"no memory store at {ns.dir}")
    if saved:
        spec = saved["embedder"]
        if embedder is None:
            embedder = _rebuild_embedder(spec)
        embedder = _check_embedder(embedder)
        if embedder.name != spec["name"] or embedder.dim != spec["dim"]:
            raise ValueError(
                f"embedder mismatch: the store at {ns.dir if ns else ''} was built with {spec['name']!r} "
                f"(dim {spec['dim']}), not {embedder.name!r} (dim {embedder.dim})"
            )
        decay = given["decay"] if "decay" in given else policy_from_json(saved["decay"])
        depth_bias = given.get("depth_bias", saved["depth_bias"])
        time_coef = given.get("time_coef", saved["time_coef"])
        future_weight = given.get("future_weight", saved["future_weight"])
        saved_tolerance = timedelta(
            seconds=saved.get("future_tolerance_s", DEFAULT_FUTURE_TOLERANCE.total_seconds())
        )
        future_tolerance = given.get("future_tolerance", saved_tolerance)
        M, ef_construction = int(saved["M"]), int(saved["ef_construction"])
        saved_storage = saved.get("storage", "f32")  # stores written before storage=: float32
        if storage is not None and storage != saved_storage:
            raise ValueError(
                f"storage mismatch: the store at {ns.dir if ns else ''} was built with storage "
                f"{saved_storage!r}, not {storage!r} (omit storage= to reopen it as it is)"
            )
        storage = saved_storage
    else:
        embedder = _check_embedder(embedder)
        decay = given.get("decay")
        depth_bias = given.get("depth_bias", 0.0)
        time_coef = given.get("time_coef", 1.0)
        future_weight = given.get("future_weight", DEFAULT_FUTURE_WEIGHT)
        future_tolerance = given.get("future_tolerance", DEFAULT_FUTURE_TOLERANCE)
    check_future_tolerance(future_tolerance)
    cfg = Config(
        decay=decay,
        embedder=embedder,
        depth_bias=as_finite_float(depth_bias, "depth_bias"),
        time_coef=as_finite_float(time_coef, "time_coef"),
        future_weight=check_future_weight(future_weight),
        M=M,
        ef_construction=ef_construction,
        future_tolerance=future_tolerance,
        storage="f32" if storage is None else storage,
    )
    body = cfg.to_json()
    if ns is not None and not read_only and (not saved or any(saved.get(k) != v for k, v in body.items())):
        ns.write_config(body)
    return cfg
