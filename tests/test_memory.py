"""Memory: the API, input contract and the second seed's patterns, each as one call."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow.parquet as pq
import pytest

import poincare_index as pi
from poincare_memory import AsyncMemory, Exponential, HalfLife, Memory, Product, ValidityWindow

NOW = datetime(2026, 6, 1, 12, tzinfo=timezone.utc)

SUPPORT = [
    ("Customer is frustrated about late delivery", 0.5),
    ("Offered 20% discount, customer accepted", 1.0),
    ("Customer asked about refund policy for damaged items", 30.0),
    ("Delivery address changed to the warehouse in Lyon", 60.0),
    ("Customer praised the quick support response", 200.0),
]


def support_memory(**kwargs) -> Memory:
    mem = Memory(decay=kwargs.pop("decay", HalfLife(hours=24)), **kwargs)
    for i, (text, hours) in enumerate(SUPPORT):
        mem.add(
            text,
            id=f"m{i}",
            t=NOW - timedelta(hours=hours),
            metadata={"channel": "chat" if i % 2 else "email"},
        )
    return mem


def test_add_get_getitem_len_iter_contains():
    mem = support_memory()
    assert len(mem) == 5 and "m1" in mem and "zz" not in mem
    r = mem["m1"]
    assert r.text == SUPPORT[1][0] and r.metadata == {"channel": "chat"}
    assert r.t == NOW - timedelta(hours=1) and r.t.tzinfo is not None
    assert mem.get("zz") is None
    with pytest.raises(KeyError, match="zz"):
        mem["zz"]
    assert [r.id for r in mem] == [f"m{i}" for i in range(5)]
    generated = mem.add("no id given")
    assert isinstance(generated, str) and len(generated) == 32 and mem[generated].text == "no id given"


def test_add_refuses_bad_input_and_changes_nothing():
    mem = support_memory()
    with pytest.raises(ValueError, match="already exists"):
        mem.add("dup", id="m0")
    with pytest.raises(TypeError, match="text"):
        mem.add(42)
    with pytest.raises(TypeError, match="id"):
        mem.add("x", id=7)
    with pytest.raises(ValueError, match="clashes"):
        mem.add("x", metadata={"text": "no"})
    with pytest.raises(ValueError, match="t row 0 is missing"):
        mem.add("x", t=np.datetime64("NaT"))
    with pytest.raises(ValueError, match="valid_until"):
        mem.add("x", valid_from=NOW, valid_until=NOW - timedelta(days=1))
    with pytest.raises(TypeError, match="datetime"):
        mem.add("x", t="yesterday")
    with pytest.raises(TypeError, match="metadata 'obj'"):
        mem.add("x", metadata={"obj": object()})
    with pytest.raises(ValueError, match="duplicates"):
        mem.add_many(["a", "b"], ids=["same", "same"])
    with pytest.raises(ValueError, match="outside|ball"):
        mem.add("x", vector=np.full(mem.embedder.dim, 0.5))
    with pytest.raises(ValueError, match="shape"):
        mem.add("x", vector=np.zeros(3))
    with pytest.raises(ValueError, match="mixes value types|does not match"):
        mem.add("x", metadata={"channel": 3})
    assert len(mem) == 5 and len(mem.index.columns) == 5


def test_search_input_contract():
    mem = support_memory()
    with pytest.raises(ValueError, match="mode"):
        mem.search("x", mode="semantic")
    with pytest.raises(TypeError, match="query"):
        mem.search(3)
    with pytest.raises(ValueError, match="k must be >= 1"):
        mem.search("x", k=0)
    with pytest.raises(ValueError, match="window"):
        mem.search("x", window=timedelta(0))
    with pytest.raises(ValueError, match="max_tokens"):
        mem.search("x", max_tokens=0)
    with pytest.raises(ValueError, match="unknown column|nope"):
        mem.search("x", filters={"nope": 1})
    with pytest.raises(TypeError, match="filters"):
        mem.search("x", filters=3)
    assert Memory().search("anything") == []


def test_search_ranks_by_the_fused_score_and_explains_it():
    mem = support_memory(decay=HalfLife(hours=24), depth_bias=0.1)
    results = mem.search("customer delivery", k=5, at_time=NOW, touch=False)
    scores = [r.score for r in results]
    assert scores == sorted(scores, reverse=True) and len(results) == 5
    for r in results:
        e = r.explain()
        assert e.score == pytest.approx(e.distance_term + e.depth_term + e.time_term, abs=1e-6)
        assert e.time_term == pytest.approx(np.log(HalfLife(hours=24).weight(r.t, NOW)), abs=1e-9)
        assert "score" in str(e)
    # independent float64 reference of every score
    vecs = np.stack([mem.index.reconstruct(i) for i in range(5)]).astype(np.float64)
    q = mem.embedder.embed(["customer delivery"])[0].astype(np.float64)
    ts = [NOW - timedelta(hours=h) for _, h in SUPPORT]
    ref = -pi.distance(q, vecs) + 0.1 * pi.depth(vecs) + np.log(HalfLife(hours=24).weight(ts, NOW))
    assert [r.id for r in results] == [f"m{i}" for i in np.argsort(-ref)]
    np.testing.assert_allclose(scores, np.sort(ref)[::-1], atol=1e-9)


def test_touch_counts_accesses_and_can_be_disabled():
    mem = support_memory()
    mem.search("refund", k=2, at_time=NOW, touch=False)
    assert all(r.access_count == 0 for r in mem)
    hits = mem.search("refund", k=2, at_time=NOW)
    assert [r.access_count for r in hits] == [1, 1]
    assert mem[hits[0].id].access_count == 1


def test_filters_dict_and_callable():
    mem = support_memory()
    got = mem.search("customer", k=5, at_time=NOW, filters={"channel": "chat"}, touch=False)
    assert {r.id for r in got} == {"m1", "m3"}
    got = mem.search("customer", k=5, at_time=NOW, filters={"id": {"$in": ["m0", "m4"]}}, touch=False)
    assert {r.id for r in got} == {"m0", "m4"}
    got = mem.search(
        "customer", k=5, at_time=NOW, filters={"t": {"$gte": NOW - timedelta(hours=2)}}, touch=False
    )
    assert {r.id for r in got} == {"m0", "m1"}
    # a callable runs after ranking; more are fetched until k pass
    got = mem.search("customer", k=2, at_time=NOW, filters=lambda r: "Lyon" in r.text or "praised" in r.text)
    assert {r.id for r in got} == {"m3", "m4"}
    assert [r.id for r in mem.list({"channel": "email"})] == ["m0", "m2", "m4"]


def test_sliding_window_is_one_argument():
    mem = support_memory()
    got = mem.search("customer", k=5, at_time=NOW, window=timedelta(hours=24), touch=False)
    assert {r.id for r in got} == {"m0", "m1"}
    later = mem.search("customer", k=5, at_time=NOW + timedelta(days=30), window=timedelta(hours=24))
    assert later == []


def test_sessions_scope_search_and_end_deletes_or_archives(tmp_path):
    mem = support_memory()
    with mem.session("s1") as s:
        s.add("Customer is frustrated about late delivery again", t=NOW)
        s.add("Offered free shipping on the next order", t=NOW)
    assert len(mem) == 7  # leaving the block deleted nothing
    s = mem.session("s1")
    got = s.search("customer delivery", k=10, at_time=NOW)
    assert len(got) == 2 and all(r.metadata["session"] == "s1" for r in got)
    assert len(mem.search("customer delivery", k=10, at_time=NOW, session="s1")) == 2
    other = mem.session()
    other.add("unrelated session note", t=NOW)
    assert other.id != "s1" and len(other.list()) == 1
    assert s.end(archive=tmp_path / "s1.parquet") == 2
    archived = pq.read_table(tmp_path / "s1.parquet")
    assert sorted(archived.column("text").to_pylist())[0].startswith("Customer is frustrated")
    assert len(mem) == 6 and s.search("customer", at_time=NOW) == []
    assert other.end() == 1 and len(mem) == 5


def test_recency_decay_pattern_exponential():
    mem = support_memory(decay=Exponential(rate=0.1, per=timedelta(days=1)))
    r = mem.search("refund policy", k=1, at_time=NOW, touch=False)[0]
    assert r.id == "m2" and r.time_weight == pytest.approx(np.exp(-0.1 * 30 / 24))


def test_forget_with_archive_then_delete(tmp_path):
    mem = support_memory()
    archive = tmp_path / "old.parquet"
    n = mem.forget(timedelta(hours=48), at_time=NOW, archive=archive)
    assert n == 2 and sorted(m.id for m in mem) == ["m0", "m1", "m2"]
    table = pq.read_table(archive)
    assert sorted(table.column("id").to_pylist()) == ["m3", "m4"]
    assert set(table.column_names) >= {
        "id",
        "text",
        "t",
        "valid_from",
        "valid_until",
        "access_count",
        "channel",
    }
    # an archive that cannot be written deletes nothing
    with pytest.raises(FileExistsError):
        mem.forget(timedelta(hours=2), at_time=NOW, archive=archive)
    with pytest.raises(FileNotFoundError):
        mem.forget(timedelta(hours=2), at_time=NOW, archive=tmp_path / "missing" / "x.parquet")
    assert len(mem) == 3
    assert mem.forget(timedelta(hours=2), at_time=NOW, filters={"channel": "email"}) == 1


def test_hybrid_and_keyword_modes():
    mem = support_memory(decay=None)
    kw = mem.search("refund policy", k=3, mode="keyword", at_time=NOW, touch=False)
    assert kw[0].id == "m2" and kw[0].explain().mode == "keyword"
    assert all(r.relevance > -np.inf for r in kw)
    hy = mem.search("refund damaged", k=3, mode="hybrid", at_time=NOW, touch=False)
    assert hy[0].id == "m2" and hy[0].vector_rank == 1 and hy[0].keyword_rank == 1
    assert hy[0].explain().relevance_term == pytest.approx(0.0)  # best on both sides: fused 1
    # keyword search sees new and deleted memories
    mem.add("refund refund refund", id="new", t=NOW)
    assert mem.search("refund", k=1, mode="keyword", at_time=NOW)[0].id == "new"
    mem.delete("new")
    assert mem.search("refund", k=1, mode="keyword", at_time=NOW)[0].id == "m2"


def test_hybrid_fuses_scaled_scores_by_the_keyword_weight():
    mem = support_memory(decay=None)
    q = "refund damaged"
    n = len(mem)  # every memory is a candidate on both sides (candidates=50 > n)
    vec = mem.search(q, k=n, touch=False, at_time=NOW)
    kw = mem.search(q, k=n, mode="keyword", touch=False, at_time=NOW)
    bm25 = {r.id: float(np.exp(r.relevance)) for r in kw}
    rel = {r.id: -r.distance + mem._rows.config.depth_bias * r.depth for r in vec}
    lo, hi = min(rel.values()), max(rel.values())
    for w in (0.0, 0.3, 0.8, 1.0):
        hy = mem.search(q, k=6, mode="hybrid", touch=False, at_time=NOW, keyword_weight=w)
        want = {
            i: w * bm25.get(i, 0.0) / max(bm25.values())
            + (1 - w) * ((rel[i] - lo) / (hi - lo) if i in rel else 0.0)
            for i in set(rel) | set(bm25)
        }
        for r in hy:  # float64 reference of the fused score, by its definition
            assert np.exp(r.relevance) == pytest.approx(max(want[r.id], 1e-12), rel=1e-6)
        assert [r.id for r in hy] == sorted(want, key=lambda i: (-want[i], mem._rows.row_of[i]))[: len(hy)]
    assert mem.search(q, mode="hybrid", touch=False)[0].id == "m2"  # the embedder's own weight
    with pytest.raises(ValueError, match="keyword_weight"):
        mem.search(q, mode="hybrid", keyword_weight=1.5)
    with pytest.raises(TypeError, match="keyword_weight"):
        mem.search(q, mode="hybrid", keyword_weight="0.5")


def test_hybrid_scores_every_candidate_on_both_sides():
    # Lists shorter than the store: a keyword match past the vector side's cut carries its real
    # vector relevance (and a vector candidate its BM25), not 0 for the side it missed.
    rng = np.random.default_rng(7)
    words = ["refund", "parcel", "damaged", "invoice", "courier", "late", "box", "label", "charge"]
    mem = Memory(decay=None)
    for i in range(60):
        mem.add(" ".join(rng.choice(words, size=4)), id=f"d{i}", t=NOW)
    q, c, w = "refund damaged courier", 4, 0.6
    n = len(mem)
    vec = mem.search(q, k=n, touch=False, at_time=NOW, ef=256)
    kw = mem.search(q, k=n, mode="keyword", touch=False, at_time=NOW)
    bm25 = {r.id: float(np.exp(r.relevance)) for r in kw}
    rel = {r.id: -r.distance + mem._rows.config.depth_bias * r.depth for r in vec}
    union = {r.id for r in vec[:c]} | {r.id for r in kw[:c]}
    assert len(union) > c  # the two lists differ, so some candidate misses a side
    lo, hi = min(rel[i] for i in union), max(rel[i] for i in union)
    top = max(bm25.get(i, 0.0) for i in union)
    want = {i: w * bm25.get(i, 0.0) / top + (1 - w) * (rel[i] - lo) / (hi - lo) for i in union}
    # k = candidates: each side's list is ``candidates`` long, the best k of the union come back
    hy = mem.search(q, k=c, mode="hybrid", touch=False, at_time=NOW, keyword_weight=w, candidates=c)
    for r in hy:  # float64 reference of the fused score, by its definition
        assert np.exp(r.relevance) == pytest.approx(max(want[r.id], 1e-12), rel=1e-6, abs=1e-9)
    assert [r.id for r in hy] == sorted(want, key=lambda i: (-want[i], mem._rows.row_of[i]))[:c]
    # ranks on each side: among all keyword matches (BM25, ties by row), among the vector list
    keyword_rank = {r.id: i + 1 for i, r in enumerate(kw)}
    wide = mem.search(q, k=3 * c, mode="hybrid", touch=False, at_time=NOW, keyword_weight=0.0, candidates=c)
    for found in (hy, wide):
        depth = len(found)  # each side's list is max(candidates, k) long
        vector_rank = {r.id: i + 1 for i, r in enumerate(vec[:depth])}
        for r in found:
            assert r.keyword_rank == keyword_rank.get(r.id) and r.vector_rank == vector_rank.get(r.id)
    assert any(r.keyword_rank is not None and r.keyword_rank > 3 * c for r in wide)  # counted, not listed


def test_max_tokens_and_stats():
    mem = support_memory()
    full = mem.search("customer", k=5, at_time=NOW)
    counts = [pi_tokens(r.text) for r in full]
    budget = counts[0] + counts[1]
    cut = mem.search("customer", k=5, at_time=NOW, max_tokens=budget)
    assert [r.id for r in cut] == [r.id for r in full[:2]]
    st = mem.stats()
    assert st.memories == 5 and st.retrievals == 2
    assert st.tokens_retrieved == sum(counts) + budget
    assert st.tokens_per_retrieval == pytest.approx((sum(counts) + budget) / 2)
    custom = Memory(token_counter=lambda s: len(s.split()))
    custom.add("one two three")
    custom.search("one")
    assert custom.stats().tokens_retrieved == 3


def pi_tokens(text: str) -> int:
    from poincare_memory import approx_token_count

    return approx_token_count(text)


def test_approx_token_count():
    from poincare_memory import approx_token_count

    assert approx_token_count("") == 0
    assert approx_token_count("a cat") == 2
    assert approx_token_count("internationalization!") == 6  # ceil(20 / 4) + "!"


def test_update_invalidate_delete_to_arrow():
    mem = support_memory(decay=Product(HalfLife(hours=24), ValidityWindow()))
    assert mem.search("refund", k=1, at_time=NOW, filters={"id": "m2"})[0].access_count == 1
    mem.update(
        "m2", "Customer asked about refund policy for broken items", metadata={"channel": None, "p": 1}
    )
    r = mem["m2"]
    assert r.text.endswith("broken items") and r.metadata == {"p": 1} and r.access_count == 1
    assert r.t == NOW - timedelta(hours=30)
    mem.invalidate("m2", at=NOW - timedelta(hours=1))
    assert mem["m2"].valid_until == NOW - timedelta(hours=1)
    hit = mem.search("refund broken", k=1, at_time=NOW, touch=False, filters={"id": "m2"})[0]
    assert hit.time_weight == pytest.approx(1e-6 * 0.5 ** (30 / 24))
    assert mem.search("refund broken", k=1, at_time=NOW - timedelta(hours=2), touch=False)[0].id == "m2"
    with pytest.raises(ValueError, match="valid_from"):
        mem.add("fact", id="f", valid_from=NOW)
        mem.invalidate("f", at=NOW - timedelta(days=1))
    with pytest.raises(KeyError):
        mem.update("nope", "x")
    with pytest.raises(KeyError):
        mem.delete("nope")
    assert mem.delete(filters={"channel": "chat"}) == 2
    assert mem.delete(filters=lambda r: r.id == "m0") == 1
    table = mem.to_arrow()
    assert table.column_names[:6] == ["id", "text", "t", "valid_from", "valid_until", "access_count"]
    assert sorted(table.column("id").to_pylist()) == ["f", "m2", "m4"]


def test_to_arrow_with_vectors_and_the_change_token():
    mem = support_memory(decay=HalfLife(hours=24))
    token = mem.change_token
    table = mem.to_arrow(vectors=True)
    ids = table.column("id").to_pylist()
    assert table.column_names[-1] == "vector" and len(ids) == len(mem)
    got = np.asarray(table.column("vector").combine_chunks().flatten(), dtype=np.float32)
    np.testing.assert_array_equal(got.reshape(len(ids), -1), mem.vectors(ids))
    assert mem.to_arrow().column_names == table.column_names[:-1]
    with pytest.raises(TypeError, match="vectors"):
        mem.to_arrow(vectors="yes")
    assert mem.has_metadata("channel") and not mem.has_metadata("nope")
    with pytest.raises(TypeError, match="metadata key is a str"):
        mem.has_metadata(3)
    assert mem.change_token == token  # reads change nothing
    mem.search("refund", k=1, at_time=NOW)  # counts an access
    touched = mem.change_token
    assert touched != token
    mem.delete(ids[0])
    assert mem.change_token not in (token, touched)


def test_vectors_can_be_given_directly():
    mem = Memory(decay=None)
    rng = np.random.default_rng(1)
    pts = pi.project(rng.normal(size=(20, mem.embedder.dim)) * 0.05)
    for i, p in enumerate(pts):
        mem.add(f"p{i}", id=f"p{i}", vector=p)
    got = mem.search(vector=pts[7], k=1, touch=False)
    assert got[0].id == "p7" and got[0].distance == pytest.approx(0.0, abs=1e-3)


def test_concurrent_adds_and_searches_from_threads():
    mem = Memory(decay=HalfLife(hours=24))
    errors = []

    def writer(w):
        try:
            for i in range(60):
                mem.add(f"writer {w} note {i} about topic {i % 7}", id=f"w{w}-{i}", t=NOW)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader():
        try:
            for i in range(60):
                hits = mem.search(f"topic {i % 7}", k=3, at_time=NOW)
                assert len(hits) == 3
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    mem.add_many([f"seed note {i} about topic {i}" for i in range(3)], t=NOW)
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(mem) == 183
    assert sum(r.access_count for r in mem) == 3 * 60 * 3  # every returned hit counted once


def test_async_memory():
    async def main():
        amem = AsyncMemory(decay=HalfLife(hours=24))
        ids = await amem.add_many(["alpha note", "beta note"], t=NOW)
        await amem.add("gamma", id="g", t=NOW)
        hits = await amem.search("alpha", k=1, at_time=NOW)
        assert hits[0].id == ids[0] and len(amem) == 3
        assert (await amem.get("g")).text == "gamma"
        assert await amem.delete("g") == 1
        await amem.close()

    asyncio.run(main())


def test_a_bare_callable_is_an_embedder():
    rng = np.random.default_rng(4)
    vocab = {}

    def embed(texts):
        return np.stack([vocab.setdefault(t, rng.normal(size=12)) for t in texts])

    mem = Memory(embedder=embed)
    assert mem.embedder.dim == 12 and mem.embedder.name.startswith("callable:")
    mem.add("alpha", id="a")
    mem.add("beta", id="b")
    assert mem.search("alpha", k=1)[0].id == "a"
    with pytest.raises(TypeError, match="embedder"):
        Memory(embedder=3)


def test_reviewed_edge_cases():
    mem = support_memory()
    # a callable filter that fewer than k memories pass ends when every memory was ranked
    assert [r.id for r in mem.search("customer", k=5, at_time=NOW, filters=lambda r: r.id == "m3")] == ["m3"]
    for mode in ("keyword", "hybrid"):
        mem.search("customer", k=5, mode=mode, at_time=NOW, filters=lambda r: False)
    # text that is not valid Unicode is refused before anything is stored
    with pytest.raises(ValueError, match="Unicode"):
        mem.add("bad \ud800 text")
    with pytest.raises(ValueError, match="int64"):
        mem.add("big", metadata={"n": 2**70})
    mem.add("small", id="small", metadata={"n": 1})
    with pytest.raises(ValueError, match="range"):
        mem.search("x", filters={"n": 10**30})
    with pytest.raises(ValueError, match="limit"):
        mem.list(limit=-1)
    with pytest.raises(ValueError, match="ef"):
        mem.search("x", ef=0)
    with pytest.raises(TypeError, match="numeric"):
        mem.search(vector=["a", "b"])
    # sessions work before any memory was added in one
    fresh = Memory()
    s = fresh.session("s1")
    assert s.search("anything") == [] and s.list() == [] and s.end() == 0
    assert fresh.search("anything", session="s1") == []


def test_filters_may_read_the_memory_but_not_write_it():
    mem = support_memory()
    seen = []

    def reads(r):
        seen.append(mem.get(r.id).text)  # a nested read: no deadlock, even with a writer waiting
        return True

    writer = threading.Thread(target=lambda: mem.add("concurrent", id="c", t=NOW))
    writer.start()
    assert len(mem.search("customer", k=3, at_time=NOW, filters=reads)) == 3
    writer.join()
    assert seen

    def writes(r):
        mem.add("inside a search", t=NOW)
        return True

    with pytest.raises(RuntimeError, match="while this thread is reading"):
        mem.search("customer", k=3, at_time=NOW, filters=writes)


def test_async_memory_mirrors_every_public_method_of_memory_and_session():
    import inspect

    from poincare_index.memory.aio import AsyncSession
    from poincare_index.memory.session import Session

    for sync, aio in ((Memory, AsyncMemory), (Session, AsyncSession)):
        for name in dir(sync):
            if name.startswith("_"):
                continue
            attr = inspect.getattr_static(sync, name)
            assert hasattr(aio, name), f"{aio.__name__} lacks {name}"
            if inspect.isfunction(attr) and name != "session":
                assert inspect.iscoroutinefunction(getattr(aio, name)), name
                assert inspect.signature(getattr(aio, name)) == inspect.signature(attr), name


def test_async_sessions_and_the_rest_of_the_api():
    async def main(path):
        async with AsyncMemory(decay=HalfLife(hours=24), path=path) as amem:
            async with amem.session("chat-1") as s:
                await s.add("the user prefers tea", t=NOW)
                await s.add_many(["the user lives in oslo", "the user has a cat"], t=NOW)
                assert [r.text for r in await s.search("tea", k=1, at_time=NOW)] == ["the user prefers tea"]
                assert len(await s.list()) == 3
            await amem.add("outside any session", id="x", t=NOW)
            await amem.update("x", "outside any session, edited")
            await amem.invalidate("x", at=NOW + timedelta(hours=1))
            assert (await amem.stats()).memories == 4 and "x" in amem
            assert (await amem.to_arrow()).num_rows == 4 and amem.path is not None
            assert await amem.session("chat-1").end() == 3
            await amem.checkpoint()
            assert amem.namespaces(path) == ["default"]

    import tempfile

    with tempfile.TemporaryDirectory() as path:
        asyncio.run(main(path))


def test_vectors_returns_the_stored_points_in_the_order_asked():
    from poincare_memory import Memory

    mem = Memory(decay=None)
    mem.add_many(["alpha beta", "gamma delta", "epsilon"], ["a", "b", "c"])
    want = mem.embedder.embed(["epsilon", "alpha beta"])
    np.testing.assert_array_equal(mem.vectors(["c", "a"]), want)
    mem.update("c", "zeta eta")
    np.testing.assert_array_equal(mem.vectors(["c"]), mem.embedder.embed(["zeta eta"]))
    assert mem.vectors([]).shape == (0, mem.embedder.dim)
    with pytest.raises(KeyError, match="'zz'"):
        mem.vectors(["a", "zz"])
    with pytest.raises(TypeError):
        mem.vectors("a")
