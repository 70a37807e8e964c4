"""The incremental keyword index: BM25 against an independent float64 reference, the delta scored
as the main would, deletes and updates reaching it, background merges, CJK text."""

from __future__ import annotations

import math
from collections import Counter
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poincare_index.memory.keyword import KeywordIndex, analyze
from poincare_memory import Memory, Retention

WORDS = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega rho".split()


def _texts(rng: np.random.Generator, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 9)))) for _ in range(n)]


def reference_bm25(
    query: str, docs: dict[int, str], stats_docs: dict[int, str] | None = None
) -> dict[int, float]:
    """Lucene BM25 (k1 1.5, b 0.75) in float64, by the definition; statistics from ``stats_docs``
    (default: the scored documents themselves)."""
    stats = docs if stats_docs is None else stats_docs
    terms = {r: analyze(t) for r, t in stats.items()}
    n = len(terms)
    mean_len = sum(max(len(t), 1) for t in terms.values()) / n
    df = Counter(w for t in terms.values() for w in set(t))
    out = {}
    for row, text in docs.items():
        tf = Counter(analyze(text))
        s = 0.0
        for w in dict.fromkeys(analyze(query)):
            if tf[w] and df[w]:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                s += idf * tf[w] / (1.5 * (0.25 + 0.75 * max(len(analyze(text)), 1) / mean_len) + tf[w])
        out[row] = s
    return out


def _assert_scores(kw: KeywordIndex, query: str, expected: dict[int, float], n_rows: int) -> None:
    got = kw.scores(query, n_rows)
    want = np.zeros(n_rows)
    for row, s in expected.items():
        want[row] = s
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)  # bm25s keeps float32


def test_analyze_words_stop_words_and_cjk_bigrams():
    assert analyze("The Quick brown fox, a fox!") == ["quick", "brown", "fox", "fox"]
    assert analyze("寿司") == ["寿", "司", "寿司"]
    terms = analyze("東京で寿司を食べた")
    assert "寿司" in terms and "東京" in terms and "寿" in terms
    assert analyze("Tokyo東京sushi") == ["tokyo", "東", "京", "東京", "sushi"]
    assert analyze("서울에서 김치") == ["서", "울", "에", "서", "서울", "울에", "에서", "김", "치", "김치"]


def test_analyze_keeps_one_letter_words_and_digits():
    assert analyze("I like C and R; x = 7") == ["i", "like", "c", "r", "x", "7"]
    assert analyze("Plan B, vitamin D3 and 3.14") == ["plan", "b", "vitamin", "d3", "3", "14"]
    # Stop words as before ("a" is one); a one-letter clitic after an apostrophe is not a word,
    # a quoted letter is.
    assert analyze("a user's note: don't use 'x'") == ["user", "note", "don", "use", "x"]
    assert analyze("it\u2019s O'Brien") == ["o", "brien"]


