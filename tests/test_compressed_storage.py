"""Compressed storage (``PoincareIndex(storage="f16" | "sq8")``): the walk ranks by codes, the ef
candidates are re-ranked from the float32 coordinates. Checked against the float64 brute force
on the data family (tests/family.py) and at norms 0.999 to 0.9999999, through save / load / mmap,
removals and slot reuse, filters and the fused search (docs/compressed_storage.md)."""

from __future__ import annotations

import functools
import struct
from datetime import datetime, timezone
from pathlib import Path

import family
import numpy as np
import pytest
from reference import brute_force, fused_brute_force, recall
from test_mmap import refresh_checksums

import poincare_index as pi

KINDS = ("f16", "sq8")
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
V2 = Path(__file__).parent / "data" / "format_v2"


def _build(x: np.ndarray, storage: str, **kw) -> pi.PoincareIndex:
    index = pi.PoincareIndex(x.shape[1], seed=0, num_threads=1, storage=storage, **kw)
    index.add(x)
    return index


@functools.lru_cache(maxsize=4)
def _f32_build(name: str, n: int, total: int, dim: int) -> pi.PoincareIndex:
    """The f32 index of the first n of ``total`` points of a family member (read only: shared
    by the kinds' cases)."""
    return _build(family.member(name, total, dim)[:n], "f32")


