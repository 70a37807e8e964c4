"""A save never replaces a good save with a worse one: not with a closed index, not with an
unchecked one (a fast open whose files fail verify), not when it fails midway (faults injected
at each step: the old save stays loadable and the next save tidies up), and not when two threads
or processes save to one directory at once (they run one after the other, each complete)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from test_closed import in_threads

import poincare_index as pi
from poincare_index import _interrupts
from poincare_index._closing import ClosedError
from poincare_index.columns import ColumnStore

WRITE_STEPS = ("write_index:data", "write_index:manifest", "write_index:cleanup")


def _points(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return pi.expmap0(rng.normal(size=(n, dim)) * 0.3).astype(np.float32)


def _make(kind: str, n: int = 300, seed: int = 0, dim: int = 8):
    index = pi.PoincareIndex(dim, M=8, ef_construction=32, num_threads=1) if kind == "hnsw" else (
        pi.PoincareFlatIndex(dim, num_threads=1))  # fmt: skip
    index.add(_points(n, dim, seed), t=np.datetime64("2026-01-01", "us"), metadata={"n": np.arange(n)})
    return index


def _snapshot(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def _same_points(a, b) -> None:
    assert a.ntotal == b.ntotal
    ids = a.columns.column("id").to_numpy()
    np.testing.assert_array_equal(a.reconstruct_batch(ids), b.reconstruct_batch(ids))
    assert a.columns.equals(b.columns)


def _saved_files(path: Path) -> list[str]:
    """The directory's entries by kind: a whole save holds its manifest and one file per role."""
    return sorted(p.name.split("-")[0].split(".")[0] for p in path.iterdir())


@pytest.fixture
def fault():
    def install(step: str, error: type[BaseException] = OSError) -> None:
        def hook(at: str) -> None:
            if at == step:
                raise error(f"injected at {step}")

        _interrupts.set_fault_hook(hook)

    yield install
    _interrupts.set_fault_hook(None)


@pytest.mark.parametrize("kind", ["hnsw", "flat"])
def test_saving_a_closed_index_changes_nothing_on_disk(tmp_path, kind):
    index = _make(kind)
    index.save(tmp_path / "a")
    before = _snapshot(tmp_path / "a")
    index.close()
    with pytest.raises(ClosedError, match=r"\.save: this index is closed"):
        index.save(tmp_path / "a")
    with pytest.raises(ClosedError, match="write_index: this .* is closed"):
        pi.write_index(index, tmp_path / "a")
    with pytest.raises(ClosedError):
        pi.write_index(index, tmp_path / "new")
    assert _snapshot(tmp_path / "a") == before and not (tmp_path / "new").exists()
    _same_points(pi.read_index(tmp_path / "a"), _make(kind))


@pytest.mark.parametrize("kind", ["hnsw", "flat"])
@pytest.mark.parametrize("step", WRITE_STEPS)
@pytest.mark.parametrize("error", [OSError, KeyboardInterrupt])
def test_a_save_cut_off_at_any_step_leaves_a_loadable_save(tmp_path, fault, kind, step, error):
    old, new = _make(kind, 300, seed=0), _make(kind, 400, seed=1)
    old.save(tmp_path / "a")
    fault(step, error)
    with pytest.raises(error, match="injected"):
        new.save(tmp_path / "a")
    _interrupts.set_fault_hook(None)
    loaded = pi.read_index(tmp_path / "a")
    # Before the manifest is replaced the old save stands; after it, the new one does.
    _same_points(loaded, old if step != "write_index:cleanup" else new)
    new.save(tmp_path / "a")  # the next save finishes the job: no file of the cut-off one stays
    _same_points(pi.read_index(tmp_path / "a"), new)
    roles = ["columns", "manifest", "vectors"] + (["graph"] if kind == "hnsw" else [])
    assert _saved_files(tmp_path / "a") == sorted(roles)


