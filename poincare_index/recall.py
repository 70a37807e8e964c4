"""Recall you can ask for: an HNSW index's calibration of beam width against recall.

A :class:`RecallTable` is what an index measured on its own points: for each of three query
kinds (a stored point's own vector, a point a small step from one, and a point stepped away from
one by about the distance to its nearest other point, which stands in for a held-out query), for
k in :data:`CALIBRATION_KS` and each beam width of a grid, the mean recall@k of the graph search
against the exact answer of a flat scan. A search asked for ``recall=r`` (or the index's
``recall_target``) uses the smallest width that meets r (:meth:`RecallTable.meets`); where no
width of the grid does, or where scanning every point costs no more than that width, it scans
exactly (docs/recall.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ._core import IndexFormatError
from ._validation import as_finite_float

if TYPE_CHECKING:
    from .index import PoincareIndex

__all__ = [
    "DEFAULT_RECALL_TARGET",
    "CALIBRATION_EFS",
    "CALIBRATION_KS",
    "QUERY_KINDS",
    "RecallTable",
    "as_recall",
]

DEFAULT_RECALL_TARGET = 0.95
# Beam widths measured, about 1.25x apart: the width a target picks is at most that much wider
# than the exact width it needs.
CALIBRATION_EFS = (
    10,
    12,
    16,
    20,
    24,
    32,
    40,
    48,
    64,
    80,
    100,
    128,
    160,
    200,
    256,
    320,
    400,
    512,
    640,
    800,
    1024,
)
# Recall@k is measured at each of these k from the same searches (prefixes of the widest k
# each width allows), so the intermediate ones cost nothing.
CALIBRATION_KS = (1, 3, 10, 30, 100)
QUERY_KINDS = ("stored", "near", "offset")
# The kinds that stand for queries from outside the index; the others are points it holds (or a
# small step from one), which a search must find more reliably (see RecallTable.meets).
HELD_OUT_KINDS = ("offset",)
FOUND_MISS_SHARE = 0.2
# Queries per kind; the recall@1 of 200 queries has a standard error of at most 0.015 at 0.95.
QUERIES_PER_KIND = 200
# The table is refreshed once the points added and removed since it was measured reach this
# share of the points it was measured on (so refreshing costs a bounded share of building).
STALE_SHARE = 0.5
# A walk of width ef on an M = 16 graph costs about as much as scanning this many points per unit
# of width (measured from 2,000 to 100,000 points in 16 to 256 dimensions: 24 to 370, growing
# with the walk's cache misses on a larger index, falling with the scan's arithmetic in more
# dimensions; docs/recall.md). Near the small end: a wrong choice there costs microseconds, and
# on large indexes it keeps walks, never loses recall. Each of a walk's expansions reads about 2M
# links: the cost scales with M.
SCAN_POINTS_PER_EF = 64


class Beam(NamedTuple):
    """How one search runs: a walk of width ``ef`` (checked against ``target`` by the fused
    search's reach when a target chose it), or an exact scan (``exact``)."""

    ef: int
    target: float | None = None
    exact: bool = False


def as_recall(value: Any, name: str = "recall") -> float:
    """A recall target in (0, 1]; TypeError for non-numbers, ValueError outside (NaN included)."""
    v = as_finite_float(value, name)
    if not 0.0 < v <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return v


@dataclass(frozen=True)
class RecallTable:
    """What an index measured of its own recall (see the module).

    ``recall[i, j, l]``: mean recall@``ks[j]`` of query kind ``QUERY_KINDS[i]`` at beam width
    ``efs[l]`` (NaN where ``efs[l] < ks[j]``). ``points``: live points when measured."""

    points: int
    ks: tuple[int, ...]
    efs: tuple[int, ...]
    recall: NDArray[np.float64]

    def expected(self, k: int, ef: int) -> float:
        """The recall target a walk of width ``ef`` meets for the k best (see :meth:`meets`),
        from the nearest measured k at or above ``k`` (past the largest, the width scaled down in
        proportion) and the widest measured width not above ``ef``; 0.0 below the grid."""
        j, scale = self._row(k)
        width = ef / scale
        cols = [i for i, e in enumerate(self.efs) if e <= width and e >= self.ks[j]]
        if not cols:
            return 0.0
        return float(self._envelope(j)[cols[-1]])

    def ef_for(self, target: float, k: int) -> int | None:
        """The smallest measured width that meets ``target`` for the k best (the table's
        measured k at or above ``k``; past the largest, scaled in proportion), or None when no
        width does."""
        j, scale = self._row(k)
        env = self._envelope(j)
        for i, e in enumerate(self.efs):
            if e >= self.ks[j] and env[i] >= target:
                return max(int(math.ceil(e * scale)), k)
        return None

    def _row(self, k: int) -> tuple[int, float]:
        for j, kk in enumerate(self.ks):
            if kk >= k:
                return j, 1.0
        return len(self.ks) - 1, k / self.ks[-1]

    def meets(self) -> NDArray[np.float64]:
        """Per k and width, the largest target met: the held-out stand-in's (offset) recall@k,
        and for the points the index holds (stored, near) one that misses at most
        FOUND_MISS_SHARE as often as the target allows (0.99 for 0.95): a search meets r when
        the offset kind reaches r and the others 1 - FOUND_MISS_SHARE (1 - r)."""
        held = np.array([kind in HELD_OUT_KINDS for kind in QUERY_KINDS])[:, None, None]
        on_scale = np.where(held, self.recall, 1.0 - (1.0 - self.recall) / FOUND_MISS_SHARE)
        return np.clip(on_scale, 0.0, 1.0).min(axis=0)  # NaN where the width is below k

    def _envelope(self, j: int) -> NDArray[np.float64]:
        """Row j of :meth:`meets`, made non-decreasing in width from the right (a width counts
        only if every wider one met at least as much): a dip from sampling never makes a
        narrower width look sufficient."""
        worst = self.meets()[j]
        out = np.full(worst.shape, np.nan)
        running = np.inf
        for i in range(worst.shape[0] - 1, -1, -1):
            if not np.isnan(worst[i]):
                running = min(running, worst[i])
                out[i] = running
        return out

    def as_dict(self) -> dict[str, Any]:
        """The table as a saved manifest holds it (JSON: NaN as null)."""
        values = [
            [[None if math.isnan(v) else round(float(v), 6) for v in row] for row in kind]
            for kind in self.recall
        ]
        return {
            "points": self.points,
            "kinds": list(QUERY_KINDS),
            "ks": list(self.ks),
            "efs": list(self.efs),
            "recall": values,
        }

    @classmethod
    def from_dict(cls, entry: Any, where: str) -> RecallTable:
        """The table a manifest holds, every field checked; IndexFormatError naming the field."""
        if not isinstance(entry, dict):
            raise IndexFormatError(f"{where}: the recall table must be an object")
        points = entry.get("points")
        if type(points) is not int or not 0 <= points < 2**40:
            raise IndexFormatError(f"{where}: recall table points must be an integer >= 0, got {points!r}")
        if entry.get("kinds") != list(QUERY_KINDS):
            raise IndexFormatError(f"{where}: recall table kinds must be {list(QUERY_KINDS)}")
        ks, efs = (_increasing_ints(entry.get(n), f"{where}: recall table {n}") for n in ("ks", "efs"))
        values = entry.get("recall")
        shape = (len(QUERY_KINDS), len(ks), len(efs))
        try:
            recall = np.array(
                [[[math.nan if v is None else v for v in row] for row in kind] for kind in values],
                dtype=np.float64,
            )
        except (TypeError, ValueError):
            recall = np.zeros(0)
        if recall.shape != shape:
            raise IndexFormatError(f"{where}: recall table values must be numbers or null, shaped {shape}")
        finite = recall[~np.isnan(recall)]
        if np.any((finite < 0.0) | (finite > 1.0)):
            raise IndexFormatError(f"{where}: recall table values must lie in [0, 1]")
        return cls(points, ks, efs, recall)


def _increasing_ints(value: Any, where: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or any(type(v) is not int or not 1 <= v < 2**31 for v in value)
        or any(a >= b for a, b in zip(value, value[1:]))
    ):
        raise IndexFormatError(f"{where} must be a non-empty increasing list of integers in [1, 2**31)")
    return tuple(value)


def scan_is_cheaper(ef: int, live: int, M: int) -> bool:
    """Whether scanning ``live`` points costs no more than a walk of width ``ef`` on a graph of
    ``M`` (see SCAN_POINTS_PER_EF)."""
    return live <= SCAN_POINTS_PER_EF * ef * M / 16


def calibrate(index: PoincareIndex, *, queries_per_kind: int = QUERIES_PER_KIND) -> RecallTable | None:
    """Measures ``index``'s recall table on its own points (None when it holds too few points to
    walk: every search then scans). Deterministic for a given index: the sample is drawn from a
    generator seeded by the index's seed and size. An index opened without verifying its files
    is verified first (IndexFormatError if damaged): the measuring reads every point."""
    live_ids = index._live_ids()
    n = int(live_ids.shape[0])
    if scan_is_cheaper(CALIBRATION_EFS[0], n, index.M):
        return None
    index.verify()
    rng = np.random.default_rng([index.seed, n])
    m = min(queries_per_kind, n)
    sample = np.sort(rng.choice(n, size=m, replace=False))
    stored = index.reconstruct_batch(live_ids[sample]).astype(np.float64)
    ks = tuple(k for k in CALIBRATION_KS if k <= n)
    _, i_self = index._exact_search(stored, 2)  # itself (or a duplicate) and its nearest other
    # Near: a step a quarter of the way to the nearest other point, in any direction. Offset (the
    # held-out stand-in): a step 1.25 times that far, so its nearest point lies about as far as a
    # fresh draw's would and everything else farther (docs/recall.md: midpoints of neighbours,
    # the obvious stand-in, measured far easier than held-out queries on spread data).
    nearest = index.reconstruct_batch(i_self[:, 1]).astype(np.float64)
    gap = np.linalg.norm(stored - nearest, axis=1)[:, None]
    near = _inside_ball(stored + 0.25 * gap * _directions(rng, stored.shape), index.curvature)
    offset = _inside_ball(stored + 1.25 * gap * _directions(rng, stored.shape), index.curvature)
    queries = np.concatenate([stored, near, offset]).astype(np.float32)
    truth_d, _ = index._exact_search(queries, max(ks))
    recall = np.full((len(QUERY_KINDS), len(ks), len(CALIBRATION_EFS)), np.nan)
    for col, ef in enumerate(CALIBRATION_EFS):
        k_run = max(k for k in ks if k <= ef) if ef >= ks[0] else ks[0]
        d, _ = index._walk_search(queries, k_run, ef)
        for j, k in enumerate(ks):
            if k > k_run:
                continue
            # A result counts when it is no farther than the exact k-th (ties and duplicates count
            # once each, whichever id the walk returned); float32 distances against float64 truth.
            kth = truth_d[:, k - 1 : k] * (1.0 + 1e-5) + 1e-6
            hit = np.minimum((d[:, :k] <= kth).sum(axis=1), k) / k
            recall[:, j, col] = hit.reshape(len(QUERY_KINDS), m).mean(axis=1)
        # Wider beams measure the same once this one holds every point or already finds every
        # answer of every query (what remains would cost most of the measuring).
        if ef >= n or np.nanmin(recall[:, :, col]) >= 1.0:
            recall[:, :, col + 1 :] = recall[:, :, col : col + 1]
            break
    return RecallTable(n, ks, CALIBRATION_EFS, recall)


def _directions(rng: np.random.Generator, shape: tuple[int, ...]) -> NDArray[np.float64]:
    g = rng.standard_normal(shape)
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _inside_ball(x: NDArray[np.float64], curvature: float) -> NDArray[np.float64]:
    """Rows pulled back inside the ball where a step took them past 1 - 1e-4 of its radius."""
    limit = (1.0 - 1e-4) / math.sqrt(curvature)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.where(norms > limit, x * (limit / np.maximum(norms, 1e-300)), x)
