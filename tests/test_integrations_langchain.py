"""The LangChain adapter: LangChain's own standard vector-store suite (sync and async, in memory
and persistent), then filters, MMR, files and the time-aware retriever against references."""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("langchain_core")
    pytest.importorskip("langchain_tests")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import DeterministicFakeEmbedding  # noqa: E402
from langchain_tests.integration_tests.vectorstores import VectorStoreIntegrationTests  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index.integrations.langchain import (  # noqa: E402
    MemoryRetriever,
    PoincareEmbeddings,
    PoincareVectorStore,
)


class TestStandardSuiteInMemory(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self):
        store = PoincareVectorStore(embedding=self.get_embeddings())
        yield store
        store.close()


class TestStandardSuitePersistent(VectorStoreIntegrationTests):
    @pytest.fixture()
    def vectorstore(self, tmp_path):
        store = PoincareVectorStore(embedding=self.get_embeddings(), path=tmp_path / "store")
        yield store
        store.close()


def _store(**kw):
    return PoincareVectorStore(DeterministicFakeEmbedding(size=16), **kw)


TEXTS = [f"note {i} about {topic}" for i, topic in enumerate(["cats", "dogs", "birds", "fish"] * 10)]
METAS = [{"page": i, "topic": t.split()[-1], "tags": ["a", str(i % 3)], "draft": i % 2 == 0}
         for i, t in enumerate(TEXTS)]  # fmt: skip


def test_scores_are_poincare_distances_and_filters_run_inside_the_search():
    store = _store()
    ids = store.add_texts(TEXTS, METAS)
    emb = DeterministicFakeEmbedding(size=16)
    q = "note 5 about dogs"
    got = store.similarity_search_with_score(q, k=40)
    ball = pi.expmap0(_unit(np.asarray(emb.embed_documents(TEXTS))))
    qv = pi.expmap0(_unit(np.asarray([emb.embed_query(q)])))[0]
    ref = pi.distance(qv[None, :], ball)
    order = np.argsort(ref, kind="stable")
    assert [d.id for d, _ in got] == [ids[i] for i in order]
    np.testing.assert_allclose([s for _, s in got], ref[order], rtol=1e-5, atol=1e-6)
    flt = {"$and": [{"topic": "dogs"}, {"page": {"$gte": 10}}]}
    hits = store.similarity_search(q, k=40, filter=flt)
    want = [ids[i] for i in order if METAS[i]["topic"] == "dogs" and METAS[i]["page"] >= 10]
    assert [d.id for d in hits] == want
    assert [d.id for d in store.similarity_search(q, k=40, filter=lambda d: d.metadata["draft"])] == [
        ids[i] for i in order if METAS[i]["draft"]
    ]
    assert hits[0].metadata == METAS[int(hits[0].id == ids[0]) and 0 or ids.index(hits[0].id)]
    rel = store.similarity_search_with_relevance_scores(q, k=3)
    np.testing.assert_allclose([s for _, s in rel], np.exp(-ref[order][:3]), rtol=1e-5)


def _unit(v):
    return v / np.linalg.norm(v, axis=1, keepdims=True) * 1.0  # CallableEmbedder(normalize=True)


def test_mmr_matches_a_float64_reference():
    store = _store()
    ids = store.add_texts(TEXTS, METAS)
    emb = DeterministicFakeEmbedding(size=16)
    q = "note 7 about fish"
    got = store.max_marginal_relevance_search(q, k=5, fetch_k=15, lambda_mult=0.3)
    ball = pi.expmap0(_unit(np.asarray(emb.embed_documents(TEXTS))))
    qv = pi.expmap0(_unit(np.asarray([emb.embed_query(q)])))[0]
    cand = np.argsort(pi.distance(qv[None, :], ball), kind="stable")[:15]
    sim_q = np.exp(-pi.distance(qv[None, :], ball[cand]))
    sim = np.exp(-pi.distance(ball[cand][:, None, :], ball[cand][None, :, :]))
    picked = [int(np.argmax(sim_q))]
    while len(picked) < 5:
        score = 0.3 * sim_q - 0.7 * sim[:, picked].max(axis=1)
        score[picked] = -np.inf
        picked.append(int(np.argmax(score)))
    assert [d.id for d in got] == [ids[cand[i]] for i in picked]
    with pytest.raises(ValueError, match="lambda_mult"):
        store.max_marginal_relevance_search(q, k=2, lambda_mult=1.5)