def test_a_columns_file_that_fails_to_write_leaves_the_old_save(tmp_path, monkeypatch):
    old, new = _make("hnsw", 300), _make("hnsw", 400, seed=1)
    old.save(tmp_path / "a")
    real = ColumnStore.write

    def disk_full(self, path):
        real(self, path)
        with open(path, "r+b") as f:  # half of it made it to disk
            f.truncate(path.stat().st_size // 2)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ColumnStore, "write", disk_full)
    with pytest.raises(OSError, match="No space"):
        new.save(tmp_path / "a")
    monkeypatch.undo()
    _same_points(pi.read_index(tmp_path / "a"), old)


def test_an_unchecked_fast_open_is_verified_before_it_can_replace_a_good_save(tmp_path):
    good = _make("flat", 20_000, dim=16)  # vectors past the first 1 MiB block (a fast open checks that)
    good.save(tmp_path / "good")
    shutil.copytree(tmp_path / "good", tmp_path / "damaged")
    vectors = next((tmp_path / "damaged").glob("vectors-*.bin"))
    raw = bytearray(vectors.read_bytes())
    assert len(raw) > (1 << 20) + 100_000
    raw[(1 << 20) + 50_000] ^= 0x01  # one low bit of a coordinate: a point still inside the ball
    vectors.write_bytes(bytes(raw))
    before = _snapshot(tmp_path / "good")
    fast = pi.read_index(tmp_path / "damaged", mmap=True, verify=False)
    assert not fast.verified
    with pytest.raises(pi.IndexFormatError, match="vectors"):
        fast.save(tmp_path / "good")  # its fresh checksums would have hidden the damage
    assert _snapshot(tmp_path / "good") == before
    _same_points(pi.read_index(tmp_path / "good"), good)
    # an undamaged fast open saves as usual (verified on the way)
    fine = pi.read_index(tmp_path / "good", mmap=True, verify=False)
    fine.save(tmp_path / "copy")
    assert fine.verified
    _same_points(pi.read_index(tmp_path / "copy"), good)


@pytest.mark.parametrize("same_index", [True, False])
def test_two_threads_saving_to_one_directory_take_turns(tmp_path, same_index):
    # Before the lock: one save deleted the other's new data files (as leftovers) and that one
    # failed with a bare FileNotFoundError or wrote a manifest naming missing files.
    indexes = (
        [_make("hnsw", 2000, seed=0)] * 2 if same_index else [_make("hnsw", 2000, seed=s) for s in (0, 1)]
    )
    start = threading.Barrier(2)

    def save(index) -> None:
        start.wait()
        for _ in range(8):
            index.save(tmp_path / "a")

    errors = in_threads([lambda ix=ix: save(ix) for ix in indexes])(120)
    assert not errors, errors
    loaded = pi.read_index(tmp_path / "a")
    assert loaded.ntotal == 2000
    assert any(np.array_equal(loaded.reconstruct(7), ix.reconstruct(7)) for ix in indexes)
    assert _saved_files(tmp_path / "a") == ["columns", "graph", "manifest", "vectors"]


def test_loads_during_saves_always_read_a_whole_save(tmp_path):
    a, b = _make("flat", 1000, seed=0), _make("flat", 1000, seed=1)
    a.save(tmp_path / "a")
    stop = threading.Event()

    def keep_saving() -> None:
        while not stop.is_set():
            for ix in (b, a):
                ix.save(tmp_path / "a")

    join = in_threads([keep_saving])
    try:
        for _ in range(30):
            loaded = pi.read_index(tmp_path / "a", mmap=True)
            assert loaded.ntotal == 1000
    finally:
        stop.set()
        errors = join(60)
    assert not errors, errors


# A child process builds its own index and saves it again and again: the installed package only
# (run from an empty folder, so a checkout's unbuilt source is not what it imports).
_SAVER = """
import sys
import numpy as np
import poincare_index as pi
path, seed, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x = pi.expmap0(np.random.default_rng(seed).normal(size=(1500, 8)) * 0.3).astype(np.float32)
index = pi.PoincareIndex(8, M=8, ef_construction=32, num_threads=1)
index.add(x, t=np.datetime64("2026-01-01", "us"), metadata={"n": np.arange(1500)})
for _ in range(rounds):
    index.save(path)
"""


def test_two_processes_saving_to_one_directory_take_turns(tmp_path):
    work = tmp_path / "cwd"
    work.mkdir()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _SAVER, str(tmp_path / "a"), str(seed), "6"],
            cwd=work,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for seed in (0, 1)
    ]
    for child in children:
        child.wait(180)
    assert [c.returncode for c in children] == [0, 0], [c.stderr.read()[-2000:] for c in children]
    loaded = pi.read_index(tmp_path / "a")
    assert loaded.ntotal == 1500
    assert any(np.array_equal(loaded.reconstruct(3), _points(1500, 8, s)[3]) for s in (0, 1))
    assert _saved_files(tmp_path / "a") == ["columns", "graph", "manifest", "vectors"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_a_directory_that_only_allows_lookups_still_loads(tmp_path):
    _make("flat", 50).save(tmp_path / "a")
    os.chmod(tmp_path / "a", 0o111)  # no listing, no lock: the files are still found
    try:
        assert pi.read_index(tmp_path / "a").ntotal == 50
    finally:
        os.chmod(tmp_path / "a", 0o755)
