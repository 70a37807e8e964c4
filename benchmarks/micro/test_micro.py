"""Micro-benchmarks (pytest-benchmark): the metric kernels, one search at several ef, one fused
search, one add chunk, on a generated 20k-point hierarchy (16-d, seeded). Run with
``pytest benchmarks/micro --benchmark-only``; benchmarks/README.md says how to save a baseline
and compare a change against it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import poincare_index as pi
from poincare_index import _core
from poincare_index.datasets import hierarchy

N_BASE = 20_000
DIM = 16
NOW = np.datetime64("2026-06-01T00:00", "us")


@dataclass(frozen=True)
class MicroData:
    base: NDArray[np.float32]
    queries: NDArray[np.float32]
    extra: NDArray[np.float32]  # rows for the add benchmark, disjoint from base
    hnsw: pi.PoincareIndex
    flat: pi.PoincareFlatIndex


@pytest.fixture(scope="session")
def micro() -> MicroData:
    data = hierarchy(N_BASE + 2_000 + 1_000, DIM, seed=3)
    base, rest = data.split(3_000, seed=3)  # base: N_BASE rows; rest: 3,000 held out
    queries, extra = rest[:1_000], rest[1_000:]
    rng = np.random.default_rng(3)
    stamps = NOW - (rng.uniform(0, 365, len(base)) * 86400e6).astype("timedelta64[us]")
    hnsw = pi.PoincareIndex(DIM, num_threads=1)
    hnsw.add(base, t=stamps)
    flat = pi.PoincareFlatIndex(DIM, num_threads=1)
    flat.add(base, t=stamps)
    return MicroData(base, queries, extra, hnsw, flat)


Benchmark = Any  # pytest-benchmark's fixture


def _rows(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return pi.project(rng.normal(size=(n, dim)) * 0.3).astype(np.float32)


@pytest.mark.parametrize("dim", [16, 64, 256])
@pytest.mark.parametrize("kernel", ["reference", "fast"])
def test_scan_tile(benchmark: Benchmark, kernel: str, dim: int) -> None:
    """The flat scan's tile kernel (its unit of work): 6 queries against 32 rows, the rank
    quantity with its error bound and the lane mask."""
    q, x = _rows(6, dim, 1), _rows(32, dim, 2)
    reference = kernel == "reference"
    benchmark.group = f"scan_tile d={dim}"
    rank, _, _ = benchmark(_core.scan_tile, q, x, [np.inf] * 6, reference)
    assert np.all(np.isfinite(rank))


@pytest.mark.parametrize("kernel", ["reference", "fast"])
def test_l2sq_pair(benchmark: Benchmark, kernel: str) -> None:
    """One squared distance at d=256 (mostly the call's own cost: compare the two, not absolutes)."""
    a, b = _rows(2, 256, 3)
    fn = _core.l2sq_reference if kernel == "reference" else _core.l2sq_fast
    benchmark.group = "l2sq pair d=256"
    assert benchmark(fn, a, b) >= 0.0


@pytest.mark.parametrize("ef", [16, 64, 256])
def test_hnsw_search_one(benchmark: Benchmark, micro: MicroData, ef: int) -> None:
    """One query, k=10, on the 20k-point HNSW index."""
    q = micro.queries[:1]
    benchmark.group = "hnsw search one query"
    D, I = benchmark(micro.hnsw.search, q, 10, ef=ef)
    assert I.shape == (1, 10) and np.all(I >= 0)


def test_hnsw_search_batch(benchmark: Benchmark, micro: MicroData) -> None:
    """1,000 queries, k=10, ef=64, one thread."""
    benchmark.group = "hnsw search batch"
    D, I = benchmark(micro.hnsw.search, micro.queries, 10, ef=64)
    assert I.shape == (len(micro.queries), 10)


def test_flat_search_one(benchmark: Benchmark, micro: MicroData) -> None:
    """One query, k=10, exact scan of 20k points."""
    benchmark.group = "flat search one query"
    D, I = benchmark(micro.flat.search, micro.queries[:1], 10)
    assert np.all(I >= 0)


@pytest.mark.parametrize("kind", ["hnsw", "flat"])
def test_fused_search_one(benchmark: Benchmark, micro: MicroData, kind: str) -> None:
    """One fused query: distance and a 7-day half-life inside the search, k=10."""
    index = micro.hnsw if kind == "hnsw" else micro.flat
    decay = pi.HalfLife(hours=7 * 24)
    benchmark.group = "fused search one query"
    r = benchmark(index.search_scored, micro.queries[:1], 10, decay=decay, at_time=NOW)
    assert np.all(r.ids >= 0)


def test_add_chunk(benchmark: Benchmark, micro: MicroData) -> None:
    """Adding 1,000 points to a 20k-point HNSW index (a fresh copy each round, built outside
    the timing)."""
    benchmark.group = "hnsw add chunk"

    def setup() -> tuple[tuple[pi.PoincareIndex], dict[str, Any]]:
        index = pi.PoincareIndex(DIM, num_threads=1)
        index.add(micro.base, t=NOW)
        return (index,), {}

    def add(index: pi.PoincareIndex) -> None:
        index.add(micro.extra, t=NOW)

    benchmark.pedantic(add, setup=setup, rounds=3, iterations=1)


def test_search_one_core_call(benchmark: Benchmark, micro: MicroData) -> None:
    """The core's call alone for one query at ef=16: with test_hnsw_search_one[16], what the
    Python layer adds to a single-query search."""
    q = micro.queries[:1]
    benchmark.group = "search call overhead"
    D, I = benchmark(micro.hnsw._core.search, q, 10, 16)
    assert I.shape == (1, 10)


@pytest.mark.parametrize("checked", [True, False], ids=["closed-check", "unwrapped"])
def test_search_one_closed_check(benchmark: Benchmark, micro: MicroData, checked: bool) -> None:
    """One query at ef=16 through the closed-object check (_closing.py) and through the method
    it wraps: the pair is what the check costs a single-query search."""
    q = micro.queries[:1]
    benchmark.group = "closed check"
    search = (
        micro.hnsw.search if checked else functools.partial(type(micro.hnsw).search.__wrapped__, micro.hnsw)
    )
    D, I = benchmark(search, q, 10, ef=16)
    assert I.shape == (1, 10)


def test_deferred_interrupts_block(benchmark: Benchmark) -> None:
    """Holding SIGINT for one empty block (what every write step pays)."""
    from poincare_index._interrupts import deferred_interrupts

    def block() -> None:
        with deferred_interrupts():
            pass

    benchmark.group = "write steps"
    benchmark(block)


@pytest.mark.parametrize("where", ["memory", "disk"])
def test_memory_add_one(benchmark: Benchmark, where: str, tmp_path: Any) -> None:
    """One Memory.add with the hashing embedder, in memory or to a store on disk (the log)."""
    from poincare_index.embed import HashingEmbedder
    from poincare_memory import Memory

    m = Memory(embedder=HashingEmbedder(dim=64), path=tmp_path / "s" if where == "disk" else None)
    texts = iter(f"memory number {i} about something" for i in range(10**7))
    benchmark.group = "write steps"
    benchmark(lambda: m.add(next(texts), t=NOW))
    m.close()
