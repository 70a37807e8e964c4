"""The LangChain store's refusals: what was wrong and where, and nothing written when refused."""

from __future__ import annotations

import os
import re

import pytest

if not os.environ.get("CI"):  # CI installs the extra: a missing one fails there
    pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings  # noqa: E402

from poincare_index.integrations.langchain import PoincareVectorStore  # noqa: E402


class Fixed(Embeddings):
    """Vectors of a given length per text (``lengths``, cycled) and value ``value``."""

    def __init__(self, lengths=(4,), value=0.1):
        self.lengths, self.value = list(lengths), value

    def embed_documents(self, texts):
        return [[self.value * (1 + j % 3) for j in range(self.lengths[i % len(self.lengths)])]
                for i in range(len(texts))]  # fmt: skip

    def embed_query(self, text):
        return self.embed_documents([text])[0]


def _count(store):
    return 0 if store.memory is None else len(store.memory)


def test_an_id_given_twice_in_one_call_is_refused_naming_it_and_its_positions():
    """Before: add_texts(["a", "b"], ids=["x", "x"]) kept "b" alone and returned ['x', 'x']."""
    store = PoincareVectorStore(DeterministicFakeEmbedding(size=8))
    with pytest.raises(
        ValueError, match=re.escape("id 'x' is given 2 times in one call (ids[0] and ids[1])")
    ):
        store.add_texts(["a", "b"], ids=["x", "x"])
    assert _count(store) == 0
    store.add_texts(["first"], ids=["x"])
    with pytest.raises(
        ValueError, match=re.escape("id 'y' is given 3 times in one call (ids[1], ids[2] and ids[4])")
    ):
        store.add_texts(["a", "b", "c", "d", "e"], ids=["x", "y", "y", "z", "y"])
    assert [d.page_content for d in store.get_by_ids(["x", "y", "z"])] == ["first"]  # nothing written
    docs = [Document(page_content="p", id="d"), Document(page_content="q", id="d")]
    with pytest.raises(ValueError, match="id 'd' is given 2 times"):
        store.add_documents(docs)
    # across calls an id already stored is replaced (LangChain's upsert)
    assert store.add_texts(["second"], ids=["x"]) == ["x"]
    assert [d.page_content for d in store.get_by_ids(["x"])] == ["second"] and len(store.memory) == 1


@pytest.mark.parametrize("dim", [None, 8])
def test_a_text_that_is_not_a_str_is_refused_by_position(dim):
    """Before (dimension not yet known): AttributeError: 'int' object has no attribute 'encode'."""
    store = PoincareVectorStore(DeterministicFakeEmbedding(size=8), dim=dim)
    with pytest.raises(TypeError, match=re.escape("texts[3] must be a str, got int")):
        store.add_texts(["a", "b", "c", 4])
    with pytest.raises(TypeError, match="not one str"):
        store.add_texts("abc")
    assert _count(store) == 0


@pytest.mark.parametrize("dim", [None, 4])
def test_vectors_of_different_lengths_name_the_row_and_both_lengths(dim):
    """Before: numpy's "setting an array element with a sequence ... inhomogeneous shape"."""
    store = PoincareVectorStore(Fixed(lengths=(4, 4, 3)), dim=dim)
    want = "Fixed.embed_documents returned vectors of different lengths: row 2 (texts[2]) has length 3, "
    want += "row 0 (texts[0]) has length 4"
    with pytest.raises(ValueError, match=re.escape(want)):
        store.add_texts(["a", "b", "c"])
    assert _count(store) == 0


def test_vectors_of_another_length_than_the_store_name_both():
    model = Fixed(lengths=(4,))
    store = PoincareVectorStore(model)
    store.add_texts(["a"])
    model.lengths = [6]  # the model changed under the store
    with pytest.raises(ValueError, match=r"returned vectors of length 6, but the store holds dimension 4"):
        store.add_texts(["b"])
    with pytest.raises(
        ValueError, match=r"the query embedding has length 6, but the store holds dimension 4"
    ):
        store.similarity_search("b")
    assert len(store.memory) == 1


def test_load_local_with_other_embeddings_names_both_embedders_and_their_dimensions(tmp_path):
    """Before: "built with '...DeterministicFakeEmbedding...' (dim 16), not '...Fixed...' (dim 16)":
    the given embeddings' dimension was the store's, read from its file."""
    store = PoincareVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_texts(["hello"])
    store.save_local(tmp_path / "saved")
    with pytest.raises(ValueError) as err:
        PoincareVectorStore.load_local(tmp_path / "saved", Fixed(lengths=(4,)))
    message = str(err.value)
    assert (
        "was built with embedder 'langchain:langchain_core.embeddings.fake.DeterministicFakeEmbedding:"
        in message
    )
    assert "of dim 16; the given embeddings are 'langchain:" in message and ".Fixed:" in message
    assert message.endswith("of dim 4")
    with pytest.raises(ValueError, match=r"dim=8, but the store at .* holds dimension 16"):
        PoincareVectorStore.load_local(tmp_path / "saved", DeterministicFakeEmbedding(size=16), dim=8)
    same_class = PoincareVectorStore.load_local(tmp_path / "saved", DeterministicFakeEmbedding(size=8))
    with pytest.raises(
        ValueError, match="the query embedding has length 8, but the store holds dimension 16"
    ):
        same_class.similarity_search("hello")
    same_class.close()


def test_out_of_the_ball_with_normalize_false_advises_normalize_not_project():
    """Before: "... lies on or outside the Poincare ball ...; clip it with poincare_index.project()",
    a function a LangChain user never calls."""
    store = PoincareVectorStore(Fixed(lengths=(4,), value=5.0), normalize=False)
    with pytest.raises(ValueError) as err:
        store.add_texts(["a", "b"])
    message = str(err.value)
    assert message.startswith("texts[0]: its embedding has norm 19.36") and "normalize=False" in message
    assert "use normalize=True (the default), or scale=0.44 or less" in message and "project" not in message
    assert _count(store) == 0
    fits = PoincareVectorStore(Fixed(lengths=(4,), value=5.0), normalize=False, scale=0.44)
    assert len(fits.add_texts(["a", "b"])) == 2  # the advice works
    scaled = PoincareVectorStore(Fixed(lengths=(4,)), scale=20.0)
    with pytest.raises(
        ValueError, match=r"scale=20 puts every embedding on the boundary .* a scale below 8.5"
    ):
        scaled.add_texts(["a"])
