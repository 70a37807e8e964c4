"""The LlamaIndex adapter end to end through VectorStoreIndex (llama-index-core's offline
MockEmbedding and a deterministic one), every MetadataFilter operator mapped or refused, deletes
by ref_doc_id, query modes and persistence. (llama-index-core ships no behaviour tests of its own
for vector stores, so these stand in for them.)"""

from __future__ import annotations

import os

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("llama_index.core")

from llama_index.core import Document, StorageContext, VectorStoreIndex  # noqa: E402
from llama_index.core.embeddings import MockEmbedding  # noqa: E402
from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.core.vector_stores.types import (  # noqa: E402
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
)

import poincare_index as pi  # noqa: E402
from poincare_index.integrations.llama_index import PoincareVectorStore  # noqa: E402

DIM = 8
F, MF, Q, MODE = FilterOperator, MetadataFilter, VectorStoreQuery, VectorStoreQueryMode


def _emb(i: int) -> list[float]:
    return np.random.default_rng(i).normal(size=DIM).tolist()


def _nodes(n=30):
    return [
        TextNode(
            id_=f"n{i}",
            text=f"node {i} about {['cats', 'dogs', 'birds'][i % 3]}",
            embedding=_emb(i),
            metadata={"page": i, "topic": ["cats", "dogs", "birds"][i % 3], "tags": ["x", str(i % 2)]},
        )  # fmt: skip
        for i in range(n)
    ]


def _ball(v):
    v = np.asarray(v, dtype=np.float64)
    v = v / np.linalg.norm(v, axis=-1, keepdims=True)
    return pi.expmap0(v)


def test_vector_store_index_end_to_end_with_mock_embedding(tmp_path):
    store = PoincareVectorStore()
    ctx = StorageContext.from_defaults(vector_store=store)
    docs = [Document(text=f"document {i} text", id_=f"doc{i}", metadata={"n": i}) for i in range(5)]
    mock = MockEmbedding(embed_dim=DIM)
    index = VectorStoreIndex.from_documents(docs, storage_context=ctx, embed_model=mock)
    assert store.dim == DIM and len(store.client) == 5
    found = index.as_retriever(similarity_top_k=3).retrieve("document text")
    assert len(found) == 3 and all(r.node.text.startswith("document") for r in found)
    index.delete_ref_doc("doc2")
    assert len(store.client) == 4
    found = index.as_retriever(similarity_top_k=10).retrieve("anything")
    assert sorted(r.node.ref_doc_id for r in found) == ["doc0", "doc1", "doc3", "doc4"]
    ctx.persist(persist_dir=str(tmp_path / "storage"))
    ctx.persist(persist_dir=str(tmp_path / "storage"))  # again: the older copy is replaced
    saved = tmp_path / "storage" / "default__vector_store.json"
    again = PoincareVectorStore.from_persist_path(str(saved))
    assert len(again.client) == 4
    back = {n.node_id: n for n in again.get_nodes()}
    orig = {n.node_id: n for n in store.get_nodes()}
    assert back.keys() == orig.keys()
    for key in back:
        assert back[key].text == orig[key].text and back[key].metadata == orig[key].metadata
        assert back[key].ref_doc_id == orig[key].ref_doc_id


def test_query_ranks_by_poincare_distance_and_returns_the_nodes():
    store = PoincareVectorStore()
    nodes = _nodes()
    store.add(nodes)
    q = _emb(1000)
    res = store.query(VectorStoreQuery(query_embedding=q, similarity_top_k=5))
    d = pi.distance(_ball([q])[0][None, :], _ball([n.embedding for n in nodes]))
    order = np.argsort(d, kind="stable")[:5]
    assert res.ids == [f"n{i}" for i in order]
    np.testing.assert_allclose(res.similarities, np.exp(-d[order]), rtol=1e-5)
    assert [n.metadata for n in res.nodes] == [nodes[i].metadata for i in order]
    assert res.nodes[0].text == nodes[order[0]].text


