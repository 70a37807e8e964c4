"""The three search modes of a Memory: vector (fused inside the index), keyword and hybrid."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .._validation import as_positive_int, as_unit_interval
from ..recall import as_width_and_recall
from ..scoring import ScoringSpec
from .keyword import relative_score_fusion
from .result import Result

if TYPE_CHECKING:
    from .state import MemoryRows

__all__ = ["SearchRequest", "run_search", "fit_budget", "MODES"]

# log of the fused score of a candidate scoring 0 on both sides (the vector side's last, no
# keyword match): last, but finite.
_FUSED_FLOOR = 1e-12


# Hybrid search runs its vector side (the index's fused search, in the core without the GIL) on
# a worker thread while the calling thread computes the keyword side: the two take about the
# same time at 100,000 memories (benchmarks/bench_chat_loop.py). One pool for the process,
# created on first use; a forked child starts without it (its threads did not survive the fork).
_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def _vector_side_pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="poincare-hybrid")
        return _POOL


def _forget_pool_after_fork() -> None:
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX; where processes are not forked, nothing to forget
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


MODES = ("vector", "hybrid", "keyword")


@dataclass
class SearchRequest:
    """One search, checked when made (TypeError / ValueError naming the argument): the text
    ``query`` or a ``vector`` in the ball (mode "vector": exactly one; the others need the text),
    ``k`` results at the time of ``scoring``, ``filters`` (a dict over the columns and metadata,
    or a callable on Result), ``window`` (only memories stamped at most that long before the
    query time, and not after it: up to ``future_tolerance`` later, as the decay reads "now"),
    ``session``, ``max_tokens`` (a budget over the results' texts), ``touch``
    (count an access on each result), ``ef`` / ``candidates`` / ``keyword_weight`` (the
    hybrid's keyword share). ``vector`` is set by the caller once the query is embedded."""

    query: str | None
    vector: Any
    k: int
    scoring: ScoringSpec  # the store's time settings with this call's, at its time (Config.scoring)
    filters: Any = None
    window: timedelta | None = None
    session: str | None = None
    mode: str = "vector"
    ef: int | None = None
    recall: float | None = None
    candidates: int = 50
    keyword_weight: float = 0.5
    max_tokens: int | None = None
    touch: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if (self.query is None) == (self.vector is None) and self.mode == "vector":
            raise TypeError("search takes a query text or vector=, exactly one")
        if self.query is not None and not isinstance(self.query, str):
            raise TypeError(f"query must be a str, got {type(self.query).__name__}")
        if self.query is not None and not self.query.strip():
            raise ValueError(
                f"query is empty ({self.query!r}): search takes a text with something to look for"
            )
        if self.mode != "vector" and self.query is None:
            raise TypeError(f"mode={self.mode!r} needs a query text")
        if self.window is not None and (
            not isinstance(self.window, timedelta) or self.window <= timedelta(0)
        ):
            raise ValueError(f"window must be a positive timedelta, got {self.window!r}")
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1
        ):
            raise ValueError(f"max_tokens must be a positive int, got {self.max_tokens!r}")
        as_width_and_recall(self.ef, self.recall)
        if self.session is not None and not isinstance(self.session, str):
            raise TypeError(f"session must be a str, got {type(self.session).__name__}")
        if not isinstance(self.touch, bool):
            raise TypeError(f"touch must be True or False, got {type(self.touch).__name__}")
        self.keyword_weight = as_unit_interval(self.keyword_weight, "keyword_weight")
        self.k = as_positive_int(self.k, "k")
        self.candidates = as_positive_int(self.candidates, "candidates")
        if self.filters is not None and not (isinstance(self.filters, Mapping) or callable(self.filters)):
            raise TypeError(
                f"filters must be a dict or a callable on Result, got {type(self.filters).__name__}"
            )
        if self.vector is not None:
            raw = np.asarray(self.vector)
            if raw.dtype.kind not in "fiu":
                raise TypeError(f"vector must be numeric, got dtype {raw.dtype}")
            vec = raw.astype(np.float64)
            self.vector = vec.reshape(1, -1) if vec.ndim == 1 else vec

    @property
    def window_bounds(self) -> tuple[int, int] | None:
        """[first, last] microseconds a memory's t may hold (None: no window). The end is the
        query time plus the tolerance within which a stamp counts as now, so an as-of search
        (``at_time`` in the past) never sees what was stamped after it."""
        if self.window is None:
            return None
        at = self.scoring.at_us
        return at - self.window // timedelta(microseconds=1), at + self.scoring.future_tolerance_us


def run_search(rows: MemoryRows, req: SearchRequest, build_lock: Any) -> list[Result]:
    """Ranked results of one request (the caller holds the Memory's read lock; ``build_lock``
    guards the keyword index's build)."""
    live = len(rows.row_of)
    # No more results than memories: the index pads to k, and k=10**9 must not allocate for it.
    k = min(req.k, max(live, 1))
    post = None if req.filters is None or isinstance(req.filters, Mapping) else req.filters
    dict_filter = req.filters if isinstance(req.filters, Mapping) else None
    if req.session is not None:
        if not rows.has_column("session"):
            return []  # no memory was ever added in a session
        scope = {"session": req.session}
        dict_filter = scope if dict_filter is None else {"$and": [scope, dict(dict_filter)]}
    mask = rows.mask(dict_filter, req.window_bounds)
    if live == 0:
        return []
    fetch = k
    while True:
        if req.mode == "vector":
            results = _vector(rows, req, fetch, mask)
        else:
            results = _lexical(rows, req, fetch, mask, build_lock)
        exhausted = len(results) < fetch
        if post is not None:
            results = [r for r in results if post(r)]
        if len(results) >= k or exhausted or post is None:
            return results[:k]
        grown = min(fetch * 4, max(live, k))
        if grown <= fetch:  # every memory was ranked already
            return results[:k]
        fetch = grown


def _vector(rows: MemoryRows, req: SearchRequest, fetch: int, mask: Any) -> list[Result]:
    spec = req.scoring
    ef = None if req.ef is None else max(req.ef, fetch)
    r = rows.index._search_scoring(req.vector, fetch, spec, filters=mask, ef=ef, recall=req.recall)
    keep = r.ids[0] >= 0
    found = r.ids[0][keep].tolist()
    scored = [
        {
            "score": float(s),
            "distance": float(d),
            "depth": float(h),
            "time_weight": float(w),
            "mode": "vector",
        }
        for s, d, h, w in zip(
            r.scores[0][keep], r.distances[0][keep], r.depths[0][keep], r.time_weights[0][keep]
        )
    ]
    return rows.results(found, scored, spec)


def _lexical(rows: MemoryRows, req: SearchRequest, fetch: int, mask: Any, build_lock: Any) -> list[Result]:
    """keyword: log BM25 + time term over every matching memory; hybrid: relative score fusion
    (keyword.relative_score_fusion) over the union of the best ``candidates`` by the fused
    vector score and by log BM25 + time term, each scored on both sides, then log of the fused
    score + time term."""
    assert req.query is not None
    vector_side: Future[Any] | None = None
    if req.mode == "hybrid":
        depth = max(req.candidates, fetch)
        vector_side = _vector_side_pool().submit(
            rows.index._search_scoring, req.vector, depth, req.scoring, filters=mask,
            ef=None if req.ef is None else max(depth, req.ef), recall=req.recall,
        )  # fmt: skip
    try:
        return _lexical_sides(rows, req, fetch, mask, vector_side, build_lock)
    finally:
        if vector_side is not None:
            vector_side.cancel()
            if not vector_side.cancelled():
                vector_side.exception()  # waits: nothing of this search runs on after it returns


def _lexical_sides(
    store: MemoryRows,
    req: SearchRequest,
    fetch: int,
    mask: Any,
    vector_side: Future[Any] | None,
    build_lock: Any,
) -> list[Result]:
    spec = req.scoring
    assert req.query is not None
    # Deleted rows are tombstones in the keyword index: every match is a live row.
    matches, match_bm25 = store.keyword_matches(req.query, build_lock)
    if mask is not None:
        allowed = matches < mask.shape[0]
        allowed[allowed] = mask[matches[allowed]]
        matches, match_bm25 = matches[allowed], match_bm25[allowed]
    relevance_of_match = np.log(match_bm25)
    vector_rank_of: dict[int, int] = {}
    keyword_top = None  # hybrid: the keyword side's list, best first
    vector_terms: dict[int, tuple[float, float]] = {}  # row -> (distance, depth) the index gave
    if req.mode == "keyword":
        rows = matches
        relevance = relevance_of_match
        keyword_key = relevance_of_match  # keyword_rank: the order by BM25 alone
    else:
        assert vector_side is not None
        fused = _hybrid_union(store, req, fetch, matches, match_bm25, relevance_of_match, vector_side)
        if fused is None:
            return []
        rows, relevance, keyword_key, keyword_top, vector_terms, vector_rank_of = fused
    # Both modes: relevance + time term for every row (all matches, or the fused union) and
    # the cut, in one pass in the core; the weights of the rows kept for their results.
    score, order = store.ranked_with_time(rows, relevance, spec, fetch)
    if order.shape[0] == 0:
        return []
    logw = store.log_weights(rows[order], spec)
    top = rows[order].tolist()
    keyword_rank = _ranks_among(keyword_key, matches, top, keyword_top)
    missing = [row for row in top if row not in vector_terms]
    if missing and req.vector is not None:
        dist, depths = store.exact_terms(missing, req.vector[0])
        vector_terms.update(zip(missing, zip(dist.tolist(), depths.tolist())))
    scored = []
    for j, i in enumerate(order.tolist()):
        row = top[j]
        scored.append(
            {
                "score": float(score[i]),
                "distance": vector_terms[row][0] if row in vector_terms else math.nan,
                "depth": vector_terms[row][1] if row in vector_terms else math.nan,
                "time_weight": float(np.exp(logw[j])),
                "mode": req.mode,
                "relevance": float(relevance[i]),
                "vector_rank": vector_rank_of.get(row),
                "keyword_rank": keyword_rank[j],
            }
        )
    return store.results(top, scored, spec)


def _hybrid_union(
    store: MemoryRows,
    req: SearchRequest,
    fetch: int,
    matches: NDArray[np.int64],
    match_bm25: NDArray[np.float64],
    relevance_of_match: NDArray[np.float64],
    vector_side: Future[Any],
) -> tuple[Any, ...] | None:
    """The hybrid's candidates: the union of the vector side's list and the keyword side's, each
    row scored on both sides and fused; (rows, relevance, keyword key, keyword list, vector terms
    per row, vector rank per row), or None when both lists are empty."""
    spec = req.scoring
    # Both sides are cut by their time-aware score, never by relevance alone: the vector side
    # takes its candidates by the fused score inside the index, the keyword side ranks every
    # match by log BM25 + time term; so a recent memory deep in the plain distance or BM25
    # order still reaches the fusion.
    depth = max(req.candidates, fetch)
    keyword_key, keyword_order = store.ranked_with_time(matches, relevance_of_match, spec, depth)
    keyword_top = matches[keyword_order]
    # The keyword list's exact vector terms while the vector side still runs (for rows it
    # also found, the index's own float64 values replace them: equal up to rounding).
    exact: dict[int, tuple[float, float]] = {}
    if keyword_top.shape[0]:
        dist, depths = store.exact_terms(keyword_top.tolist(), req.vector[0])
        exact = dict(zip(keyword_top.tolist(), zip(dist.tolist(), depths.tolist())))
    r = vector_side.result()
    keep = r.ids[0] >= 0  # padding (fewer eligible than asked) is id -1
    vec_rank = r.ids[0][keep]
    vec_rank_list = vec_rank.tolist()
    vector_rank_of = {row: i + 1 for i, row in enumerate(vec_rank_list)}
    pairs = zip(r.distances[0][keep].tolist(), r.depths[0][keep].tolist())
    # The union of both lists, each row scored on both sides: the index's distance for its
    # candidates, the exact one for keyword matches past the vector side's cut.
    vector_terms = exact
    vector_terms.update(zip(vec_rank_list, pairs))
    rows = np.union1d(vec_rank, keyword_top)
    if rows.shape[0] == 0:
        return None
    terms = np.array([vector_terms[row] for row in rows.tolist()], dtype=np.float64).reshape(-1, 2)
    # The vector side's relevance is its score without the time term (the caller adds it once).
    vector_relevance = spec.depth_bias * terms[:, 1] - terms[:, 0]
    keyword_bm25 = _bm25_of(rows, matches, match_bm25)
    fused = relative_score_fusion(vector_relevance, keyword_bm25, req.keyword_weight)
    relevance = np.log(np.maximum(fused, _FUSED_FLOOR))
    return rows, relevance, keyword_key, keyword_top, vector_terms, vector_rank_of


def _bm25_of(
    rows: NDArray[np.int64], matches: NDArray[np.int64], bm25: NDArray[np.float64]
) -> NDArray[np.float64]:
    """BM25 of ``rows`` given the matches' (rows ascending): 0 for a row no query word is in."""
    if matches.shape[0] == 0:
        return np.zeros(rows.shape[0])
    pos = np.minimum(np.searchsorted(matches, rows), matches.shape[0] - 1)
    return np.where(matches[pos] == rows, bm25[pos], 0.0)


def _ranks_among(
    key: NDArray[np.float64],
    matches: NDArray[np.int64],
    top: list[int],
    ranked: NDArray[np.int64] | None = None,
) -> list[int | None]:
    """For each row of ``top``: its 1-based rank among ``matches`` by ``key`` (ties by row), or
    None when it is not a match. ``ranked``: the first rows of that order, already known (the
    hybrid's keyword list); the others are counted, all at once."""
    out: list[int | None] = [None] * len(top)
    known = {} if ranked is None else {row: i + 1 for i, row in enumerate(ranked.tolist())}
    pos = np.searchsorted(matches, top)  # matches are ascending rows
    count = []
    for j, (row, p) in enumerate(zip(top, pos.tolist())):
        if row in known:
            out[j] = known[row]
        elif p < matches.shape[0] and matches[p] == row:
            count.append((j, p))
    step = max(1, (1 << 22) // max(matches.shape[0], 1))  # at most ~4 M comparisons at a time
    for c in range(0, len(count), step):
        part = count[c : c + step]
        where = np.array([p for _, p in part])
        k = key[where][:, None]
        ahead = (key > k) | ((key == k) & (matches < matches[where][:, None]))
        for (j, _), n in zip(part, np.count_nonzero(ahead, axis=1).tolist()):
            out[j] = int(n) + 1
    return out


def fit_budget(results: list[Result], budget: int, counter: Callable[[str], int]) -> list[Result]:
    """The longest prefix of ``results`` whose texts' token counts add up to at most ``budget``."""
    out, used = [], 0
    for r in results:
        used += int(counter(r.text))
        if used > budget:
            break
        out.append(r)
    return out
