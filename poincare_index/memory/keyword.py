"""Keyword ranking (BM25, via the bm25s library) and reciprocal rank fusion."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["KeywordIndex", "reciprocal_rank_fusion"]


class KeywordIndex:
    """BM25 (Lucene variant, k1=1.5, b=0.75, English stop words) over the texts of given rows.

    bm25s indexes a fixed corpus, so the index is rebuilt on the first keyword query after the
    texts changed (O(total tokens); about a second per 100,000 short memories).
    """

    def __init__(self) -> None:
        self._rows: NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._retriever = None
        self._vocab: dict[str, int] = {}

    def build(self, rows: NDArray[np.int64], texts: Sequence[str]) -> None:
        import bm25s

        self._rows = np.asarray(rows, dtype=np.int64)
        if len(texts) == 0:
            self._retriever = None
            return
        tokens = bm25s.tokenize(list(texts), stopwords="en", show_progress=False)
        retriever = bm25s.BM25()
        retriever.index(tokens, show_progress=False)
        self._retriever = retriever
        self._vocab = tokens.vocab

    def scores(self, query: str, n_rows: int) -> NDArray[np.float64]:
        """BM25 score of every row (0 where no query term occurs), indexed by row."""
        out = np.zeros(n_rows, dtype=np.float64)
        if self._retriever is None:
            return out
        import bm25s

        q = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        q = [w for w in q if w in self._vocab]
        if not q:
            return out
        doc_scores = np.asarray(self._retriever.get_scores(q), dtype=np.float64)
        out[self._rows] = doc_scores
        return out


def reciprocal_rank_fusion(rankings: Sequence[NDArray[np.int64]], k: int = 60) -> dict[int, float]:
    """RRF (Cormack et al. 2009): row -> sum over rankings of 1 / (k + rank), rank from 1."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking.tolist(), start=1):
            fused[row] = fused.get(row, 0.0) + 1.0 / (k + rank)
    return fused