@pytest.mark.parametrize(
    ("flt", "keep"),
    [
        (MF(key="topic", value="dogs"), lambda m: m["topic"] == "dogs"),
        (MF(key="topic", value="dogs", operator=F.NE), lambda m: m["topic"] != "dogs"),
        (MF(key="page", value=10, operator=F.GT), lambda m: m["page"] > 10),
        (MF(key="page", value=10, operator=F.GTE), lambda m: m["page"] >= 10),
        (MF(key="page", value=10, operator=F.LT), lambda m: m["page"] < 10),
        (MF(key="page", value=10, operator=F.LTE), lambda m: m["page"] <= 10),
        (MF(key="page", value=[1, 2, 3], operator=F.IN), lambda m: m["page"] in (1, 2, 3)),
        (MF(key="page", value=[1, 2], operator=F.NIN), lambda m: m["page"] not in (1, 2)),
        (MF(key="absent", value=None, operator=F.IS_EMPTY), lambda m: True),
        (MF(key="absent", value=1), lambda m: False),
        (MF(key="absent", value=1, operator=F.NE), lambda m: True),
    ],
)
def test_every_mapped_filter_operator_against_a_python_reference(flt, keep):
    store = PoincareVectorStore()
    nodes = _nodes()
    store.add(nodes)
    res = store.query(
        VectorStoreQuery(query_embedding=_emb(7), similarity_top_k=30, filters=MetadataFilters(filters=[flt]))
    )
    assert sorted(res.ids) == sorted(n.node_id for n in nodes if keep(n.metadata))


def test_filter_conditions_and_or_not_and_nesting():
    store = PoincareVectorStore()
    nodes = _nodes()
    store.add(nodes)
    dogs = MetadataFilter(key="topic", value="dogs")
    low = MetadataFilter(key="page", value=12, operator=FilterOperator.LT)

    def ids(filters):
        q = VectorStoreQuery(query_embedding=_emb(3), similarity_top_k=30, filters=filters)
        return sorted(store.query(q).ids)

    def want(pred):
        return sorted(n.node_id for n in nodes if pred(n.metadata))

    both = want(lambda m: m["topic"] == "dogs" and m["page"] < 12)
    assert ids(MetadataFilters(filters=[dogs, low])) == both
    assert ids(MetadataFilters(filters=[dogs, low], condition=FilterCondition.OR)) == want(
        lambda m: m["topic"] == "dogs" or m["page"] < 12
    )
    # LlamaIndex's NOT: none of its filters holds
    assert ids(MetadataFilters(filters=[dogs, low], condition=FilterCondition.NOT)) == want(
        lambda m: not (m["topic"] == "dogs" or m["page"] < 12)
    )
    nested = MetadataFilters(filters=[low, MetadataFilters(filters=[dogs], condition=FilterCondition.NOT)])
    assert ids(nested) == want(lambda m: m["page"] < 12 and m["topic"] != "dogs")


@pytest.mark.parametrize(
    "op", [FilterOperator.ANY, FilterOperator.ALL, FilterOperator.CONTAINS, FilterOperator.TEXT_MATCH]
)
def test_unmapped_operators_are_refused_by_name(op):
    store = PoincareVectorStore()
    store.add(_nodes(3))
    value = "x" if op == F.TEXT_MATCH else ["x"]
    flt = MetadataFilters(filters=[MF(key="tags", value=value, operator=op)])
    with pytest.raises(ValueError, match=f"'{op.value}'"):
        store.query(VectorStoreQuery(query_embedding=_emb(1), similarity_top_k=3, filters=flt))


def test_modes_mmr_text_search_hybrid_and_node_ids():
    store = PoincareVectorStore()
    nodes = _nodes()
    store.add(nodes)
    text = store.query(Q(query_str="birds", similarity_top_k=5, mode=MODE.TEXT_SEARCH))
    assert text.ids and all("birds" in n.text for n in text.nodes)
    hybrid = store.query(
        VectorStoreQuery(query_str="birds", query_embedding=_emb(2), similarity_top_k=5,
                         mode=VectorStoreQueryMode.HYBRID, alpha=0.5)
    )  # fmt: skip
    assert len(hybrid.ids) == 5 and all(0.0 <= s <= 1.0 for s in hybrid.similarities)
    mmr = store.query(Q(query_embedding=_emb(4), similarity_top_k=4, mode=MODE.MMR, mmr_threshold=0.2))
    assert len(set(mmr.ids)) == 4
    some = store.query(Q(query_embedding=_emb(4), similarity_top_k=30, node_ids=["n1", "n5", "n9"]))
    assert sorted(some.ids) == ["n1", "n5", "n9"]
    with pytest.raises(ValueError, match="not supported"):
        store.query(VectorStoreQuery(query_embedding=_emb(4), mode=VectorStoreQueryMode.SVM))
    with pytest.raises(ValueError, match="no embedding"):
        store.add([TextNode(id_="x", text="no vector")])


