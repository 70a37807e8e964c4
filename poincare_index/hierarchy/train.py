"""Poincaré embeddings of a hierarchy (Nickel & Kiela, 2017), trained with numba.

The model: for every (child u, parent v) pair, a softmax over v and ``negatives`` nodes u is not
related to, of minus the Poincaré distance; Riemannian SGD (the Euclidean gradient rescaled by
the inverse metric, ``(1 - |x|^2)^2 / 4``) with every point projected back inside the ball
after its step; a burn-in of ``burn_in`` epochs at ``lr * burn_in_lr_ratio`` whose negatives are
drawn in proportion to degree^0.75 (as the authors' code does), then uniform negatives at ``lr``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

from .._progress import progress_bar
from .._validation import as_flag
from .embedding import Embedding
from .graph import Relations, as_relations

__all__ = ["TrainConfig", "train"]

EpochCallback = Callable[[int, float, NDArray[np.float32]], Any]


def _numba() -> Any:
    try:
        import numba
    except ImportError:
        raise ImportError(
            'poincare_index.hierarchy.train needs numba: pip install ".[numba]" '
            "(from a checkout of poincare_index)"
        ) from None
    return numba


@dataclass(frozen=True)
class TrainConfig:
    """The trainer's settings, checked on construction. ``epochs`` counts the epochs after the
    burn-in (as gensim's ``PoincareModel.train`` does): a run makes ``burn_in + epochs`` passes."""

    dim: int = 10
    epochs: int = 50
    negatives: int = 10
    lr: float = 0.3
    burn_in: int = 10
    burn_in_lr_ratio: float = 0.1
    seed: int = 0
    threads: int = 1
    lr_final: float | None = None

    def __post_init__(self) -> None:
        for name in ("dim", "epochs", "negatives", "burn_in", "seed", "threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
        if self.dim < 2:
            raise ValueError(f"dim must be >= 2, got {self.dim}")
        if self.epochs < 0 or self.burn_in < 0 or self.epochs + self.burn_in < 1:
            raise ValueError(
                f"epochs and burn_in must be >= 0 with at least one pass, got {self.epochs}, {self.burn_in}"
            )
        if self.negatives < 1:
            raise ValueError(f"negatives must be >= 1, got {self.negatives}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        for name in ("lr", "burn_in_lr_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise TypeError(f"{name} must be a number, got {type(value).__name__}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if self.lr_final is not None:
            v = self.lr_final
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
                raise TypeError(f"lr_final must be a number or None, got {type(v).__name__}")
            if not math.isfinite(v) or not 0 <= v <= self.lr:
                raise ValueError(f"lr_final must be in [0, lr], got {v!r}")

    def lr_at(self, epoch: int) -> float:
        """The learning rate of pass ``epoch`` (0-based, burn-in first): the burn-in's, then
        ``lr``, falling linearly to ``lr_final`` over the epochs when that is set."""
        if epoch < self.burn_in:
            return self.lr * self.burn_in_lr_ratio
        if self.lr_final is None or self.epochs <= 1:
            return self.lr
        done = (epoch - self.burn_in) / (self.epochs - 1)
        return self.lr + (self.lr_final - self.lr) * done


def train(
    edges: Any,
    dim: int = 10,
    *,
    epochs: int = 50,
    negatives: int = 10,
    lr: float = 0.3,
    burn_in: int = 10,
    burn_in_lr_ratio: float = 0.1,
    lr_final: float | None = None,
    seed: int = 0,
    threads: int | None = None,
    closure: bool = False,
    progress: bool = False,
    on_epoch: EpochCallback | None = None,
) -> Embedding:
    """Embed the hierarchy of ``edges`` ((child, parent) pairs of str names) in the unit ball of
    dimension ``dim``; ``closure=True`` trains on their transitive closure (as the paper does
    for WordNet) and refuses cycles. Returns an :class:`Embedding` (names in first-seen order,
    float32 points).

    ``threads``: None or 1 trains serially, and a seed then gives the same points on every run
    and machine with the same numba and numpy. With k > 1 each epoch's shuffled pairs are split
    into k chunks trained in parallel on shared points without locks (Hogwild!): as good, but
    the points vary from run to run with the threads' timing. ``on_epoch(epoch, mean_loss,
    points)`` is called after every pass (epoch counts from 1, burn-in included; points a
    float32 copy), e.g. to record a curve of MAP against time. ``lr_final``: the learning rate
    falls linearly from ``lr`` to it over the epochs after the burn-in (None: constant).

    ``lr`` is a step per pair (pairs are not averaged in batches): 0.3 suits small closures
    trained for tens of epochs (the mammals); large ones need a smaller step over more epochs
    (the WordNet nouns: 0.05 for ~1,000 epochs; at 0.3 their loss stalls early, see
    benchmarks/BENCHMARKS.md).
    """
    cfg = TrainConfig(
        dim=dim, epochs=epochs, negatives=negatives, lr=lr, burn_in=burn_in,
        burn_in_lr_ratio=burn_in_lr_ratio, seed=seed, threads=1 if threads is None else threads,
        lr_final=lr_final,
    )  # fmt: skip
    as_flag(progress, "progress")
    if on_epoch is not None and not callable(on_epoch):
        raise TypeError(f"on_epoch must be callable, got {type(on_epoch).__name__}")
    rel = as_relations(edges, closure=closure)
    return _fit(rel, cfg, progress, on_epoch)


def _fit(rel: Relations, cfg: TrainConfig, progress: bool, on_epoch: EpochCallback | None) -> Embedding:
    numba = _numba()
    from . import _kernels

    rng = np.random.default_rng(cfg.seed)
    theta = rng.uniform(-1e-3, 1e-3, size=(rel.n_nodes, cfg.dim))
    degree = rel.degree.astype(np.float64)
    burn_cdf = np.cumsum(degree**0.75)
    uniform_cdf = np.zeros(0, dtype=np.float64)
    edges = rel.edges.astype(np.int32)
    passes = cfg.burn_in + cfg.epochs
    losses: list[float] = []
    previous_threads = numba.get_num_threads()
    threads = min(cfg.threads, numba.config.NUMBA_NUM_THREADS)
    numba.set_num_threads(threads)
    started = time.perf_counter()
    try:
        with progress_bar(progress, passes, "training", unit="epoch") as bar:
            for epoch in range(passes):
                burning = epoch < cfg.burn_in
                order = rng.permutation(edges.shape[0]).astype(np.int64)
                seeds = rng.integers(0, 2**63 - 1, size=cfg.threads, dtype=np.int64).astype(np.uint64)
                total = _kernels.train_epoch(
                    theta, edges, order, rel.indptr, rel.indices,
                    burn_cdf if burning else uniform_cdf, cfg.negatives,
                    cfg.lr_at(epoch), seeds,
                )  # fmt: skip
                mean = float(total) / edges.shape[0]
                if not math.isfinite(mean):
                    raise FloatingPointError(f"the loss is not finite after epoch {epoch + 1}: lower lr")
                losses.append(mean)
                bar.update(1)
                if on_epoch is not None:
                    on_epoch(epoch + 1, mean, theta.astype(np.float32))
    finally:
        numba.set_num_threads(previous_threads)
    return Embedding(
        names=rel.names,
        points=_to_float32_inside(theta),
        losses=tuple(losses),
        train_seconds=time.perf_counter() - started,
    )


def _to_float32_inside(theta: NDArray[np.float64]) -> NDArray[np.float32]:
    """float32 points strictly inside the unit ball (rounding could reach |x| = 1)."""
    pts = theta.astype(np.float32)
    norms = np.linalg.norm(pts.astype(np.float64), axis=1)
    limit = 1.0 - 1e-5
    over = norms > limit
    if over.any():
        pts[over] = (theta[over] / norms[over, None] * limit).astype(np.float32)
    return np.ascontiguousarray(pts)