def _boundary_points(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """Clusters of points at norms 0.999, 0.9999 and 0.9999999, a small angle apart: near the
    boundary a(x) amplifies any error of |q - x|^2 by up to 5e6."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    dirs = centres[rng.integers(0, 12, n)] + rng.normal(size=(n, dim)) * 0.02
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    radii = rng.choice([0.999, 0.9999, 0.9999999], size=(n, 1))
    return np.ascontiguousarray(pi.project((dirs * radii).astype(np.float32), eps=pi.BALL_MARGIN))


def test_storage_is_checked_and_reported():
    assert pi.PoincareIndex(4).storage == "f32"
    assert "storage='sq8'" in repr(pi.PoincareIndex(4, storage="sq8"))
    with pytest.raises(TypeError, match="storage must be a str"):
        pi.PoincareIndex(4, storage=8)
    with pytest.raises(ValueError, match="storage must be one of"):
        pi.PoincareIndex(4, storage="pq16")
    memory = pi.PoincareIndex(64, storage="sq8")
    memory.add(family.member("gauss-s0.15", 100, 64))
    assert memory.memory_usage()["codes"] >= 100 * (64 + 6)
    assert "codes" not in pi.PoincareIndex(4).memory_usage()


@pytest.mark.parametrize("storage", KINDS)
@pytest.mark.parametrize("name", list(family.MEMBERS))
def test_every_member_keeps_its_recall_on_codes(name: str, storage: str) -> None:
    """The graph is built from the float32 coordinates whatever the storage (with one thread,
    the same graph), so only the walk's keys differ: on every member of the family, at 16-d and
    64-d, the codes find what float32 finds (self@1, near recall@1, held-out recall@10)."""
    n, nq = 1500, 150
    for dim in (16, 64):
        x = family.member(name, n + nq, dim)
        base, held_out = x[:n], x[n:]
        rows = np.random.default_rng(1).choice(n, nq, replace=False)
        near = family.near(base, rows)
        plain, coded = _f32_build(name, n, n + nq, dim), _build(base, storage)
        np.testing.assert_array_equal(plain.reconstruct_batch(np.arange(n)), base)
        for node in rows[:20]:
            assert coded._core.neighbors(int(node), 0) == plain._core.neighbors(int(node), 0)
        # At the width the comparison with float32 was measured at (the target would scan).
        _, self_hits = coded.search(base[rows], 1, ef=64)
        assert np.mean(self_hits[:, 0] == rows) >= 0.99, dim
        truth_d, truth = brute_force(base, near, 1)
        D, I = coded.search(near, 1, ef=64)
        assert np.mean(I[:, 0] == truth[:, 0]) >= 0.99, dim
        # Re-ranked exactly: a returned true neighbour reports the float64 distance.
        same = I[:, 0] == truth[:, 0]
        np.testing.assert_allclose(D[same, 0], truth_d[same, 0], rtol=2e-6, atol=1e-6)
        _, ref = brute_force(base, held_out, 10)
        _, I_plain = plain.search(held_out, 10, ef=64)
        # sq8's keys err by ~2 |q - x| |x - code(x)|, |x - code(x)| relative to the point's own
        # scale: inside a tight cluster far from the origin that is a few per cent of a held-out
        # query's distances (clusters: recall@10 0.97 at ef 64), which twice the ef buys back.
        _, I_coded = coded.search(held_out, 10, ef=64 if storage == "f16" else 128)
        assert recall(I_coded, ref) >= recall(I_plain, ref) - 0.005, dim


@pytest.mark.parametrize("storage", KINDS)
@pytest.mark.parametrize("dim", [16, 128])
def test_points_at_the_boundary_are_found_and_their_distances_are_exact(storage: str, dim: int) -> None:
    base = _boundary_points(2000, dim)
    rows = np.random.default_rng(3).choice(len(base), 200, replace=False)
    # A nudge far below the codes' step: only the subtracted code error keeps these in order.
    q = base[rows].astype(np.float64)
    q = q + np.random.default_rng(4).normal(size=q.shape) * 1e-8
    q = np.ascontiguousarray(pi.project(q.astype(np.float32), eps=pi.BALL_MARGIN))
    index = _build(base, storage)
    truth_d, truth = brute_force(base, q, 10)
    D, I = index.search(q, 10, ef=64)
    assert np.mean(I[:, 0] == truth[:, 0]) >= 0.99
    assert recall(I, truth) >= 0.95
    hit = I == truth
    np.testing.assert_allclose(D[hit], truth_d[hit], rtol=2e-6)
    _, self_hits = index.search(base[rows], 1)
    assert np.mean(self_hits[:, 0] == rows) >= 0.99


@pytest.mark.parametrize("storage", KINDS)
def test_save_load_and_mmap_answer_alike_and_keep_the_kind(tmp_path, storage: str) -> None:
    x = family.member("tree-b4", 3000, 32)
    q = family.near(x, np.arange(0, 3000, 30))
    index = _build(x, storage)
    D, I = index.search(q, 10)
    index.save(tmp_path / "ix")
    for kw in ({}, {"mmap": True}, {"mmap": True, "verify": False}):
        loaded = pi.read_index(tmp_path / "ix", **kw)
        assert loaded.storage == storage
        D2, I2 = loaded.search(q, 10)
        np.testing.assert_array_equal(I2, I)
        np.testing.assert_array_equal(D2, D)
    mapped = pi.read_index(tmp_path / "ix", mmap=True)
    assert mapped.mapped
    mapped.add(x[:10] * 0.5)  # a write copies the mapped arrays; the codes follow
    assert mapped.search(x[:10] * 0.5, 1)[1][:, 0].tolist() == list(range(3000, 3010))


def _code_rows_at(path: Path) -> tuple[bytearray, int, int]:
    """(bytes, offset of the code rows, bytes per row) of a version-3 vectors file."""
    data = bytearray(path.read_bytes())
    (header,) = struct.unpack_from("<I", data, 12)
    dim, _c, n, _hw, _kind, row = struct.unpack_from("<QdQqII", data, 16)
    vectors_at = header + 9 * n + (-(header + 9 * n)) % 8
    return data, vectors_at + 4 * n * dim + 4 * n, row


@pytest.mark.parametrize("storage", KINDS)
def test_a_code_row_that_disagrees_with_its_coordinates_is_refused(tmp_path, storage: str) -> None:
    index = _build(family.member("gauss-s0.15", 500, 16), storage)
    index.save(tmp_path / "ix")
    path = next((tmp_path / "ix").glob("vectors-*.bin"))
    data, codes_at, row = _code_rows_at(path)
    data[codes_at + 37 * row + row - 1] ^= 0x10  # the last coordinate of slot 37
    path.write_bytes(bytes(data))
    refresh_checksums(path)  # as an attacker would: the checksums agree
    opened = pi.read_index(tmp_path / "ix", mmap=True, verify=False)
    opened.search(np.zeros((1, 16), np.float32) + 0.01, 5)  # a walk on it runs
    with pytest.raises(pi.IndexFormatError, match="stored code of slot 37"):
        opened.verify()
    # A full load codes the coordinates again: the file's rows are not trusted.
    np.testing.assert_array_equal(
        pi.read_index(tmp_path / "ix").search(index.reconstruct_batch([5]), 1)[1], [[5]]
    )


def test_a_vectors_file_whose_code_kind_disagrees_is_refused(tmp_path) -> None:
    index = _build(family.member("gauss-s0.15", 200, 16), "sq8")
    index.save(tmp_path / "ix")
    path = next((tmp_path / "ix").glob("vectors-*.bin"))
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, 48, 1)  # says f16 with sq8-sized rows
    path.write_bytes(bytes(data))
    refresh_checksums(path)
    with pytest.raises(pi.IndexFormatError, match="do not fit the f16 kind"):
        pi.read_index(tmp_path / "ix")
    struct.pack_into("<I", data, 48, 9)
    path.write_bytes(bytes(data))
    refresh_checksums(path)
    with pytest.raises(pi.IndexFormatError, match="unknown code kind 9"):
        pi.read_index(tmp_path / "ix")


@pytest.mark.parametrize("storage", KINDS)
def test_removals_and_slot_reuse_on_codes(storage: str) -> None:
    x = family.member("clusters", 2400, 32)
    base, fresh = x[:2000], x[2000:]
    index = _build(base, storage)
    gone = np.arange(0, 2000, 4)
    assert index.remove_ids(gone) == len(gone)
    index.add_with_ids(fresh, np.arange(5000, 5400))  # into released slots
    stored = np.concatenate([np.delete(base, gone, axis=0), fresh])
    ids = np.concatenate([np.delete(np.arange(2000), gone), np.arange(5000, 5400)])
    q = family.near(stored, np.arange(0, len(stored), 9))
    _, truth = brute_force(stored, q, 10)
    _, I = index.search(q, 10)
    assert not np.isin(I, gone).any()
    assert recall(I, ids[truth]) >= 0.95
    assert index.check_integrity()["unreachable"] == 0


@pytest.mark.parametrize("storage", KINDS)
def test_filters_and_the_fused_search_on_codes(storage: str) -> None:
    x = family.member("hierarchy", 2000, 16)
    now = np.datetime64(NOW.replace(tzinfo=None), "us")  # naive times are UTC
    t = now - (np.arange(2000) * 3).astype("timedelta64[h]")
    index = pi.PoincareIndex(16, seed=0, num_threads=1, storage=storage)
    index.add(x, t=t, metadata={"even": [i % 2 == 0 for i in range(2000)]})
    q = family.near(x, np.arange(0, 2000, 40))
    allowed = np.arange(2000) % 2 == 0
    _, truth = brute_force(x[allowed], q, 10)
    D, I = index.search(q, 10, filters={"even": True})
    assert recall(I, np.flatnonzero(allowed)[truth]) >= 0.95
    decay = pi.HalfLife(hours=24 * 30)
    ages_h = (now - t).astype("timedelta64[us]").astype(np.float64) / 3.6e9
    log_w = -np.log(2.0) * ages_h / (24 * 30)
    ref_s, ref_i = fused_brute_force(x, q, 10, log_w)
    got = index.search_scored(q, 10, decay=decay, at_time=NOW, ef=128)
    assert recall(got.ids, ref_i) >= 0.95
    hit = got.ids == ref_i
    np.testing.assert_allclose(got.scores[hit], ref_s[hit], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kind", ["hnsw", "flat"])
def test_version_2_files_load_as_f32_with_their_results(kind: str) -> None:
    """Written by the build before codes (tests/data/format_v2: 500 points at log-uniform depths,
    16-d, ids 3i + 7, five removed); it recorded its results there."""
    loaded = pi.read_index(V2 / kind)
    assert getattr(loaded, "storage", "f32") == "f32"
    q = np.load(V2 / "queries.npy")
    D, I = loaded.search(q, 10, 64) if kind == "hnsw" else loaded.search(q, 10)
    np.testing.assert_array_equal(I, np.load(V2 / f"expected_{kind}_I.npy"))
    np.testing.assert_array_equal(D, np.load(V2 / f"expected_{kind}_D.npy"))
    mapped = pi.read_index(V2 / kind, mmap=True)
    np.testing.assert_array_equal(mapped.search(q, 10)[1], loaded.search(q, 10)[1])


def test_the_factory_builds_compressed_indexes() -> None:
    assert pi.index_factory(32, "HNSW16,SQ8").storage == "sq8"
    assert pi.index_factory(32, "HNSW16,SQfp16").storage == "f16"
    assert pi.index_factory(32, "HNSW16").storage == "f32"
    with pytest.raises(ValueError, match="Flat"):
        pi.index_factory(32, "Flat,SQ8")


@pytest.mark.parametrize("storage", KINDS)
def test_set_storage_codes_a_built_index_as_a_build_of_that_kind(tmp_path, storage: str) -> None:
    x = family.member("gauss-s0.3", 2000, 32)
    q = family.near(x, np.arange(0, 2000, 20))
    built = _build(x, storage)
    converted = _build(x, "f32")
    converted.save(tmp_path / "f32")
    reopened = pi.read_index(tmp_path / "f32", mmap=True)
    for index in (converted, reopened):
        index.set_storage(storage)
        assert index.storage == storage
        for a, b in zip(index.search(q, 10), built.search(q, 10)):
            np.testing.assert_array_equal(a, b)
    reopened.save(tmp_path / "coded")
    assert pi.read_index(tmp_path / "coded").storage == storage
    reopened.set_storage("f32")
    assert "codes" not in reopened.memory_usage()
    with pytest.raises(ValueError, match="storage must be one of"):
        reopened.set_storage("q4")


def test_every_kind_gets_the_graph_of_the_float32_build() -> None:
    """Construction and the repairs (whose probes search) read the float32 coordinates whatever
    the storage: through adds, removals, slot reuse and repairs, the f16 and sq8 graphs are the
    f32 graph, link for link."""
    x = family.member("uniform_radius", 2600, 16)
    graphs = []
    for storage in ("f32", *KINDS):
        index = _build(x[:2000], storage)
        index.remove_ids(np.arange(0, 2000, 3))
        index.add_with_ids(x[2000:], np.arange(9000, 9600))
        live = [i for i in range(2000) if i % 3] + list(range(9000, 9600))
        assert index.ntotal == len(live)
        graphs.append([index._core.neighbors(i, 0) for i in live])
    assert graphs[1] == graphs[0]
    assert graphs[2] == graphs[0]


def test_a_refused_set_storage_changes_nothing() -> None:
    index = pi.PoincareIndex(70_000, M=4, ef_construction=8)
    x = np.zeros((2, 70_000), np.float32)
    x[0, 0], x[1, 1] = 0.5, 0.25
    index.add(x)
    with pytest.raises(ValueError, match="sq8 storage codes at most 65536 dimensions"):
        index.set_storage("sq8")
    assert index.storage == "f32" and "codes" not in index.memory_usage()
    assert index.search(x[:1], 1)[1][0, 0] == 0
    with pytest.raises(ValueError, match="sq8 storage codes at most"):
        pi.PoincareIndex(70_000, storage="sq8")
