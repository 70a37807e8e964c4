"""What Memory.search makes of short and odd query texts and stores: one-letter words, texts and
queries without any keyword term (emoji, punctuation, stop words), empty and blank queries."""

from __future__ import annotations

import pytest

from poincare_memory import Memory

MODES = ["vector", "keyword", "hybrid"]


def _ids(results):
    return [r.id for r in results]


@pytest.fixture
def mem():
    m = Memory(decay=None)
    m.add("I like C and R", id="langs")
    m.add("x marks the spot", id="x")
    m.add("we met at 7 in room B", id="seven")
    m.add("a long note about gardening and tomatoes", id="garden")
    yield m
    m.close()


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_store_whose_texts_have_no_keyword_term(mode):
    m = Memory(decay=None)
    m.add("👍", id="thumbs")
    m.add("!!! ...", id="bang")
    # bm25s could not index a corpus without a token ("max() arg is an empty sequence").
    hits = m.search("x", mode=mode, touch=False)
    if mode == "keyword":
        assert hits == []
    else:  # nothing on the keyword side: the vector side's ranking
        assert sorted(_ids(hits)) == ["bang", "thumbs"]
        assert all(h.keyword_rank is None for h in hits)
    m.add("x marks the spot", id="x")  # into the keyword index's delta
    assert _ids(m.search("x", mode="keyword", touch=False)) == ["x"]
    assert _ids(m.search("x", mode="hybrid", touch=False))[0] == "x"
    m.close()


@pytest.mark.parametrize(("query", "want"), [("C", "langs"), ("r", "langs"), ("x", "x"), ("7", "seven")])
def test_one_letter_words_and_digits_match(mem, query, want):
    assert _ids(mem.search(query, mode="keyword", touch=False)) == [want]
    hybrid = mem.search(query, mode="hybrid", touch=False)
    assert hybrid[0].id == want and hybrid[0].keyword_rank == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", ["", "   ", "\n\t", "\u3000"])
def test_an_empty_or_blank_query_is_refused(mem, mode, query):
    with pytest.raises(ValueError, match="query is empty"):
        mem.search(query, mode=mode)
    with pytest.raises(ValueError, match="query is empty"):
        Memory().search(query, mode=mode)  # refused before looking at the store


@pytest.mark.parametrize("query", ["!!!", "the of a", "👍", "??? 🎉"])
def test_a_query_without_keyword_terms(mem, query):
    # keyword: no term, no match; hybrid: the vector side alone (without a time term its order is
    # the vector mode's).
    assert mem.search(query, mode="keyword", touch=False) == []
    hybrid = mem.search(query, k=4, mode="hybrid", touch=False)
    assert _ids(hybrid) == _ids(mem.search(query, k=4, mode="vector", touch=False))
    assert all(h.keyword_rank is None for h in hybrid) and len(hybrid) == 4