def test_upsert_replaces_text_metadata_and_point():
    store = _store()
    store.add_texts(["alpha", "beta"], [{"a": 1, "b": "x"}, {"a": 2}], ids=["1", "2"])
    store.add_texts(["gamma"], [{"c": [1, 2]}], ids=["1"])
    [doc] = store.get_by_ids(["1"])
    assert doc.page_content == "gamma" and doc.metadata == {"c": [1, 2]}
    assert store.similarity_search("gamma", k=1)[0].id == "1"
    assert store.similarity_search("x", k=2, filter={"b": "x"}) == []  # the old key is gone
    assert len(store.memory) == 2


def test_bad_input_is_refused_before_anything_is_written():
    store = _store()
    with pytest.raises(ValueError, match="metadatas has 1 entries for 2 texts"):
        store.add_texts(["a", "b"], [{}])
    with pytest.raises(TypeError, match="text 1: metadata 'blob' cannot be stored"):
        store.add_texts(["a", "b"], [{}, {"blob": b"bytes"}])
    with pytest.raises(TypeError, match="id must be a str"):
        store.add_texts(["a"], ids=[3])
    assert store.memory is None or len(store.memory) == 0
    with pytest.raises(TypeError, match="Embeddings"):
        PoincareVectorStore(embedding=lambda t: t)


def test_save_local_and_load_local_round_trip(tmp_path):
    store = _store()
    ids = store.add_texts(TEXTS, METAS)
    before = store.similarity_search_with_score("note 3 about birds", k=5, filter={"topic": "birds"})
    store.save_local(tmp_path / "saved")
    store.save_local(tmp_path / "saved")  # again: replaces the first copy, as FAISS's store does
    loaded = PoincareVectorStore.load_local(tmp_path / "saved", DeterministicFakeEmbedding(size=16))
    after = loaded.similarity_search_with_score("note 3 about birds", k=5, filter={"topic": "birds"})
    assert [(d.id, d.metadata) for d, _ in after] == [(d.id, d.metadata) for d, _ in before]
    np.testing.assert_allclose([s for _, s in after], [s for _, s in before], rtol=1e-6)
    assert sorted(d.id for d in loaded.get_by_ids(ids)) == sorted(ids)
    loaded.close()


def test_save_local_replaces_an_earlier_save_once_complete_and_keeps_other_files(tmp_path):
    from poincare_memory import StoreLockedError

    store = _store()
    store.add_texts(["first"], ids=["a"])
    store.save_local(tmp_path / "saved")
    (tmp_path / "saved" / "notes.txt").write_text("mine")
    store.delete(["a"])
    store.add_texts(["second"], ids=["b"])
    store.save_local(tmp_path / "saved")
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == ["default", "notes.txt"]
    loaded = PoincareVectorStore.load_local(tmp_path / "saved", DeterministicFakeEmbedding(size=16))
    assert [d.id for d in loaded.get_by_ids(["a", "b"])] == ["b"]
    loaded.save_local(tmp_path / "saved")  # its own path: a checkpoint
    with pytest.raises(StoreLockedError):  # open there for writing: left as it is
        store.save_local(tmp_path / "saved")
    assert [d.id for d in loaded.get_by_ids(["a", "b"])] == ["b"]
    loaded.close()
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == ["default", "notes.txt"]


def test_load_local_of_a_folder_without_a_store_raises_naming_it(tmp_path):
    emb = DeterministicFakeEmbedding(size=16)
    missing = tmp_path / "never-saved"
    with pytest.raises(
        FileNotFoundError, match=re.escape(f"no store at {missing}: the folder does not exist")
    ):
        PoincareVectorStore.load_local(missing, emb)
    assert not missing.exists()  # nothing was created there
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty: it holds none in namespace 'default'"):
        PoincareVectorStore.load_local(tmp_path / "empty", emb)
    assert list((tmp_path / "empty").iterdir()) == []
    store = _store()
    store.add_texts(["first"], ids=["a"])
    store.save_local(tmp_path / "saved")
    with pytest.raises(FileNotFoundError, match="namespace 'other'"):
        PoincareVectorStore.load_local(tmp_path / "saved", emb, namespace="other")
    loaded = PoincareVectorStore.load_local(tmp_path / "saved", emb)
    assert [d.id for d in loaded.get_by_ids(["a"])] == ["a"]
    loaded.close()


