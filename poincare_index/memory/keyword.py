"""Keyword ranking of a Memory: BM25 (bm25s) over a main segment plus a small delta segment, so
a write never rebuilds the index; the delta is merged into a new main in the background.

Why this shape (benchmarks/bench_keyword_engines.py; BENCHMARKS.md, "Keyword engines"): the
memory's keyword and hybrid modes put the time term on *every* keyword match before cutting, so
they need the BM25 score of all matching rows at once. bm25s gives that as one dense numpy array
(a sparse column sum); tantivy answers a top-10 fast but returns each hit through Python, and a
search right after a write needs a tantivy commit first.

* main: a bm25s index (Lucene BM25, k1 = 1.5, b = 0.75) over the rows live when it was built.
* delta: the rows added since, scored with the main's statistics (N, document frequency, mean
  length), so a memory scores the same in either segment; a term the main never saw takes its
  document frequency from the delta. The delta keeps, per term, its rows with their term
  frequencies and lengths (as numpy arrays once queried).
* deletes are tombstones (a row is never reused: the Memory's rows only grow, and compaction
  resets this index), so a deleted memory never scores; the main keeps it in its statistics
  until the next merge, as a Lucene segment does until it is merged.
* merge: when the delta plus the main's tombstones exceed ``merge_fraction`` of the main (and
  ``merge_min`` rows), a thread builds a new main from the live rows of that moment and swaps it
  in; rows added meanwhile stay in the delta. Searches go on against the old main meanwhile.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import threading
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .. import _core

__all__ = ["KeywordIndex", "analyze", "relative_score_fusion"]

K1, B = 1.5, 0.75
# Scripts written without spaces between words: Han, Hiragana, Katakana, Hangul (+ compatibility).
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")
_APOSTROPHES = "'\u2019"
# The term a document with no term is indexed under (bm25s's own tokenizer gives such a document
# this empty token too): never a query term, since no word is empty.
_NO_TERM = ""
# A longer term (a hex dump, a DNA string, base64) is kept as its first _TERM_HEAD characters, "…"
# and a 64-bit BLAKE2b digest of the whole: one token costs the index the same whatever its
# length (Lucene's standard analyzer likewise caps a token at 255 characters).
_MAX_TERM = 255
_TERM_HEAD = 200


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


_STOP = _stopwords()


def _ranges(codepoints: list[int]) -> str:
    """A regex character-class body of ``codepoints`` (ascending), as ranges."""
    out, i = [], 0
    while i < len(codepoints):
        j = i
        while j + 1 < len(codepoints) and codepoints[j + 1] == codepoints[j] + 1:
            j += 1
        out.append(re.escape(chr(codepoints[i])) + ("-" + re.escape(chr(codepoints[j])) if j > i else ""))
        i = j + 1
    return "".join(out)


@functools.cache
def _word_pattern() -> re.Pattern[str]:
    """Built on first use (tens of ms: a scan of Unicode below U+20000)."""
    word_char = re.compile(rf"[^\W{_CJK}]")
    cjk = re.compile(rf"[{_CJK}]")
    # Combining marks (Mn, Mc: Devanagari vowel signs, Arabic harakat, ...) continue a word: Python's
    # \w holds none of them, so "हिन्दी" fell apart into single letters. Variation selectors
    # (emoji presentation) are no part of a word. Every Mn/Mc code point lies below U+20000 except
    # the variation selectors supplement.
    marks, symbols = [], []
    for c in range(0x80, 0x20000):
        category = unicodedata.category(chr(c))
        mark = category in ("Mn", "Mc")
        if not (mark or category[0] == "S") or word_char.match(chr(c)) or cjk.match(chr(c)):
            continue
        if mark:
            if not 0xFE00 <= c <= 0xFE0F:
                marks.append(c)
        else:
            # Symbols (So: emoji, ©, ✓; Sk: skin tones; Sm: ∑, ≤; Sc: €, ¥), every one below
            # U+20000: a term each, so a search for "🔥" finds the text holding it. ASCII's own
            # (+ < = > | ~ $ ^ `) stay out: operators in code and prose, as punctuation is.
            symbols.append(c)
    mark_class = _ranges(marks)
    word = rf"[^\W{_CJK}]+(?:[{mark_class}]+[^\W{_CJK}]*)*+"
    clitic = rf"[{_APOSTROPHES}](?<=\w.)[^\W{_CJK}](?![\w{mark_class}])"
    return re.compile(rf"{word}|{clitic}|[{_CJK}]+|[{_ranges(symbols)}]")


# ASCII text (no combining mark, no CJK, one apostrophe) by a simpler pattern, ~2x faster: the
# same pieces as _word_pattern() gives. A clitic, an apostrophe and one letter ending a word
# ("'s", "'t", "'d", "'m"), is matched so that it is dropped, as it was when words needed two
# letters: "user's" gives "user" only, "'x'" gives "x".
_ASCII_WORD = re.compile(r"\w+|'(?<=\w')\w(?!\w)")


def analyze(text: str) -> list[str]:
    """The terms of ``text`` (NFC-normalized, lower-cased): its words, English stop words removed;
    a run of CJK characters gives each character and each pair of neighbours (CJK bigrams, as
    Lucene's CJKBigramFilter with unigrams), so 寿司 matches 東京で寿司を食べた; and each non-ASCII
    symbol (emoji, ©, €, ∑, a skin tone) is a term of its own, so "🔥" matches "hot 🔥 take".

    A word is a run of Unicode word characters (letters, digits, ``_``; combining marks after the
    first), of any length: "C", "R", "x" and "7" are terms; a word longer than 255 characters is
    cut to 200 and a digest of the whole. A one-letter clitic after an apostrophe ("'s", "'t") is
    not a term. Punctuation and ASCII symbols are not terms, except in a text with no word, CJK
    or symbol at all (punctuation, ``+``, zero-width characters alone), whose white-space
    separated runs are its terms: "!!!" matches "!!!", as the embedder, which reads such a text
    code point by code point, tells it from "???"."""
    if text.isascii():
        lowered = text.lower()
        pieces = _ASCII_WORD.findall(lowered)
        if not pieces:
            return _runs(lowered)
        return [w if len(w) <= _MAX_TERM else _long_term(w) for w in pieces if w[0] != "'" and w not in _STOP]
    return _analyze_unicode(text)


def _analyze_unicode(text: str) -> list[str]:
    """:func:`analyze` of any text (it takes a faster way for ASCII text)."""
    terms: list[str] = []
    normalized = unicodedata.normalize("NFC", text).lower()
    pieces = _word_pattern().findall(normalized)
    if not pieces:
        return _runs(normalized)
    for piece in pieces:
        if _CJK_RUN.match(piece):
            terms.extend(piece)
            terms.extend(piece[i : i + 2] for i in range(len(piece) - 1))
        elif piece[0] not in _APOSTROPHES and piece not in _STOP:
            terms.append(piece if len(piece) <= _MAX_TERM else _long_term(piece))
    return terms


def _runs(text: str) -> list[str]:
    """The white-space separated runs of a text without word or symbol, as terms."""
    return [r if len(r) <= _MAX_TERM else _long_term(r) for r in text.split()]


def _long_term(term: str) -> str:
    digest = hashlib.blake2b(term.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return f"{term[:_TERM_HEAD]}\u2026{digest}"


@dataclass
class _Main:
    """One immutable bm25s segment and the statistics the delta is scored with."""

    rows: NDArray[np.int64]
    retriever: object | None
    vocab: dict[str, int]
    doc_freq: NDArray[np.int64]  # by term id
    n_docs: int
    mean_length: float


def _build_main(rows: NDArray[np.int64], texts: Sequence[str]) -> _Main:
    import bm25s

    # A document with no term (stop words alone, an empty text) is indexed under one empty
    # token, as bm25s's own tokenizer does: bm25s cannot index a corpus without any token (its
    # vocabulary would be empty), and a document of length 0 would pull its mean length below
    # the one the delta is scored with (every length counted as at least 1).
    tokens = [analyze(t) or [_NO_TERM] for t in texts]
    if not tokens:
        return _Main(rows, None, {}, np.zeros(0, dtype=np.int64), 0, 1.0)
    retriever = bm25s.BM25(k1=K1, b=B, method="lucene")
    retriever.index(tokens, show_progress=False)
    mean_length = float(np.mean([len(t) for t in tokens]))
    doc_freq = np.diff(np.asarray(retriever.scores["indptr"], dtype=np.int64))
    # Terms only: the empty token (bm25s adds it to its vocabulary even without a posting) is
    # never a query term.
    vocab = {w: i for w, i in retriever.vocab_dict.items() if w != _NO_TERM}
    return _Main(rows, retriever, vocab, doc_freq, len(tokens), mean_length)


def _main_scores(
    main: _Main, terms: list[str], dead: NDArray[np.bool_]
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """(rows ascending, BM25) of the main's live documents holding a query term: the sum of the
    per-(term, document) scores bm25s stored in its term-major sparse matrix, added up in the
    core without the GIL (bm25s itself adds them with np.add.at, ~5x slower at 100,000)."""
    scores = main.retriever.scores  # type: ignore[attr-defined]
    ids = np.array([main.vocab[w] for w in terms], dtype=np.int64)
    return _core.sum_postings(
        scores["indptr"], scores["indices"], scores["data"], main.n_docs, ids, main.rows,
        dead.view(np.uint8),
    )  # fmt: skip


class _Postings:
    """One term's delta rows, term frequencies and row lengths, in numpy buffers that grow by
    doubling: an add appends in place, a query reads views (rebuilding arrays from lists for
    the terms each add touched cost ~2 ms per query at a 2,000-row delta)."""

    def __init__(self) -> None:
        self.n = 0
        self.rows = np.zeros(4, dtype=np.int64)
        self.tf = np.zeros(4, dtype=np.float64)
        self.length = np.zeros(4, dtype=np.float64)

    def append(self, row: int, tf: int, length: int) -> None:
        if self.n == self.rows.shape[0]:
            self.rows, self.tf, self.length = (
                np.concatenate([a, np.zeros_like(a)]) for a in (self.rows, self.tf, self.length)
            )
        self.rows[self.n], self.tf[self.n], self.length[self.n] = row, tf, length
        self.n += 1

    def arrays(self) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
        return self.rows[: self.n], self.tf[: self.n], self.length[: self.n]


class _Delta:
    """The rows added since the main was built: per term, the rows holding it with their term
    frequencies and lengths; per row, its number of terms."""

    def __init__(self) -> None:
        self.postings: dict[str, _Postings] = {}
        self.length: dict[int, int] = {}

    def add(self, row: int, terms: list[str]) -> None:
        self.length[row] = len(terms)
        counts: dict[str, int] = {}
        for term in terms:
            counts[term] = counts.get(term, 0) + 1
        for term, tf in counts.items():
            post = self.postings.get(term)
            if post is None:
                post = self.postings[term] = _Postings()
            post.append(row, tf, len(terms))

    def term_arrays(
        self, term: str
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]] | None:
        """(rows, term frequencies, row lengths) of ``term``; None when no delta row holds it."""
        post = self.postings.get(term)
        return None if post is None else post.arrays()

    def keep_after(self, top: int) -> _Delta:
        """A delta of the rows above ``top`` (a merge folded in the rest)."""
        kept = _Delta()
        kept.length = {r: n for r, n in self.length.items() if r > top}
        for term, post in self.postings.items():
            rows, tf, length = post.arrays()
            for i in np.flatnonzero(rows > top).tolist():
                if int(rows[i]) in kept.length:
                    if term not in kept.postings:
                        kept.postings[term] = _Postings()
                    kept.postings[term].append(int(rows[i]), int(tf[i]), int(length[i]))
        return kept


class KeywordIndex:
    """BM25 over the texts of a Memory's live rows, kept current by ``add`` and ``remove``.

    Built lazily on the first ``scores`` call (``build``); thread-safe: writes come from the
    Memory's writer, scores from any reader thread, the merge from its own thread."""

    # A merge re-analyses and re-indexes every live row (~5 s of Python, holding the GIL, at
    # 100,000 memories), so merging past 2 % of the main cost ~2.7 ms of CPU per add and ran
    # during half of a chat loop; past 10 % it is a fifth of that, while a 10 % delta adds
    # ~0.3 ms to a query (benchmarks/bench_chat_loop.py, BENCHMARKS.md "Step 7").
    def __init__(self, merge_fraction: float = 0.10, merge_min: int = 512, background: bool = True) -> None:
        self.merge_fraction = merge_fraction
        self.merge_min = merge_min
        self.background = background
        self._mutex = threading.Lock()
        self._main: _Main | None = None  # None: not built
        self._delta = _Delta()
        self._dead = np.zeros(0, dtype=bool)  # by row
        # Copy on write: a query takes the tombstones as they are and marks them shared; the
        # next remove() copies before it writes. Copying them per query (a fresh 200 KB array at
        # 100,000 rows, page faults included) cost ~0.3 ms of a hybrid search in the chat loop.
        self._dead_shared = False
        self._dead_in_main = 0
        self._merging: threading.Thread | None = None
        self._generation = 0  # bumped by build(): a merge begun before it is dropped

    @property
    def built(self) -> bool:
        return self._main is not None

    def build(self, rows: Sequence[int], texts: Sequence[str]) -> None:
        """A fresh main over ``rows`` (live, ascending) and their texts; an empty delta."""
        main = _build_main(np.asarray(rows, dtype=np.int64), texts)
        with self._mutex:
            self._generation += 1
            self._main, self._delta, self._dead_in_main = main, _Delta(), 0
            n = int(main.rows[-1]) + 1 if main.rows.size else 0
            self._dead, self._dead_shared = np.zeros(n, dtype=bool), False

    def add(self, rows: Sequence[int], texts: Sequence[str]) -> None:
        """New rows (above every row held); a no-op before the first build."""
        if self._main is None:
            return
        analyzed = [analyze(t) for t in texts]
        with self._mutex:
            for row, terms in zip(rows, analyzed):
                self._delta.add(int(row), terms)
            self._cover(max(rows, default=-1) + 1)

    def remove(self, rows: Sequence[int]) -> None:
        """Tombstones: the rows never score again."""
        if self._main is None:
            return
        with self._mutex:
            self._cover(max(rows, default=-1) + 1)
            if self._dead_shared:
                self._dead, self._dead_shared = self._dead.copy(), False
            main_rows = self._main.rows
            for row in rows:
                if not self._dead[row]:
                    self._dead[row] = True
                    if self._delta.length.pop(row, None) is None:
                        i = np.searchsorted(main_rows, row)
                        self._dead_in_main += int(i < main_rows.size and main_rows[i] == row)

    def _cover(self, n_rows: int) -> None:
        """The tombstone array spans ``n_rows`` rows (grown by doubling; mutex held)."""
        if n_rows > self._dead.shape[0]:
            grown = np.zeros(max(n_rows, 2 * self._dead.shape[0]), dtype=bool)
            grown[: self._dead.shape[0]] = self._dead
            self._dead, self._dead_shared = grown, False

    def pending(self) -> int:
        """Rows the next merge folds in: delta rows plus tombstones in the main."""
        return len(self._delta.length) + self._dead_in_main

    def merge_due(self) -> bool:
        main = self._main
        if main is None:
            return False
        return self.pending() > max(self.merge_min, self.merge_fraction * main.n_docs)

    def merge(self, rows: Sequence[int], texts: Sequence[str]) -> None:
        """Folds the delta and the tombstones into a new main over ``rows`` (the live rows of this
        moment, ascending); in a thread when ``background`` (one at a time), else now. Rows added
        or removed while it builds are kept in the delta / as tombstones."""
        if self._merging is not None and self._merging.is_alive():
            return
        generation = self._generation
        rows_arr = np.asarray(rows, dtype=np.int64)
        texts = list(texts)

        def run() -> None:
            main = _build_main(rows_arr, texts)
            with self._mutex:
                if generation != self._generation:
                    return  # a build() reset the index meanwhile
                top = int(rows_arr[-1]) if rows_arr.size else -1
                delta = self._delta.keep_after(top)
                # Removed while building: tombstones in the new main.
                self._dead_in_main = int(np.count_nonzero(self._dead[rows_arr]))
                self._main, self._delta = main, delta

        if self.background:
            self._merging = threading.Thread(target=run, name="poincare-keyword-merge", daemon=True)
            self._merging.start()
        else:
            run()

    def wait(self) -> None:
        """Until a merge in progress has been swapped in."""
        t = self._merging
        if t is not None:
            t.join()

    def close(self) -> None:
        """Drops a merge in progress (its result is not swapped in) and waits for its thread."""
        with self._mutex:
            self._generation += 1
        self.wait()

    def scores(self, query: str, n_rows: int) -> NDArray[np.float64]:
        """BM25 score of every row (0 where no query term occurs or the row is deleted)."""
        out = np.zeros(n_rows, dtype=np.float64)
        rows, bm25 = self.matches(query)
        keep = rows < n_rows
        out[rows[keep]] = bm25[keep]
        return out

    def matches(self, query: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(rows, BM25) of the live rows holding a query term, rows ascending: one pass over the
        query terms' postings and the main's documents in the core, no per-row Python array."""
        terms = list(dict.fromkeys(analyze(query)))
        with self._mutex:
            # The tombstones as of now, shared until the next remove() (the core reads them
            # without the GIL).
            main, delta, dead = self._main, self._delta, self._dead
            self._dead_shared = True
            assert main is not None, "build() first"
            known = [w for w in terms if w in main.vocab]
            delta_part = self._delta_scores(main, delta, terms, dead) if delta.length else None
        parts_rows, parts_scores = [], []
        if known and main.retriever is not None:
            rows, bm25 = _main_scores(main, known, dead)
            parts_rows.append(rows)
            parts_scores.append(bm25)
        if delta_part is not None:
            parts_rows.append(delta_part[0])
            parts_scores.append(delta_part[1])
        if not parts_rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        rows, bm25 = np.concatenate(parts_rows), np.concatenate(parts_scores)
        if rows.shape[0] > 1 and not bool(np.all(rows[1:] > rows[:-1])):
            order = np.argsort(rows, kind="stable")
            rows, bm25 = rows[order], bm25[order]
        return rows, bm25

    @staticmethod
    def _delta_scores(
        main: _Main, delta: _Delta, terms: list[str], dead: NDArray[np.bool_]
    ) -> tuple[NDArray[np.int64], NDArray[np.float64]] | None:
        """(rows, BM25) of the delta rows holding a query term, by the main's statistics."""
        n_delta = len(delta.length)
        parts_rows, parts_scores = [], []
        for term in terms:
            found = delta.term_arrays(term)
            if found is None:
                continue
            rows, tf, dl = found
            tid = main.vocab.get(term)
            if tid is not None:
                df, n = int(main.doc_freq[tid]), main.n_docs
            else:  # a term the main never saw: its frequency in the delta
                df, n = rows.shape[0], main.n_docs + n_delta
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            norm = K1 * ((1.0 - B) + B * np.maximum(dl, 1.0) / main.mean_length)
            parts_rows.append(rows)
            parts_scores.append(idf * tf / (norm + tf))
        if not parts_rows:
            return None
        rows = np.concatenate(parts_rows)
        # Delta rows are the rows added since the main was built, a dense range: summing per
        # row by one bincount over it is O(postings + rows), where np.unique sorted the postings
        # (1.3 ms of a query at a 10,000-row delta).
        low = int(rows.min())
        per_row = np.bincount(rows - low, weights=np.concatenate(parts_scores))
        found = np.flatnonzero(per_row)
        rows, scores = found + low, per_row[found]
        live = rows >= dead.shape[0]
        live[~live] = ~dead[rows[~live]]
        return rows[live], scores[live]


def relative_score_fusion(
    vector_relevance: NDArray[np.float64],
    keyword_bm25: NDArray[np.float64],
    keyword_weight: float,
) -> NDArray[np.float64]:
    """Fused score in [0, 1] of each candidate of the union of both sides' lists, from both of
    its scores: ``keyword_weight`` x BM25 / the best BM25 + (1 - keyword_weight) x the vector
    relevance min-max scaled over the union. Every candidate carries its real score on both
    sides (a BM25 of 0 when no query word matches it), not 0 for the side whose list it missed:
    a keyword match just past the vector side's cut is not ranked as the farthest of all.
    Chosen over reciprocal rank fusion and over scoring a missing side 0 by
    benchmarks/bench_hybrid.py (BENCHMARKS.md "Step 7")."""
    lo, hi = float(vector_relevance.min()), float(vector_relevance.max())
    scaled = (vector_relevance - lo) / (hi - lo) if hi > lo else np.ones_like(vector_relevance)
    best = float(keyword_bm25.max())
    keyword = keyword_bm25 / best if best > 0 else np.zeros_like(keyword_bm25)
    return keyword_weight * keyword + (1.0 - keyword_weight) * scaled
