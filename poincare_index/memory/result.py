"""What a Memory returns: Result (one memory, with its score breakdown) and MemoryStats."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["Result", "Explanation", "MemoryStats"]


@dataclass(frozen=True)
class Explanation:
    """The score of one result, term by term.

    mode "vector": ``score = distance_term + depth_term + time_term`` with distance_term =
    -distance, depth_term = depth_bias * depth, time_term = time_coef * log(time_weight).
    mode "keyword"/"hybrid": ``score = relevance_term + time_term``, relevance_term = log of the
    BM25 score (keyword) or of the fused score in [0, 1] (hybrid, relative score fusion).
    """

    mode: str
    score: float
    distance_term: float
    depth_term: float
    time_term: float
    relevance_term: float = 0.0
    vector_rank: int | None = None
    keyword_rank: int | None = None

    def __str__(self) -> str:
        if self.mode == "vector":
            return (
                f"score {self.score:.4f} = -distance {self.distance_term:.4f} "
                f"+ depth {self.depth_term:.4f} + time {self.time_term:.4f}"
            )
        ranks = (
            f" (vector rank {self.vector_rank}, keyword rank {self.keyword_rank})"
            if self.mode == "hybrid"
            else ""
        )
        relevance = f"{self.mode} {self.relevance_term:.4f}{ranks}"
        return f"score {self.score:.4f} = {relevance} + time {self.time_term:.4f}"


@dataclass(frozen=True)
class Result:
    """One memory. Times are timezone-aware UTC; valid_from/valid_until None mean open ends.

    The score fields are NaN for results of ``list()`` (nothing was ranked).
    """

    id: str
    text: str
    score: float
    distance: float
    depth: float
    time_weight: float
    t: datetime
    valid_from: datetime | None
    valid_until: datetime | None
    access_count: int
    metadata: dict[str, Any] = field(default_factory=dict)
    mode: str = "vector"
    depth_bias: float = 0.0
    time_coef: float = 1.0
    relevance: float = math.nan
    vector_rank: int | None = None
    keyword_rank: int | None = None

    def explain(self) -> Explanation:
        """The score broken into its terms (see :class:`Explanation`)."""
        with_time = self.time_coef * math.log(self.time_weight) if self.time_weight > 0 else -math.inf
        if self.time_coef == 0:
            with_time = 0.0
        return Explanation(
            mode=self.mode,
            score=self.score,
            distance_term=-self.distance,
            depth_term=self.depth_bias * self.depth if self.depth_bias else 0.0,
            time_term=with_time,
            relevance_term=self.relevance,
            vector_rank=self.vector_rank,
            keyword_rank=self.keyword_rank,
        )


@dataclass(frozen=True)
class MemoryStats:
    """Retrieval counters (a persistent store's carry over reopening; see usage.py) for the
    period asked (all, or from ``since``'s hour on): ``tokens_per_retrieval`` is the mean token
    count (by the store's token counter) of the texts each search returned; ``sessions`` the
    same per session id (searches made through a session or with ``session=``)."""

    memories: int
    retrievals: int
    tokens_retrieved: int
    tokens_per_retrieval: float
    stored_tokens: int
    sessions: dict[str, Any] = field(default_factory=dict)