def test_upsert_delete_nodes_clear_and_dimension_checks(tmp_path):
    store = PoincareVectorStore(path=tmp_path / "s")
    store.add(_nodes(6))
    store.add([TextNode(id_="n0", text="replaced", embedding=_emb(99), metadata={"page": 100})])
    [n0] = store.get_nodes(node_ids=["n0"])
    assert n0.text == "replaced" and n0.metadata == {"page": 100}
    store.delete_nodes(filters=MetadataFilters(filters=[MetadataFilter(key="topic", value="dogs")]))
    assert sorted(n.node_id for n in store.get_nodes()) == ["n0", "n2", "n3", "n5"]
    store.delete_nodes(node_ids=["n2"])
    store.close()
    reopened = PoincareVectorStore(path=tmp_path / "s")  # dimension read from the store
    assert reopened.dim == DIM and sorted(n.node_id for n in reopened.get_nodes()) == ["n0", "n3", "n5"]
    with pytest.raises(ValueError, match="dimension"):
        PoincareVectorStore(path=tmp_path / "s", dim=DIM + 1)
    reopened.clear()
    assert reopened.get_nodes() == []
    reopened.close()


def test_our_embedder_as_a_llama_index_model_with_points_used_as_given():
    from poincare_index.integrations.llama_index import PoincareEmbedding

    model = PoincareEmbedding()
    store = PoincareVectorStore(input_space="ball")
    ctx = StorageContext.from_defaults(vector_store=store)
    docs = [Document(text=t, id_=t) for t in ["tokyo sushi", "berlin bread", "paris cheese"]]
    index = VectorStoreIndex.from_documents(docs, storage_context=ctx, embed_model=model)
    [hit] = index.as_retriever(similarity_top_k=1).retrieve("tokyo sushi")
    assert hit.node.text == "tokyo sushi" and hit.score == pytest.approx(1.0, abs=1e-5)  # distance 0
    point = np.asarray(model.get_text_embedding("berlin bread"))
    assert np.linalg.norm(point) < 1
    np.testing.assert_allclose(store.client.vectors([store.client.list()[1].id])[0], point, rtol=1e-6)
    outside = TextNode(id_="bad", text="x", embedding=(point / np.linalg.norm(point) * 1.5).tolist())
    with pytest.raises(ValueError, match="ball|outside"):
        store.add([outside])
    with pytest.raises(ValueError, match="input_space"):
        PoincareVectorStore(input_space="hyperbolic")


def test_persist_replaces_only_a_store_it_wrote(tmp_path):
    store = PoincareVectorStore()
    store.add(_nodes(4))
    precious = tmp_path / "docs"
    precious.mkdir()
    (precious / "important.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a memory store"):
        store.persist(str(precious))
    assert (precious / "important.txt").read_text() == "keep me"
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(FileExistsError, match="is a file"):
        store.persist(str(tmp_path / "file.json"))
    target = tmp_path / "copy"
    store.persist(str(target))
    live = PoincareVectorStore.from_persist_path(str(target))  # holds the writer lock
    with pytest.raises(pi.StoreLockedError):
        store.persist(str(target))
    assert len(live.client) == 4  # the open store's files were left alone
    live.close()
    store.add([TextNode(id_="n9", text="nine", embedding=_emb(9))])
    store.persist(str(target))
    assert len(PoincareVectorStore.from_persist_path(str(target)).client) == 5
    assert not list(tmp_path.glob("copy.*"))  # no staging or old copies left behind


def test_in_needs_a_list_and_reopening_with_other_settings_is_refused(tmp_path):
    store = PoincareVectorStore(path=tmp_path / "s")
    store.add(_nodes(3))
    flt = MetadataFilters(filters=[MF(key="topic", value="abc", operator=F.IN)])
    with pytest.raises(TypeError, match="needs a list"):
        store.query(Q(query_embedding=_emb(1), similarity_top_k=3, filters=flt))
    store.close()
    with pytest.raises(ValueError, match="mismatch"):
        PoincareVectorStore(path=tmp_path / "s", normalize=False)
