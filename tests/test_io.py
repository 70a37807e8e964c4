"""Saved indexes: identical results after load, atomic replacement, refusal of bad files."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import poincare_index as pi
from poincare_index.io import MANIFEST

INDEXES = [pi.PoincareIndex, pi.PoincareFlatIndex]


@pytest.fixture(params=INDEXES)
def built(request, tree_data):
    base, queries = tree_data
    index = request.param(16)
    index.add(base[:2000])
    index.add_with_ids(base[2000:2100], np.arange(5000, 5100))
    index.remove_ids(np.arange(0, 100, 3))
    if isinstance(index, pi.PoincareIndex):
        index.ef_search = 48
    return index, queries


def test_save_load_identical(built, tmp_path):
    index, queries = built
    before = index.search(queries, 10)
    path = tmp_path / "idx"
    index.save(path)
    loaded = type(index).load(path)
    after = loaded.search(queries, 10)
    np.testing.assert_array_equal(before[0], after[0])  # bit-identical distances
    np.testing.assert_array_equal(before[1], after[1])
    assert loaded.ntotal == index.ntotal and loaded.dim == 16
    assert 3 not in loaded and 5050 in loaded
    if isinstance(index, pi.PoincareIndex):
        assert loaded.ef_search == 48 and loaded.check_integrity()["unreachable"] == 0
    # Growing after load continues exactly as the original would (levels depend on seed, slot;
    # one thread, so the insertion order is fixed too).
    index.num_threads = loaded.num_threads = 1
    extra = queries[:5] * np.float32(0.5)
    index.add(extra)
    loaded.add(extra)
    np.testing.assert_array_equal(index.search(queries, 10)[1], loaded.search(queries, 10)[1])
    # read_index finds the right class
    assert type(pi.read_index(path)) is type(index)


def test_load_as_wrong_class(built, tmp_path):
    index, _ = built
    index.save(tmp_path / "i")
    other = pi.PoincareFlatIndex if isinstance(index, pi.PoincareIndex) else pi.PoincareIndex
    with pytest.raises(pi.IndexFormatError, match="use read_index"):
        other.load(tmp_path / "i")


def test_overwrite_is_atomic_and_cleans_up(built, tmp_path):
    index, queries = built
    path = tmp_path / "idx"
    pi.write_index(index, path)
    index.add(queries[:3] * np.float32(0.9))
    pi.write_index(index, path)
    names = sorted(p.name for p in path.iterdir())
    assert len(names) == (4 if isinstance(index, pi.PoincareIndex) else 3), names  # + columns
    assert pi.read_index(path).ntotal == index.ntotal
    # a non-index directory is never overwritten
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        index.save(tmp_path / "mine")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(FileExistsError):
        index.save(tmp_path / "afile")


def data_files(path):
    return sorted(p for p in path.iterdir() if p.suffix == ".bin")


def test_corrupted_files_are_refused(built, tmp_path):
    index, _ = built
    path = tmp_path / "idx"
    index.save(path)
    pristine = {p: p.read_bytes() for p in path.iterdir()}

    def restore():
        for p, data in pristine.items():
            p.write_bytes(data)

    for target in data_files(path):
        data = pristine[target]
        # one flipped bit anywhere: header, payload or trailer
        for offset in (0, 9, 40, len(data) // 2, len(data) - 6, len(data) - 1):
            bad = bytearray(data)
            bad[offset] ^= 0x10
            target.write_bytes(bytes(bad))
            with pytest.raises(pi.IndexFormatError):
                pi.read_index(path)
            restore()
        # truncation (also with the manifest's size updated, so the core's checks are reached)
        for keep in (0, 7, 20, len(data) // 3, len(data) - 1):
            target.write_bytes(data[:keep])
            with pytest.raises(pi.IndexFormatError):
                pi.read_index(path)
            manifest = json.loads((path / MANIFEST).read_text())
            role = "vectors" if target.name.startswith("vectors") else "graph"
            manifest["files"][role]["size"] = keep
            body = {k: v for k, v in manifest.items() if k != "checksum"}
            from poincare_index._durable import json_checksum

            manifest["checksum"] = json_checksum(body)
            (path / MANIFEST).write_text(json.dumps(manifest))
            with pytest.raises(pi.IndexFormatError):
                pi.read_index(path)
            restore()
    assert pi.read_index(path).ntotal == index.ntotal


def test_manifest_problems(built, tmp_path):
    index, _ = built
    path = tmp_path / "idx"
    index.save(path)
    mpath = path / MANIFEST
    good = mpath.read_text()
    for text, pattern in [
        ("{not json", "is not JSON"),
        ('{"format": "other"}', "not a poincare_index manifest"),
        (good.replace('"format_version": 2', '"format_version": 99'), "version 99"),
        (good.replace('"ntotal": ', '"ntotal": 1'), "checksum mismatch"),
    ]:
        mpath.write_text(text)
        with pytest.raises(pi.IndexFormatError, match=pattern):
            pi.read_index(path)
    mpath.write_text(good)
    for f in data_files(path):
        f.unlink()
        break
    with pytest.raises(pi.IndexFormatError, match="missing"):
        pi.read_index(path)


def test_foreign_paths(tmp_path):
    with pytest.raises(FileNotFoundError):
        pi.read_index(tmp_path / "nothing")
    (tmp_path / "file.bin").write_bytes(os.urandom(100))
    with pytest.raises(pi.IndexFormatError, match="directory"):
        pi.read_index(tmp_path / "file.bin")
    (tmp_path / "empty").mkdir()
    with pytest.raises(pi.IndexFormatError, match="no manifest"):
        pi.read_index(tmp_path / "empty")


def test_foreign_data_file_with_valid_manifest(built, tmp_path):
    index, _ = built
    path = tmp_path / "idx"
    index.save(path)
    for f in data_files(path):
        f.write_bytes(os.urandom(f.stat().st_size))  # same size, random content
    with pytest.raises(pi.IndexFormatError, match="magic"):
        pi.read_index(path)


def test_empty_index_roundtrip(tmp_path):
    for cls in INDEXES:
        index = cls(3)
        index.save(tmp_path / cls.__name__)
        loaded = cls.load(tmp_path / cls.__name__)
        assert loaded.ntotal == 0
        loaded.add(np.array([[0.1, 0.2, 0.3]], dtype=np.float32))
        assert loaded.search(np.zeros((1, 3)), 1)[1][0, 0] == 0


def test_a_save_after_a_failed_first_save_to_a_new_path_succeeds(tmp_path, monkeypatch):
    """A first save killed before its manifest left data files behind, and the next save raised
    FileExistsError. Such leftovers are the save's own files: the next save finishes the job and
    removes them; a directory holding anything else is still refused."""
    index = pi.PoincareIndex(4)
    index.add(np.full((5, 4), 0.1, dtype=np.float32))
    target = tmp_path / "new"
    import poincare_index._durable as durable

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(durable.os, "replace", killed)  # dies at the manifest's rename
    with pytest.raises(KeyboardInterrupt):
        index.save(target)
    monkeypatch.undo()
    assert any(target.iterdir()) and not (target / "manifest.json").exists()
    index.save(target)
    assert pi.read_index(target).ntotal == 5
    assert sorted(p.name.split("-")[0] for p in target.iterdir()) == [
        "columns",
        "graph",
        "manifest.json",
        "vectors",
    ]
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        index.save(other)
