"""Poincaré-ball geometry in numpy float64: the reference the C++ core is tested against.

The ball of curvature ``c > 0`` is ``{x : c|x|^2 < 1}``. Every function broadcasts over leading
axes (the last axis holds the coordinates) and computes in float64.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["BALL_MARGIN", "distance", "depth", "expmap0", "logmap0", "mobius_add", "project", "at_depth"]

#: Points with ``c|x|^2 >= 1 - BALL_MARGIN`` (in float64, after the float32 cast) are refused by
#: the indexes. float32 can hold radii up to ``1 - 6e-8`` (``c|x|^2`` about ``1 - 1.2e-7``), so
#: every float32 point strictly inside the ball is accepted.
BALL_MARGIN = 1e-7


def _curvature(curvature: float) -> float:
    if isinstance(curvature, bool) or not isinstance(curvature, (int, float, np.floating)):
        raise TypeError(f"curvature must be a number, got {type(curvature).__name__}")
    c = float(curvature)
    if not (math.isfinite(c) and c > 0):
        raise ValueError(f"curvature must be a finite number > 0, got {curvature!r}")
    return c


def _float64(x: ArrayLike, name: str) -> NDArray[np.float64]:
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a numeric array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if arr.ndim == 0:
        raise ValueError(f"{name} must have at least one axis (the coordinates)")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or Inf")
    return arr


def _inside(sq_norm: NDArray[np.float64], c: float, name: str) -> None:
    if np.any(c * sq_norm >= 1.0):
        raise ValueError(f"{name} has points on or outside the Poincaré ball (c*|x|^2 >= 1)")


def _conformal(sq_norm: NDArray[np.float64], c: float) -> NDArray[np.float64]:
    # 1/(1 - c|x|^2) as 1/((1 - sqrt(c)|x|)(1 + sqrt(c)|x|)): no cancellation near the boundary.
    r = np.sqrt(c * sq_norm)
    return 1.0 / ((1.0 - r) * (1.0 + r))


def distance(u: ArrayLike, v: ArrayLike, curvature: float = 1.0) -> NDArray[np.float64]:
    """Poincaré distance ``(1/sqrt c) arcosh(1 + 2c|u-v|^2 / ((1-c|u|^2)(1-c|v|^2)))``.

    Evaluated as ``(2/sqrt c) asinh(sqrt(c delta))`` with ``delta = |u-v|^2 a(u) a(v)``, which is
    the same value but stays accurate for nearby points. ``u`` and ``v`` broadcast.
    """
    c = _curvature(curvature)
    u64, v64 = _float64(u, "u"), _float64(v, "v")
    su, sv = np.sum(u64 * u64, axis=-1), np.sum(v64 * v64, axis=-1)
    _inside(su, c, "u")
    _inside(sv, c, "v")
    diff = u64 - v64
    delta = np.sum(diff * diff, axis=-1) * _conformal(su, c) * _conformal(sv, c)
    return 2.0 / math.sqrt(c) * np.arcsinh(np.sqrt(c * delta))


def depth(x: ArrayLike, curvature: float = 1.0) -> NDArray[np.float64]:
    """Distance from the origin: ``(2/sqrt c) artanh(sqrt(c)|x|)``."""
    c = _curvature(curvature)
    x64 = _float64(x, "x")
    sq = np.sum(x64 * x64, axis=-1)
    _inside(sq, c, "x")
    return 2.0 / math.sqrt(c) * np.arctanh(np.sqrt(c * sq))


def expmap0(v: ArrayLike, curvature: float = 1.0) -> NDArray[np.float64]:
    """Map a tangent (Euclidean) vector at the origin into the ball: ``tanh(sqrt(c)|v|) v/(sqrt(c)|v|)``.

    Vectors longer than about ``18/sqrt(c)`` land on the boundary in float64; pass the result
    through :func:`project` before adding it to an index if your embeddings can be that long.
    """
    c = _curvature(curvature)
    v64 = _float64(v, "v")
    n = np.linalg.norm(v64, axis=-1, keepdims=True)
    sc = math.sqrt(c)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.where(n > 0, np.tanh(sc * n) / (sc * n), 1.0)
    return v64 * scale


def logmap0(x: ArrayLike, curvature: float = 1.0) -> NDArray[np.float64]:
    """Inverse of :func:`expmap0`: ``artanh(sqrt(c)|x|) x/(sqrt(c)|x|)``."""
    c = _curvature(curvature)
    x64 = _float64(x, "x")
    n = np.linalg.norm(x64, axis=-1, keepdims=True)
    _inside(n[..., 0] ** 2, c, "x")
    sc = math.sqrt(c)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.where(n > 0, np.arctanh(sc * n) / (sc * n), 1.0)
    return x64 * scale


def mobius_add(u: ArrayLike, v: ArrayLike, curvature: float = 1.0) -> NDArray[np.float64]:
    """Möbius addition ``u (+) v``: the isometry of the ball that takes the origin to ``u``,
    applied to ``v``, so ``distance(u, u (+) v) == depth(v)``. ``u`` and ``v`` broadcast.

    ``((1 + 2c<u,v> + c|v|^2) u + (1 - c|u|^2) v) / (1 + 2c<u,v> + c^2 |u|^2 |v|^2)``.
    """
    c = _curvature(curvature)
    u64, v64 = _float64(u, "u"), _float64(v, "v")
    su, sv = np.sum(u64 * u64, axis=-1), np.sum(v64 * v64, axis=-1)
    _inside(su, c, "u")
    _inside(sv, c, "v")
    uv = np.sum(u64 * v64, axis=-1)
    num = (1.0 + 2.0 * c * uv + c * sv)[..., None] * u64 + (1.0 - c * su)[..., None] * v64
    return num / (1.0 + 2.0 * c * uv + c * c * su * sv)[..., None]


def project(x: ArrayLike, eps: float = 1e-5, curvature: float = 1.0) -> NDArray[np.floating]:
    """Clip points to radius ``(1 - eps)/sqrt(c)``: the explicit way into the ball.

    Points already inside that radius are returned unchanged. float32 input stays float32 and
    is guaranteed to lie within the radius after rounding; other input is returned as float64.
    """
    c = _curvature(curvature)
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)):
        raise TypeError(f"eps must be a number, got {type(eps).__name__}")
    if not (0.0 < float(eps) < 1.0):
        raise ValueError(f"eps must be in (0, 1), got {eps!r}")
    arr = np.asarray(x)
    out_dtype = np.float32 if arr.dtype == np.float32 else np.float64
    x64 = _float64(arr, "x")
    limit = (1.0 - float(eps)) / math.sqrt(c)
    n = np.linalg.norm(x64, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.where(n > limit, limit / n, 1.0)
    out = (x64 * scale).astype(out_dtype)
    if out_dtype == np.float32:
        # Rounding to float32 can push a clipped point just past the limit: shrink those rows.
        for _ in range(8):
            over = np.linalg.norm(out.astype(np.float64), axis=-1) > limit
            if not np.any(over):
                break
            out[over] = (out[over].astype(np.float64) * (1.0 - 2.0**-22)).astype(np.float32)
    return out


def at_depth(v: NDArray[np.float64], depth: float) -> NDArray[np.float32]:
    """The directions of the rows of ``v`` at hyperbolic distance ``depth`` from the origin
    (curvature 1), float32; zero rows stay at the origin (an embedder's texts on one sphere)."""
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    unit = np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)
    # expmap0 maps tangent norm r to ball norm tanh(r), at hyperbolic depth 2r.
    return expmap0(unit * (depth / 2.0)).astype(np.float32)