def test_analyze_unicode_words_emoji_and_combining_marks():
    assert analyze("Привет мир я") == ["привет", "мир", "я"]
    assert analyze("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # vowel signs (combining) stay in the word
    assert analyze("مُحَمَّد") == ["مُحَمَّد"]
    assert analyze("cafe\u0301") == analyze("café") == ["café"]  # NFC: decomposed equals composed


def test_analyze_symbols_are_terms_and_punctuation_alone_its_runs():
    # A non-ASCII symbol is a term of its own, wherever it stands; ASCII symbols and punctuation
    # are not, unless a text holds nothing else.
    assert analyze("👍") == ["👍"]
    assert analyze("🎉🔥 !!! ...") == ["🎉", "🔥"]
    assert analyze("👍🏽") == ["👍", "🏽"]  # the skin tone (Sk) apart: "👍" finds it
    assert analyze("hot 🔥 take, 5€ © 2024 ≤ ∑") == ["hot", "🔥", "take", "5", "€", "©", "2024", "≤", "∑"]
    assert analyze("1\ufe0f\u20e3 ❤\ufe0f") == [
        "1",
        "❤",
    ]  # a keycap is its digit; a variation selector nothing
    assert analyze("👨\u200d👩\u200d👧") == ["👨", "👩", "👧"]  # a ZWJ sequence: its people
    assert analyze("x = 7 + y | z") == ["x", "7", "y", "z"]  # ASCII operators as before
    assert analyze("!!! ...") == ["!!!", "..."]
    assert analyze(":-) ;)") == [":-)", ";)"]
    assert analyze("\u200b") == ["\u200b"]  # zero-width alone
    assert analyze("+") == ["+"]
    for nothing in ["", " \n\t", "\u3000", "the of a", "it's"]:
        assert analyze(nothing) == [], nothing  # white space or stop words: no term, no runs


def test_analyze_caps_a_long_term_by_a_digest_of_it():
    # A hex dump or a DNA string is one word: kept as its head and a digest, so one token costs
    # the index ~220 bytes whatever its length, and equal words stay equal terms.
    rng = np.random.default_rng(5)
    hex_word = "".join(rng.choice(list("0123456789abcdef"), size=100_000))
    term = analyze(hex_word)
    assert len(term) == 1 and len(term[0]) == 200 + 1 + 16
    assert term[0].startswith(hex_word[:200]) and term[0][200] == "\u2026"
    assert analyze(hex_word.upper()) == term  # analysed (lower-cased) first
    assert analyze(hex_word[:-1] + "z") != term  # same head, another word: another term
    assert analyze("x" * 255) == ["x" * 255]  # up to 255 characters: itself
    assert len(analyze("x" * 256)[0]) == 217
    assert len(analyze("é" * 256)[0]) == 217  # the Unicode path likewise
    assert len(analyze("!" * 1000)[0]) == 217  # and a run of punctuation
    kw = KeywordIndex(background=False)
    kw.build([0, 1], [f"dump {hex_word}", "another note"])
    assert kw.matches(hex_word)[0].tolist() == [0]
    assert max(len(t) for t in kw._main.vocab) == 217
    kw.add([2], [hex_word + " again"])  # the delta holds the capped term too
    assert kw.matches(hex_word)[0].tolist() == [0, 2]
    assert max(len(t) for t in kw._delta.postings) == 217


@given(st.text(alphabet=st.sampled_from(list("abcxyzABC019_' .,-!+\n")), max_size=40))
@settings(max_examples=300, deadline=None)
def test_analyze_ascii_fast_path_equals_the_unicode_path(text):
    from poincare_index.memory.keyword import _analyze_unicode

    assert analyze(text) == _analyze_unicode(text)


def test_documents_without_terms_score_as_the_reference_in_main_and_delta():
    # A document of stop words or white space alone has length 1 in the mean length, in the main
    # (bm25s) as in the delta: the same text scores the same in either segment.
    docs = ["alpha beta", "the", "alpha", "of a", " "]
    kw = KeywordIndex(background=False)
    kw.build(range(5), docs)
    _assert_scores(kw, "alpha", reference_bm25("alpha", dict(enumerate(docs))), 5)
    kw.add([5], ["alpha beta"])
    got = kw.scores("alpha", 6)
    assert got[5] == pytest.approx(got[0], rel=2e-6)


@pytest.mark.filterwarnings("error")
def test_an_index_over_texts_without_any_term():
    kw = KeywordIndex(background=False)
    kw.build(range(3), ["", " \n", "the of a"])  # bm25s alone: "max() arg is an empty sequence"
    for q in ["x", "thumbs", "👍", "!!!", ""]:
        rows, bm25 = kw.matches(q)
        assert rows.size == 0 and bm25.size == 0
    texts = ["", " \n", "the of a", "x marks the spot", "🎉"]
    kw.add([3, 4], texts[3:])  # the delta, scored with the main's statistics
    assert kw.matches("x")[0].tolist() == [3]
    kw.merge(range(5), texts)
    _assert_scores(kw, "x spot", reference_bm25("x spot", dict(enumerate(texts))), 5)
    kw.build([], [])  # no rows at all
    assert kw.matches("x")[0].size == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_main_and_delta_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    texts = _texts(rng, 60)
    kw = KeywordIndex(background=False)
    kw.build(range(40), texts[:40])
    main_docs = dict(enumerate(texts[:40]))
    for q in ["alpha", "beta gamma", "omega omega rho", "nothing here"]:
        _assert_scores(kw, q, reference_bm25(q, main_docs), 40)
    kw.add(range(40, 60), texts[40:])
    for q in ["alpha", "beta gamma", "omega omega rho"]:
        # The delta is scored with the main's statistics, so a memory scores the same in either.
        delta_docs = {r: texts[r] for r in range(40, 60)}
        expected = reference_bm25(q, main_docs) | reference_bm25(q, delta_docs, stats_docs=main_docs)
        _assert_scores(kw, q, expected, 60)


@pytest.mark.parametrize("seed", [0, 1])
def test_adds_and_deletes_then_a_merge_equal_a_fresh_build(seed):
    rng = np.random.default_rng(seed)
    texts = _texts(rng, 300)
    kw = KeywordIndex(background=False)
    kw.build(range(100), texts[:100])
    live = set(range(100))
    next_row = 100
    for _ in range(40):  # a random mix of single adds, batches and deletes
        if rng.random() < 0.6:
            n = int(rng.integers(1, 6))
            rows = list(range(next_row, next_row + n))
            kw.add(rows, [texts[r] for r in rows])
            live.update(rows)
            next_row += n
        else:
            gone = rng.choice(sorted(live), size=int(rng.integers(1, 4)), replace=False).tolist()
            kw.remove(gone)
            live.difference_update(gone)
        got = kw.scores("alpha kappa", next_row)
        assert all(got[r] == 0 for r in range(next_row) if r not in live)  # a deleted row never scores
        assert all(got[r] > 0 for r in live if {"alpha", "kappa"} & set(analyze(texts[r])))
    rows = sorted(live)
    kw.merge(rows, [texts[r] for r in rows])
    assert kw.pending() == 0
    for q in ["alpha kappa", "sigma", "zeta theta lambda"]:
        _assert_scores(kw, q, reference_bm25(q, {r: texts[r] for r in rows}), next_row)


def test_tombstones_a_query_read_are_never_written_after_it():
    # The core reads a query's tombstones without the GIL: a later remove() must write a copy.
    texts = [f"alpha note {i}" for i in range(50)]
    kw = KeywordIndex(background=False)
    kw.build(range(50), texts)
    kw.remove([3])
    kw.matches("alpha")
    seen = kw._dead
    before = seen.copy()
    kw.remove([7, 9])
    assert np.array_equal(seen, before)
    rows, _ = kw.matches("alpha")
    assert {3, 7, 9}.isdisjoint(rows.tolist()) and len(rows) == 47
    kw.remove([11])  # no query since the last remove: written in place, still correct
    assert 11 not in kw.matches("alpha")[0].tolist()


def test_background_merge_keeps_what_changed_while_it_built(monkeypatch):
    import threading

    import poincare_index.memory.keyword as keyword

    rng = np.random.default_rng(5)
    texts = _texts(rng, 200)
    kw = KeywordIndex(background=True)
    kw.build(range(100), texts[:100])
    kw.add(range(100, 150), texts[100:150])
    started, release = threading.Event(), threading.Event()
    real_build = keyword._build_main

    def slow_build(rows, texts_):
        started.set()
        release.wait(10)
        return real_build(rows, texts_)

    monkeypatch.setattr(keyword, "_build_main", slow_build)
    kw.merge(range(150), texts[:150])
    started.wait(10)
    kw.add(range(150, 200), texts[150:200])  # while the merge builds
    kw.remove([3, 120, 170])
    release.set()
    kw.wait()
    live = [r for r in range(200) if r not in (3, 120, 170)]
    got = kw.scores("alpha", 200)
    assert got[3] == got[120] == got[170] == 0
    assert all(got[r] > 0 for r in live if "alpha" in analyze(texts[r]))
    assert kw.pending() == 50 + 1  # rows 150.. stayed in the delta (170 removed), row 3 a tombstone
    kw.close()


def test_memory_keyword_search_after_each_write_sees_adds_deletes_and_updates():
    t = datetime(2026, 3, 1, tzinfo=timezone.utc)
    mem = Memory(decay=None)
    mem.add_many([f"note {i} about the weather" for i in range(50)], [f"n{i}" for i in range(50)], t=t)
    assert len(mem.search("weather", k=100, mode="keyword", touch=False)) == 50  # builds the index
    for i in range(5):  # a chat loop: every search follows a write
        mem.add(f"turn {i}: the user likes pistachio ice cream", id=f"turn{i}", t=t)
        hits = mem.search("pistachio", k=10, mode="keyword", touch=False)
        assert {h.id for h in hits} == {f"turn{j}" for j in range(i + 1)}
    assert (
        mem._rows.keyword.built and mem._rows.keyword.pending() == 5
    )  # no rebuild: the adds are in the delta
    mem.delete("turn2")
    assert "turn2" not in {h.id for h in mem.search("pistachio", k=10, mode="keyword", touch=False)}
    mem.update("turn3", "turn 3: the user now prefers hazelnut")
    assert "turn3" not in {h.id for h in mem.search("pistachio", k=10, mode="keyword", touch=False)}
    assert [h.id for h in mem.search("hazelnut", k=10, mode="keyword", touch=False)] == ["turn3"]
    assert [h.id for h in mem.search("hazelnut", k=10, mode="hybrid", touch=False)][0] == "turn3"


def test_retention_reaches_the_keyword_index(tmp_path):
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    clock = [start + timedelta(days=60)]
    mem = Memory(
        decay=None,
        retention=Retention(max_age=timedelta(days=30), archive_dir=None, every=timedelta(hours=1),
                            clock=lambda: clock[0]),
    )  # fmt: skip
    mem.add("an old note on tapioca", id="old", t=start)
    mem.add("a fresh note on tapioca", id="new", t=clock[0])
    assert {h.id for h in mem.search("tapioca", mode="keyword", touch=False, at_time=clock[0])} == {"new"}


def test_keyword_search_finds_emoji_and_punctuation_that_vector_search_sees():
    mem = Memory(decay=None)
    mem.add_many(
        ["🔥", "hot 🔥 take", "party 🎉🎉", "🎉", "!!!", "???", "plain words"],
        ["fire", "hot", "party", "tada", "bang", "what", "plain"],
    )
    search = lambda q, mode="keyword": [h.id for h in mem.search(q, k=10, mode=mode, touch=False)]  # noqa: E731
    assert set(search("🔥")) == {"fire", "hot"}
    assert set(search("🎉")) == {"party", "tada"}
    assert search("!!!") == ["bang"]
    assert search("🔥", mode="vector")[0] == "fire"  # no longer tied with every text of symbols
    assert search("🔥", mode="hybrid")[0] == "fire"
    mem.add("🔥🔥🔥", id="fires")  # into the delta
    assert set(search("🔥")) == {"fire", "hot", "fires"}
    assert search("🔥", mode="vector")[:2] == ["fire", "fires"]


def test_cjk_query_finds_text_without_spaces():
    mem = Memory(decay=None)
    mem.add("東京で寿司を食べた", id="sushi")
    mem.add("大阪でたこ焼きを食べた", id="takoyaki")
    mem.add("I ate sushi in Tokyo", id="en")
    assert [h.id for h in mem.search("寿司", mode="keyword", touch=False)] == ["sushi"]
    assert [h.id for h in mem.search("寿司", mode="hybrid", touch=False)][0] == "sushi"
    mem.add("札幌で寿司とラーメン", id="sapporo")  # into the delta
    assert {h.id for h in mem.search("寿司", mode="keyword", touch=False)} == {"sushi", "sapporo"}


def test_a_merge_is_started_when_the_delta_grows_and_results_stay_right():
    mem = Memory(decay=None)
    mem._rows.keyword.merge_min = 20
    mem.add_many([f"seed memory {i}" for i in range(30)], [f"s{i}" for i in range(30)])
    mem.search("seed", mode="keyword", touch=False)
    for i in range(60):
        mem.add(f"chat turn {i} mentions saffron", id=f"c{i}")
        hits = mem.search("saffron", k=100, mode="keyword", touch=False)
        assert len(hits) == i + 1
    mem._rows.keyword.wait()
    assert mem._rows.keyword.pending() < 60  # merged at least once on the way
    assert len(mem.search("saffron", k=100, mode="keyword", touch=False)) == 60
    mem.close()


@given(
    st.lists(st.integers(-3, 3), min_size=1, max_size=60),
    st.integers(1, 70),
)
@settings(max_examples=200, deadline=None)
def test_top_order_equals_a_full_sort_with_ties_by_row(values, k):
    from poincare_index import _core
    from poincare_index.decay import policy_terms
    from poincare_index.memory.search import _ranks_among

    score = np.asarray(values, dtype=np.float64)  # few distinct values: many ties
    rows = np.arange(score.shape[0], dtype=np.int64) * 3 + 1
    full = np.lexsort((rows, -score))[:k]
    t = np.zeros(200, dtype=np.int64)
    access = np.zeros(200, dtype=np.uint32)
    keys, order = _core.rank_with_time_term(
        _core.ScoreSpec(policy_terms(None), 0, 1.0, 0, 0.0, 0.0), (t, t, t, access), rows, score, k
    )
    np.testing.assert_array_equal(keys, score)
    np.testing.assert_array_equal(order, full)
    top = rows[full].tolist()
    ranks = _ranks_among(score, rows, top + [0])
    assert ranks[:-1] == list(range(1, len(top) + 1)) and ranks[-1] is None


def test_core_sum_postings_equals_a_numpy_reference():
    """The core's sum of a CSC matrix's columns per document (the main segment's BM25), against
    np.add.at, with repeated terms, tombstones, an empty query and refused malformed input."""
    from poincare_index import _core

    rng = np.random.default_rng(3)
    n_terms, n_docs = 40, 700
    lengths = rng.integers(0, 60, n_terms)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = np.concatenate([np.sort(rng.choice(n_docs, m, replace=False)) for m in lengths]).astype(
        np.int32
    )
    data = rng.uniform(0.1, 3.0, indices.shape[0]).astype(np.float32)
    doc_rows = np.sort(rng.choice(5 * n_docs, n_docs, replace=False)).astype(np.int64)
    dead = np.zeros(3 * n_docs, dtype=bool)
    dead[rng.choice(3 * n_docs, 400, replace=False)] = True
    for terms in ([], [5], [1, 7, 7, 30], list(range(n_terms))):
        want = np.zeros(n_docs)
        for t in terms:
            np.add.at(
                want, indices[indptr[t] : indptr[t + 1]], data[indptr[t] : indptr[t + 1]].astype(np.float64)
            )
        docs = np.flatnonzero(want)
        keep = ~np.array([r < dead.shape[0] and dead[r] for r in doc_rows[docs]], dtype=bool)
        for _ in range(2):  # the core's accumulator is reused: a second call sees no leftovers
            rows, sums = _core.sum_postings(
                indptr, indices, data, n_docs, np.array(terms, dtype=np.int64), doc_rows, dead.view(np.uint8)
            )
            assert rows.tolist() == doc_rows[docs][keep].tolist()
            np.testing.assert_allclose(sums, want[docs][keep], rtol=1e-12)
    t0 = int(np.flatnonzero(lengths)[0])
    bad_indices = indices.copy()
    bad_indices[indptr[t0]] = n_docs
    one = np.array([t0], dtype=np.int64)
    with pytest.raises(ValueError, match="out of range"):
        _core.sum_postings(indptr, bad_indices, data, n_docs, one, doc_rows, dead.view(np.uint8))
    with pytest.raises(ValueError, match="not in the postings"):
        _core.sum_postings(indptr, indices, data, n_docs, np.array([n_terms]), doc_rows, dead.view(np.uint8))
    with pytest.raises(ValueError, match="one row per document"):
        _core.sum_postings(indptr, indices, data, n_docs, one, doc_rows[:-1], dead.view(np.uint8))
    rows, _ = _core.sum_postings(
        indptr, indices, data, n_docs, np.array([0, 1]), doc_rows, dead.view(np.uint8)
    )
    assert rows.shape[0] > 0  # after a refused call, nothing left over either
