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
from typing import TYPE_CHECKING, Any, NamedTuple, overload

import numpy as np
from numpy.typing import NDArray

from ._core import IndexFormatError
from ._validation import as_finite_float, as_positive_int
from .geometry import BALL_MARGIN, distance, mobius_add

if TYPE_CHECKING:
    from .index import PoincareIndex

__all__ = [
    "DEFAULT_RECALL_TARGET",
    "CALIBRATION_EFS",
    "CALIBRATION_KS",
    "QUERY_KINDS",
    "RecallTable",
    "as_recall",
    "as_width_and_recall",
    "checked_width",
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
# The kinds whose first answer is a point the index holds (the point itself, or the one a small
# step away): a search must find it more reliably than it may miss a held-out answer (see
# RecallTable.meets).
FOUND_KINDS = ("stored", "near")
FOUND_MISS_SHARE = 0.2
# The offset kind's step, in units of the distance from the stored point to its nearest other.
OFFSET_STEP = 1.25
# Queries per kind measured at every k; the recall@1 of 200 queries has a standard error of at
# most 0.015 at 0.95.
QUERIES_PER_KIND = 200
# Queries of the found kinds measured at k = 1, where their answer is known without a scan (the
# point itself; the source of a near query, see _near_queries): 500 hits in 500 bound the rate
# at 0.998 (the Wilson bound, one standard error), what target 0.99 asks of stored points.
FOUND_QUERIES_PER_KIND = 500
# The table is refreshed once the points added and removed since it was measured reach this
# share of the points it was measured on (so refreshing costs a bounded share of building).
STALE_SHARE = 0.5
# A walk of width ef on an M = 16 graph costs about as much as scanning this many points per unit
# of width (measured from 2,000 to 100,000 points in 16 to 256 dimensions at M = 24: 20 to 491
# there, so 13 to 330 at M = 16; growing with the walk's cache misses on a larger index, falling
# with the scan's arithmetic in more dimensions; docs/recall.md). Near the small end: a wrong
# choice there costs microseconds, and on large indexes it keeps walks, never loses recall. Each
# of a walk's expansions reads about 2M links: the cost scales with M.
SCAN_POINTS_PER_EF = 64


class Beam(NamedTuple):
    """How one search runs: a walk of width ``ef`` (checked against ``target`` by the fused
    search's reach when a target chose it; a plain search of each list's first part alone with
    ``first_part``, see :attr:`RecallTable.first_part`), or an exact scan (``exact``)."""

    ef: int
    target: float | None = None
    exact: bool = False
    first_part: bool = False


def as_recall(value: Any, name: str = "recall") -> float:
    """A recall target in (0, 1]; TypeError for non-numbers, ValueError outside (NaN included)."""
    v = as_finite_float(value, name)
    if not 0.0 < v <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return v


def checked_width(ef: Any, recall: Any) -> int | None:
    """``ef`` validated (None when not given); ValueError when ``recall`` is given too."""
    if ef is None:
        return None
    if recall is not None:
        raise ValueError("give ef (a beam width) or recall (a recall target), not both")
    if type(ef) is int and 0 < ef < 2**31:  # the common case, without the checks' call
        return ef
    return as_positive_int(ef, "ef")


def as_width_and_recall(ef: Any, recall: Any) -> tuple[int | None, float | None]:
    """A search call's ``ef`` and ``recall``, each checked (None when not given), and not both."""
    return checked_width(ef, recall), None if recall is None else as_recall(recall)


@dataclass(frozen=True)
class RecallTable:
    """What an index measured of its own recall (see the module).

    ``recall[i, j, l]``: mean recall@``ks[j]`` of query kind ``QUERY_KINDS[i]`` at beam width
    ``efs[l]`` (NaN where ``efs[l] < ks[j]``); ``error``: the standard error of each mean (the
    queries' spread over the square root of their number); ``queries[i, j]``: how many queries
    each mean of kind i at k ``ks[j]`` is over. ``points``: live points when measured.
    ``first_part``: searches walk each level-0 list's first part (the links ahead of its refill)
    with one beam, the sparser walk, which measured at least the whole lists' means at every
    width, k and kind (the means kept are the whole lists'; docs/recall.md)."""

    points: int
    ks: tuple[int, ...]
    efs: tuple[int, ...]
    recall: NDArray[np.float64]
    error: NDArray[np.float64]
    queries: NDArray[np.int64]
    first_part: bool = False

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
        """Per k and width, the largest target r met: every kind's recall@k reaches r, and the
        stored and near kinds find their own point first (recall@1) at 1 - FOUND_MISS_SHARE
        (1 - r) (0.99 for 0.95): a point the index holds is missed at most a fifth as often as
        the target lets a held-out answer be missed. Each measured rate counts one standard
        error below what was measured, so that a width is not chosen on a lucky sample: a
        recall@1 is a share of hits, bounded by Wilson's score interval (which, unlike the
        sample's spread, stays below 1 when every query hit: 0.998 for 500 in 500); a recall@k
        by its mean less its standard error. NaN where the width is below k."""
        low = self.recall - self.error
        low[:, 0, :] = _wilson_lower(self.recall[:, 0, :], self.queries[:, 0, None])  # ks[0] is 1
        found = [QUERY_KINDS.index(kind) for kind in FOUND_KINDS]
        first = 1.0 - (1.0 - low[found, 0, :].min(axis=0)) / FOUND_MISS_SHARE  # ks[0] is 1
        return np.clip(np.minimum(low.min(axis=0), first[None, :]), 0.0, 1.0)

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
        return {
            "points": self.points,
            "kinds": list(QUERY_KINDS),
            "ks": list(self.ks),
            "efs": list(self.efs),
            "recall": _nested(self.recall),
            "error": _nested(self.error),
            "queries": self.queries.tolist(),
            "walk": _WALKS[self.first_part],
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
        if ks[0] != 1:
            raise IndexFormatError(f"{where}: recall table ks must start at 1")
        shape = (len(QUERY_KINDS), len(ks), len(efs))
        recall, error = (
            _unit_values(entry.get(n), shape, f"{where}: recall table {n}") for n in ("recall", "error")
        )
        if not np.array_equal(np.isnan(recall), np.isnan(error)):
            raise IndexFormatError(f"{where}: recall table recall and error must be null at the same places")
        # Tables saved before the count was kept measured every mean over the same sample.
        queries = entry.get("queries", [[min(QUERIES_PER_KIND, points)] * len(ks)] * len(QUERY_KINDS))
        walk = entry.get("walk", _WALKS[False])  # tables before the choice walked whole lists
        if walk not in _WALKS:
            raise IndexFormatError(f"{where}: recall table walk must be one of {list(_WALKS)}, got {walk!r}")
        counts = _query_counts(queries, shape[:2], where)
        return cls(points, ks, efs, recall, error, counts, walk == _WALKS[True])


# How a saved table names its walk (RecallTable.first_part).
_WALKS = ("whole lists", "first part")


def _wilson_lower(share: NDArray[np.float64], count: NDArray[np.int64]) -> NDArray[np.float64]:
    """The lower end of Wilson's score interval one standard error wide, for a share of hits
    ``share`` among ``count`` trials."""
    z2 = 1.0 / count
    spread = np.sqrt(share * (1.0 - share) * z2 + z2 * z2 / 4.0)
    return (share + z2 / 2.0 - spread) / (1.0 + z2)


def _query_counts(value: Any, shape: tuple[int, ...], where: str) -> NDArray[np.int64]:
    """A saved table's query counts: positive integers shaped ``shape``; IndexFormatError otherwise."""
    if (
        not isinstance(value, list)
        or len(value) != shape[0]
        or any(not isinstance(row, list) or len(row) != shape[1] for row in value)
        or any(type(v) is not int or not 1 <= v < 2**31 for row in value for v in row)
    ):
        raise IndexFormatError(f"{where}: recall table queries must be positive integers shaped {shape}")
    return np.array(value, dtype=np.int64)


def _nested(values: NDArray[np.float64]) -> list[Any]:
    return [[[None if math.isnan(v) else round(float(v), 6) for v in row] for row in kind] for kind in values]


def _unit_values(values: Any, shape: tuple[int, ...], where: str) -> NDArray[np.float64]:
    """A saved array of numbers in [0, 1] or nulls (NaN) of ``shape``; IndexFormatError otherwise."""
    try:
        out = np.array(
            [[[math.nan if v is None else v for v in row] for row in kind] for kind in values],
            dtype=np.float64,
        )
    except (TypeError, ValueError):
        out = np.zeros(0)
    if out.shape != shape:
        raise IndexFormatError(f"{where} must be numbers or null, shaped {shape}")
    finite = out[~np.isnan(out)]
    if np.any((finite < 0.0) | (finite > 1.0)):
        raise IndexFormatError(f"{where} must lie in [0, 1]")
    return out


def _increasing_ints(value: Any, where: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or any(type(v) is not int or not 1 <= v < 2**31 for v in value)
        or any(a >= b for a, b in zip(value, value[1:]))
    ):
        raise IndexFormatError(f"{where} must be a non-empty increasing list of integers in [1, 2**31)")
    return tuple(value)


def on_grid(width: int) -> int:
    """The smallest measured width at or above ``width`` (past the grid, the next power of two):
    the widths a batch's queries are widened to fall on few values, one core call each."""
    for e in CALIBRATION_EFS:
        if e >= width:
            return e
    return 1 << (int(width) - 1).bit_length()


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
    found = min(FOUND_QUERIES_PER_KIND, n)
    m = min(queries_per_kind, found)  # the first m of the found kinds' queries are measured at every k
    sources = live_ids[rng.choice(n, size=found, replace=False)]
    stored = index.reconstruct_batch(sources).astype(np.float64)
    ks = tuple(k for k in CALIBRATION_KS if k <= n)
    # The stored queries' exact answers: the first m's every k, the rest's nearest two (itself or
    # a duplicate, and its nearest other, which the near query's step needs).
    truth_stored, i_stored = index._exact_search(stored[:m], max(ks))
    i_nearest = i_stored[:, 1]
    if found > m:
        i_nearest = np.concatenate([i_nearest, index._exact_search(stored[m:], 2)[1][:, 1]])
    nearest = index.reconstruct_batch(i_nearest).astype(np.float64)
    near, near_d = _near_queries(stored, nearest, rng, index.curvature)
    # Offset (the held-out stand-in): a step 1.25 times the distance to the nearest other point,
    # in any direction, so its nearest point lies about as far as a fresh draw's would and
    # everything else farther (docs/recall.md: midpoints of neighbours, the obvious stand-in,
    # measured far easier than held-out queries on spread data).
    gap = np.linalg.norm(stored[:m] - nearest[:m], axis=1)[:, None]
    step = OFFSET_STEP * gap * _directions(rng, (m, stored.shape[1]))
    offset = _inside_ball(stored[:m] + step, index.curvature)
    queries = np.concatenate([stored, near, offset]).astype(np.float32)
    scanned = np.r_[0:m, found : found + m, 2 * found : 2 * found + m]  # the queries with every k's truth
    truth_d = np.concatenate([truth_stored, index._exact_search(queries[scanned[m:]], max(ks))[0]])
    first_d = np.concatenate([np.zeros(found), near_d])  # the found kinds' first answers' distances
    sample = _Sample(queries, scanned, truth_d, np.tile(sources, 2), first_d, ks, n)
    recall, error = _measure(index, sample, first_part=False)
    # The sparser walk where it finds at least what the whole lists find, at every width, k and
    # kind. The table keeps the whole lists' means, then: what both walks reach (the fused
    # search walks whole lists).
    sparse = _measure(index, sample, first_part=True, against=recall) is not None
    counts = np.full((len(QUERY_KINDS), len(ks)), m, dtype=np.int64)
    counts[: len(FOUND_KINDS), 0] = found
    return RecallTable(n, ks, CALIBRATION_EFS, recall, error, counts, first_part=sparse)


@dataclass(frozen=True)
class _Sample:
    """What a calibration measures with: the queries (the found kinds' ``found`` each, then the
    offset kind's m), which of them have every k's exact answer (``scanned``: the first m of
    each kind) and those answers' distances (``truth_d``, by k), the found kinds' first answers
    (``first_ids``, ``first_d``), the ks measured and the live points."""

    queries: NDArray[np.float32]
    scanned: NDArray[np.int64]
    truth_d: NDArray[np.float64]
    first_ids: NDArray[np.int64]
    first_d: NDArray[np.float64]
    ks: tuple[int, ...]
    points: int


_Means = tuple[NDArray[np.float64], NDArray[np.float64]]


@overload
def _measure(index: PoincareIndex, sample: _Sample, *, first_part: bool, against: None = None) -> _Means: ...
@overload
def _measure(
    index: PoincareIndex, sample: _Sample, *, first_part: bool, against: NDArray[np.float64]
) -> _Means | None: ...
def _measure(
    index: PoincareIndex, sample: _Sample, *, first_part: bool, against: NDArray[np.float64] | None = None
) -> _Means | None:
    """The recall table's means and standard errors of walks of every width of the grid (of each
    list's first part with ``first_part``). With ``against`` (another walk's means): None as soon
    as this walk finds less than it at some width, k and kind."""
    ks, m = sample.ks, len(sample.scanned) // len(QUERY_KINDS)
    found = len(sample.first_ids) // len(FOUND_KINDS)
    first = _FirstAnswers(sample.first_ids, sample.first_d, m)
    recall = np.full((len(QUERY_KINDS), len(ks), len(CALIBRATION_EFS)), np.nan)
    error = recall.copy()
    for col, ef in enumerate(CALIBRATION_EFS):
        k_run = max(k for k in ks if k <= ef) if ef >= ks[0] else ks[0]
        # Once every found-kind query found its first answer, wider beams walk only the first m
        # of each kind (the rest are taken to keep finding theirs, as the stop below assumes).
        walked = sample.scanned if first.all_found else np.arange(len(sample.queries))
        d, i = index._walk_search(sample.queries[walked], k_run, ef, first_part=first_part)
        at_scanned = slice(None) if first.all_found else sample.scanned
        for j, k in enumerate(ks):
            if k > k_run:
                continue
            hit = _hits(d[at_scanned, :k], sample.truth_d[:, k - 1]).reshape(len(QUERY_KINDS), m)
            recall[:, j, col], error[:, j, col] = hit.mean(axis=1), hit.std(axis=1) / math.sqrt(m)
        hit = first.measure(d[: len(walked) - m, 0], i[: len(walked) - m, 0]).reshape(len(FOUND_KINDS), found)
        recall[: len(FOUND_KINDS), 0, col] = hit.mean(axis=1)
        error[: len(FOUND_KINDS), 0, col] = hit.std(axis=1) / math.sqrt(found)
        if against is not None and np.any(recall[:, :, col] < against[:, :, col]):
            return None
        # Wider beams measure the same once this one holds every point or already finds every
        # answer of every query (what remains would cost most of the measuring).
        if ef >= sample.points or np.nanmin(recall[:, :, col]) >= 1.0:
            recall[:, :, col + 1 :] = recall[:, :, col : col + 1]
            error[:, :, col + 1 :] = error[:, :, col : col + 1]
            break
    return recall, error


class _FirstAnswers:
    """The found kinds' first answers, known without a scan (``ids``: the point itself or a near
    query's source; ``distances`` to it), checked against the walks' first results: by the
    first ``m`` of each kind alone once every query found its answer at a narrower width."""

    def __init__(self, ids: NDArray[np.int64], distances: NDArray[np.float64], m: int) -> None:
        self.ids, self.distances, self.all_found = ids, distances, False
        found = len(ids) // len(FOUND_KINDS)
        self.first_m = np.concatenate([np.arange(m) + kind * found for kind in range(len(FOUND_KINDS))])

    def measure(self, d: NDArray[Any], i: NDArray[np.int64]) -> NDArray[np.float64]:
        """Per found-kind query, 1.0 where the walk's first result (``d``, ``i``: every query's,
        or the first m of each kind's once all were found) is its answer or a point as near."""
        rows = self.first_m if self.all_found else slice(None)
        hit = np.ones(len(self.ids))
        hit[rows] = (i == self.ids[rows]) | (_hits(d[:, None], self.distances[rows]) > 0)
        self.all_found = self.all_found or bool(hit.all())
        return hit


def _hits(d: NDArray[Any], kth: NDArray[np.float64]) -> NDArray[np.float64]:
    """Recall@k of each row of walk distances ``d`` (n, k) against the exact k-th distance: a
    result counts when it is no farther (ties and duplicates count once each, whichever id the
    walk returned; float32 distances against float64 truth)."""
    bound = kth[:, None] * (1.0 + 1e-5) + 1e-6
    return np.minimum((d <= bound).sum(axis=1), d.shape[1]) / d.shape[1]


def _near_queries(
    stored: NDArray[np.float64], nearest: NDArray[np.float64], rng: np.random.Generator, curvature: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Queries a small step from stored points whose exact nearest is known without a scan, and
    their distances to it: each stored point moved in any direction by a quarter of the Poincaré
    distance to its nearest other point. By the triangle inequality every other point then lies
    at least three quarters of that distance from the query, so the stored point is its nearest.
    A row where rounding to float32 would void that (a point with a duplicate, or whose nearest
    is within float32's resolution) queries the stored point itself."""
    gap = distance(stored, nearest, curvature)
    # A Möbius translation by the stored point is an isometry taking the origin to it, so a
    # step of Poincaré length L from it is the translation of a point at depth L.
    sc = math.sqrt(curvature)
    step = (np.tanh(sc * gap / 8.0) / sc)[:, None] * _directions(rng, stored.shape)
    near = mobius_add(stored, step, curvature).astype(np.float32).astype(np.float64)
    inside = np.sum(near * near, axis=1) * curvature < 1.0 - BALL_MARGIN  # what the index accepts
    near = np.where(inside[:, None], near, stored)
    near_d = distance(near, stored, curvature)
    provable = near_d < 0.5 * gap
    return np.where(provable[:, None], near, stored), np.where(provable, near_d, 0.0)


def _directions(rng: np.random.Generator, shape: tuple[int, ...]) -> NDArray[np.float64]:
    g = rng.standard_normal(shape)
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def _inside_ball(x: NDArray[np.float64], curvature: float) -> NDArray[np.float64]:
    """Rows pulled back inside the ball where a step took them past 1 - 1e-4 of its radius."""
    limit = (1.0 - 1e-4) / math.sqrt(curvature)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.where(norms > limit, x * (limit / np.maximum(norms, 1e-300)), x)