def test_our_embedders_through_the_langchain_interface():
    emb = PoincareEmbeddings()
    vecs = np.asarray(emb.embed_documents(["tokyo sushi", "berlin bread"]))
    assert vecs.shape == (2, emb.embedder.dim) and np.all(np.linalg.norm(vecs, axis=1) < 1)
    store = PoincareVectorStore(emb)
    store.add_texts(["tokyo sushi", "berlin bread", "paris cheese"])
    assert store.similarity_search("sushi in tokyo", k=1)[0].page_content == "tokyo sushi"
    # its points are used as they are (already in the ball)
    [(_, d)] = store.similarity_search_with_score("tokyo sushi", k=1)
    assert d == pytest.approx(0.0, abs=1e-5)


def test_memory_retriever_ranks_recency_in_one_call_as_time_weighted_retriever_does():
    """LangChain's TimeWeightedVectorStoreRetriever re-ranks by similarity + (1 - decay)^hours;
    the MemoryRetriever's one search ranks by distance + log time weight inside the index. On the
    same texts and times both put the recent matching memory first."""
    classic = pytest.importorskip("langchain_classic.retrievers")

    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    texts = ["the deploy failed on friday", "the deploy failed on monday", "lunch was pasta"]
    ages = [timedelta(days=30), timedelta(hours=2), timedelta(hours=1)]
    emb = PoincareEmbeddings()
    tw = classic.TimeWeightedVectorStoreRetriever(
        vectorstore=PoincareVectorStore(emb), decay_rate=0.01, k=2, other_score_keys=[]
    )
    tw.add_documents(
        [Document(page_content=t, metadata={"last_accessed_at": now - a, "created_at": now - a})
         for t, a in zip(texts, ages)],
        current_time=now,
    )  # fmt: skip
    mem = pi.Memory(decay=pi.HalfLife(hours=24 * 3), embedder=emb.embedder)
    for i, (t, a) in enumerate(zip(texts, ages)):
        mem.add(t, id=f"m{i}", t=now - a)
    ours = MemoryRetriever(memory=mem, k=2, at_time=now)
    import unittest.mock as mock

    with mock.patch("langchain_classic.retrievers.time_weighted_retriever.datetime") as dt:
        dt.datetime.now.return_value = now
        theirs = tw.invoke("why did the deploy fail")
    got = ours.invoke("why did the deploy fail")
    assert theirs[0].page_content == "the deploy failed on monday" == got[0].page_content
    assert got[0].metadata["id"] == "m1" and got[0].metadata["access_count"] == 1  # counted
    # Without the time term the order is by text alone: the old but closer memory comes first.
    plain = MemoryRetriever(memory=mem, k=3, at_time=now, time_coef=0.0, touch=False)
    assert plain.invoke("deploy failed friday")[0].page_content == "the deploy failed on friday"
    recent = MemoryRetriever(memory=mem, k=3, at_time=now, touch=False)
    assert recent.invoke("deploy failed friday")[0].page_content == "the deploy failed on monday"


def test_metadata_kinds_missing_keys_and_delete_arguments():
    store = _store()
    store.add_texts(["a", "b"], [{"page": 1}, {"page": 1.5}], ids=["A", "B"])  # numbers mix
    assert sorted(d.id for d in store.similarity_search("a", k=5, filter={"page": {"$gte": 1}})) == ["A", "B"]
    assert store.get_by_ids(["A"])[0].metadata == {"page": 1}  # the int comes back an int
    with pytest.raises(ValueError, match="text 1: metadata 'page' is a str"):
        store.add_texts(["c", "d"], [{"page": 4}, {"page": "four"}], ids=["C", "A"])
    assert "C" not in store.memory and store.get_by_ids(["A"])[0].page_content == "a"  # nothing written
    # A key no document has behaves as a null value, before and after one has it.
    filters = [{"author": None}, {"author": {"$ne": None}}, {"author": {"$in": [None]}},
               {"author": {"$nin": [None]}}, {"author": "x"}, {"$not": {"author": "x"}}]  # fmt: skip
    before = [sorted(d.id for d in store.similarity_search("a", k=9, filter=f)) for f in filters]
    store.add_texts(["e"], [{"author": "x"}], ids=["E"])
    after = [sorted(i for i in (d.id for d in store.similarity_search("a", k=9, filter=f)) if i != "E")
             for f in filters]  # fmt: skip
    assert before == after == [["A", "B"], [], ["A", "B"], [], [], ["A", "B"]]
    with pytest.raises(TypeError, match="list of str"):
        store.delete("AB")
    assert store.delete(["A", "nope"]) is True and "A" not in store.memory
