"""Memory(storage=...): every index the Memory builds (the first one, a compaction's rebuild, a
reopened snapshot's) stores its points as the store's config says; searches re-rank exactly, so
the results are those of a float32 Memory; the kind is saved with the store and kept when
reopening; a conflicting or bad value is refused."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from poincare_index import IndexFormatError
from poincare_index.embed import HashingEmbedder
from poincare_index.geometry import distance
from poincare_index.index import STORAGE_KINDS
from poincare_index.memory.store import NamespaceDir
from poincare_memory import AsyncMemory, Memory

NOW = datetime(2026, 6, 1, 12, tzinfo=timezone.utc)
WORDS = "tea coffee order refund shipping invoice login password deploy outage cache latency".split()
TEXTS = [
    f"note {i}: {WORDS[i % 12]} {WORDS[(i * 7) % 12]} {WORDS[(i * 5 + 3) % 12]} #{i}" for i in range(200)
]
QUERIES = ["tea order", "refund invoice", "deploy outage latency", "login password", "shipping cache"]


_OMIT = object()


def make(storage=_OMIT, **kwargs) -> Memory:
    options = {} if storage is _OMIT else {"storage": storage}
    return Memory(
        decay=None,
        embedder=HashingEmbedder(dim=32),
        num_threads=1,
        M=8,
        ef_construction=64,
        **options,
        **kwargs,
    )


def fill(mem: Memory) -> None:
    mem.add_many(
        TEXTS, [f"m{i}" for i in range(len(TEXTS))], t=[NOW - timedelta(hours=i) for i in range(200)]
    )


def top_ids(mem: Memory, query: str, k: int = 5) -> list[str]:
    return [r.id for r in mem.search(query, k=k, at_time=NOW, touch=False)]


def brute_force_ids(mem: Memory, query: str, k: int = 5) -> list[str]:
    """The k nearest stored points by float64 Poincare distance (decay=None: score = -distance)."""
    table = mem.to_arrow(vectors=True)
    ids = table.column("id").to_pylist()
    points = np.asarray(table.column("vector").to_pylist(), dtype=np.float64)
    q = mem.embedder.embed([query]).astype(np.float32).astype(np.float64)
    d = distance(q, points)
    return [ids[i] for i in np.argsort(d, kind="stable")[:k]]


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_each_kind_finds_what_float32_finds(kind):
    reference, mem = make("f32"), make(kind)
    fill(reference)
    fill(mem)
    assert mem.index.storage == kind and reference.index.storage == "f32"
    hits = 0
    for query in QUERIES:
        got = top_ids(mem, query)
        assert got == top_ids(reference, query)  # both re-rank exactly from float32
        hits += len(set(got) & set(brute_force_ids(mem, query)))
    assert hits / (5 * len(QUERIES)) >= 0.9
    # Scores are exact too: the same as float32's for the same memories.
    a = mem.search(QUERIES[0], k=5, at_time=NOW, touch=False)
    b = reference.search(QUERIES[0], k=5, at_time=NOW, touch=False)
    np.testing.assert_allclose([r.score for r in a], [r.score for r in b], rtol=0, atol=1e-9)


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_points_at_spread_depths_with_a_small_ef(kind):
    """Vectors given directly, from near the origin to norm 0.999, searched with ef=16 (the walk
    does not see every row): recall against the float64 brute force, distances exact."""
    rng = np.random.default_rng(7)
    n, d = 300, 32
    dirs = rng.normal(size=(n, d))
    points = (
        dirs / np.linalg.norm(dirs, axis=1, keepdims=True) * np.tanh(rng.uniform(0.2, 4.0, n) / 2)[:, None]
    )
    points[:5] *= 0.999 / np.linalg.norm(points[:5], axis=1, keepdims=True)
    mem = make(kind)
    ids = [f"p{i}" for i in range(n)]
    mem.add_many(ids, ids, t=NOW, vectors=points)
    stored = mem.vectors(ids).astype(np.float64)
    hits = 0
    queries = rng.normal(size=(10, d))
    for q in queries / np.linalg.norm(queries, axis=1, keepdims=True) * rng.uniform(0.1, 0.9, (10, 1)):
        exact = distance(q.astype(np.float32).astype(np.float64), stored)
        got = mem.search(vector=q, k=10, ef=16, at_time=NOW, touch=False)
        hits += len({f"p{i}" for i in np.argsort(exact)[:10]} & {r.id for r in got})
        np.testing.assert_allclose([r.distance for r in got], exact[[int(r.id[1:]) for r in got]], atol=1e-9)
    assert hits / 100 >= 0.9


def test_default_is_f32_and_the_option_is_forwarded():
    assert make().index.storage == "f32"
    assert (
        AsyncMemory(decay=None, embedder=HashingEmbedder(dim=8), storage="f16").memory.index.storage == "f16"
    )


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_storage_persists_and_a_conflicting_one_is_refused(tmp_path, kind):
    with make(kind, path=tmp_path) as mem:
        fill(mem)
        before = {q: [(r.id, r.score) for r in mem.search(q, k=5, at_time=NOW, touch=False)] for q in QUERIES}
        mem.checkpoint()
        mem.add("one more, in the log", id="late", t=NOW)
    config = json.loads((tmp_path / "default" / "config.json").read_text())
    assert config["storage"] == kind
    with make(path=tmp_path) as mem:  # storage omitted: the saved one
        assert mem.index.storage == kind
        assert "late" in mem
        mem.delete("late")
        after = {q: [(r.id, r.score) for r in mem.search(q, k=5, at_time=NOW, touch=False)] for q in QUERIES}
        assert after == before
    with make(kind, path=tmp_path) as mem:  # the same one given: fine
        assert mem.index.storage == kind
    with Memory(path=tmp_path, read_only=True) as reader:
        assert reader.index.storage == kind
    for other in STORAGE_KINDS:
        if other != kind:
            with pytest.raises(ValueError, match="storage"):
                make(other, path=tmp_path)
            with pytest.raises(ValueError, match="storage"):
                Memory(path=tmp_path, read_only=True, storage=other)
    with make(path=tmp_path) as mem:  # a refused open changed nothing
        assert mem.index.storage == kind


def test_a_store_written_before_storage_opens_as_f32(tmp_path):
    with make(path=tmp_path) as mem:
        fill(mem)
    ns = NamespaceDir(tmp_path, "default")
    old = {k: v for k, v in ns.read_config().items() if k not in ("storage", "format", "version")}
    ns.write_config(old)  # the config.json of a store from before storage=
    with Memory(path=tmp_path, read_only=True) as reader:
        assert reader.index.storage == "f32"
    with pytest.raises(ValueError, match="storage"):
        make("sq8", path=tmp_path)
    with make("f32", path=tmp_path) as mem:
        assert mem.index.storage == "f32" and len(mem) == len(TEXTS)
    assert ns.read_config()["storage"] == "f32"  # the writer records it


def test_a_bad_saved_storage_is_a_format_error(tmp_path):
    with make("f16", path=tmp_path) as mem:
        mem.add("x", t=NOW)
    ns = NamespaceDir(tmp_path, "default")
    body = {k: v for k, v in ns.read_config().items() if k not in ("format", "version")}
    ns.write_config(dict(body, storage="f64"))
    with pytest.raises(IndexFormatError, match="storage"):
        Memory(path=tmp_path)
    ns.write_config(dict(body, storage="sq8"))  # config and snapshot disagree
    with pytest.raises(IndexFormatError, match="storage"):
        Memory(path=tmp_path)


def test_compaction_rebuilds_with_the_same_storage():
    mem = make("sq8", compact_min_rows=64)
    fill(mem)
    index_before = mem.index
    assert mem.delete(filters=lambda r: int(r.id[1:]) % 4 != 0) == 150
    assert mem.index is not index_before and len(mem.index) == 50  # rebuilt from the live rows
    assert mem.index.storage == "sq8"
    for query in QUERIES:
        assert len(set(top_ids(mem, query)) & set(brute_force_ids(mem, query))) >= 4


@pytest.mark.parametrize(
    "value, error",
    [(16, TypeError), (None, TypeError), (b"f16", TypeError), ("f64", ValueError), ("F16", ValueError)],
)
def test_bad_storage_values_are_refused(tmp_path, value, error):
    with pytest.raises(error, match="storage"):
        make(value)
    with pytest.raises(error, match="storage"):
        make(value, path=tmp_path)
    assert not (tmp_path / "default" / "config.json").exists()
