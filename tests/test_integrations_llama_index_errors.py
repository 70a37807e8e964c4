"""The LlamaIndex store's refusals: what was wrong and where, and nothing written when refused."""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("llama_index.core")

from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode  # noqa: E402

from poincare_index.integrations.llama_index import PoincareVectorStore  # noqa: E402

DIM = 4


def _node(node_id: str, length: int = DIM, value: float = 0.1, seed: int = 0) -> TextNode:
    emb = (np.random.default_rng(seed).normal(size=length) * value).tolist()
    return TextNode(id_=node_id, text=f"text of {node_id}", embedding=emb)


def _size(store):
    return 0 if store.client is None else len(store.client)


def test_node_embeddings_of_different_lengths_name_the_nodes_and_lengths():
    """Before: numpy's "inhomogeneous shape" (no store yet) or "node embeddings differ in length"."""
    store = PoincareVectorStore()
    want = "the nodes' embeddings are vectors of different lengths: nodes[2] ('c') has length 3, "
    want += "nodes[0] ('a') has length 4"
    with pytest.raises(ValueError, match=re.escape(want)):
        store.add([_node("a"), _node("b"), _node("c", length=3)])
    assert _size(store) == 0
    store.add([_node("a")])
    wrong = "nodes[0] ('d'): its embedding has length 5, but the store holds dimension 4"
    with pytest.raises(ValueError, match=re.escape(wrong)):
        store.add([_node("d", length=5)])
    with pytest.raises(
        ValueError, match=re.escape("query_embedding has length 3, but the store holds dimension 4")
    ):
        store.query(VectorStoreQuery(query_embedding=[0.1] * 3, similarity_top_k=1))
    assert _size(store) == 1


@pytest.mark.parametrize(("alpha", "shown"), [(5, "5"), (-0.5, "-0.5"), (1.5, "1.5"), (math.nan, "nan")])
def test_hybrid_alpha_outside_0_1_is_refused_as_alpha(alpha, shown):
    """Before: alpha=5 was reported as "keyword_weight must be in [0, 1], got -4.0"."""
    store = PoincareVectorStore()
    store.add([_node(f"n{i}", seed=i) for i in range(5)])
    query = VectorStoreQuery(query_embedding=[0.1] * DIM, query_str="text", mode=VectorStoreQueryMode.HYBRID,
                             alpha=alpha, similarity_top_k=2)  # fmt: skip
    with pytest.raises(ValueError, match=re.escape(f"alpha must be in [0, 1], got {shown}")):
        store.query(query)


@pytest.mark.parametrize("alpha", [0, 1, 0.25])
def test_hybrid_alpha_at_and_inside_the_bounds_is_taken(alpha):
    store = PoincareVectorStore()
    store.add([_node(f"n{i}", seed=i) for i in range(5)])
    query = VectorStoreQuery(query_embedding=[0.1] * DIM, query_str="text", mode=VectorStoreQueryMode.HYBRID,
                             alpha=alpha, similarity_top_k=2)  # fmt: skip
    assert len(store.query(query).ids) == 2


def test_out_of_the_ball_advises_the_store_options_not_project():
    """Before: "... clip it with poincare_index.project()", which a LlamaIndex user never calls."""
    store = PoincareVectorStore(normalize=False)
    with pytest.raises(ValueError) as err:
        store.add([_node("a"), _node("big", value=20.0, seed=1)])
    message = str(err.value)
    assert message.startswith("nodes[1] ('big'): its embedding has norm ") and "normalize=False" in message
    assert "use normalize=True (the default), or scale=" in message and "project" not in message
    assert _size(store) == 0
    ball = PoincareVectorStore(input_space="ball")
    with pytest.raises(
        ValueError, match=r"nodes\[0\] \('out'\): its embedding has norm 2: .*input_space='euclidean'"
    ):
        ball.add([TextNode(id_="out", text="x", embedding=[2.0, 0.0, 0.0, 0.0])])
    assert _size(ball) == 0
