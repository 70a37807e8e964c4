"""load(mmap=True): the big arrays stay in the saved files; a fast open (verify=False) checks
the small parts and the per-block checksum table only, verify() the rest; writes verify first
and never touch the files."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

import poincare_index as pi
from poincare_index.datasets import boundary_tree

BLOCK = 1 << 20
V1 = Path(__file__).parent / "data" / "format_v1"


def _saved(tmp_path: Path, kind=pi.PoincareIndex, n: int = 4000) -> tuple[Path, np.ndarray, np.ndarray]:
    x = boundary_tree(n, 16, seed=1).points
    index = kind(16, M=8) if kind is pi.PoincareIndex else kind(16)
    index.add(x)
    index.save(tmp_path / "ix")
    return tmp_path / "ix", x, boundary_tree(n + 200, 16, seed=2).points[:100]


def _digests(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def refresh_checksums(path: Path) -> None:
    """Recomputes every checksum of a binary file as an attacker would: each block's CRC, the
    table's own, the trailer's (and the manifest's entry for the file)."""
    data = bytearray(path.read_bytes())
    end = len(data) - 8
    n_blocks = struct.unpack_from("<Q", data, end - 12)[0]
    covered = end - 20 - 4 * n_blocks
    for b in range(n_blocks):
        crc = zlib.crc32(bytes(data[b * BLOCK : min(covered, (b + 1) * BLOCK)]))
        struct.pack_into("<I", data, covered + 4 * b, crc)
    struct.pack_into("<I", data, end - 4, zlib.crc32(bytes(data[covered : end - 4])))
    struct.pack_into("<I", data, end, zlib.crc32(bytes(data[:end])))
    path.write_bytes(bytes(data))
    from fuzz.mutators import _fix_size_in_manifest

    _fix_size_in_manifest(path)


@pytest.mark.parametrize("kind", [pi.PoincareIndex, pi.PoincareFlatIndex])
@pytest.mark.parametrize("verify", [True, False])
def test_a_mapped_index_answers_as_a_loaded_one(tmp_path, kind, verify):
    root, x, q = _saved(tmp_path, kind)
    full = kind.load(root)
    mapped = kind.load(root, mmap=True, verify=verify)
    assert not full.mapped and full.verified
    assert mapped.mapped and mapped.verified == verify
    for index in (full, mapped):
        if kind is pi.PoincareIndex:
            index.ef_search = 48
    D, I = full.search(q, 10)
    D2, I2 = mapped.search(q, 10)
    np.testing.assert_array_equal(I2, I)
    np.testing.assert_array_equal(D2, D)
    np.testing.assert_array_equal(mapped.reconstruct_batch([0, 17, 3999]), x[[0, 17, 3999]])
    mapped.verify()
    assert mapped.verified
    if kind is pi.PoincareIndex:
        assert mapped.check_integrity() == full.check_integrity()


def test_writes_verify_first_copy_what_they_change_and_leave_the_files_alone(tmp_path):
    root, x, q = _saved(tmp_path)
    before = _digests(root)
    index = pi.PoincareIndex.load(root, mmap=True, verify=False)
    assert index.remove_ids([3, 4]) == 2  # verifies, then writes flags (in memory)
    assert index.verified and index.mapped  # nothing grew: the arrays are still the files'
    index.add(x[:50] * 0.99)  # grows every array: they are copied into memory
    assert not index.mapped and index.ntotal == 4048
    assert index.check_integrity()["unreachable"] == 0
    assert _digests(root) == before
    # The same writes on a full load give the same graph and answers.
    reference = pi.PoincareIndex.load(root)
    reference.remove_ids([3, 4])
    reference.add(x[:50] * 0.99)
    np.testing.assert_array_equal(index.search(q, 10)[1], reference.search(q, 10)[1])


def _vectors_file(root: Path) -> Path:
    return next(root.glob("vectors-*.bin"))


@pytest.mark.slow
def test_the_streamed_files_carry_the_checksums_an_independent_reader_computes(tmp_path):
    # 30k points: each binary file spans several 1 MiB blocks, written one block at a time.
    x = boundary_tree(30_000, 16, seed=4).points
    index = pi.PoincareIndex(16, M=8)
    index.add(x)
    index.remove_ids(np.arange(0, 30_000, 101))
    index.save(tmp_path / "ix")
    for path in sorted((tmp_path / "ix").glob("*.bin")):
        written = path.read_bytes()
        assert len(written) > 2 * BLOCK
        refresh_checksums(path)  # zlib's CRCs of every block, the table and the whole file
        assert path.read_bytes() == written, path.name


def test_a_damaged_block_is_found_by_verify_and_refused_by_a_write(tmp_path):
    root, x, _ = _saved(tmp_path, n=20000)  # vectors past the first 1 MiB block
    path = _vectors_file(root)
    data = bytearray(path.read_bytes())
    at = len(data) - 8 - 20 - 4 * 2 - 5000  # inside the coordinates, in the second block
    data[at] ^= 0x40
    path.write_bytes(bytes(data))  # no checksum recomputed: a bit flipped on disk
    with pytest.raises(pi.IndexFormatError, match="checksum mismatch"):
        pi.PoincareIndex.load(root)  # a full load checks the trailer
    index = pi.PoincareIndex.load(root, mmap=True, verify=False)  # the block is not read
    with pytest.raises(pi.IndexFormatError, match=r"checksum mismatch in bytes \[1048576"):
        index.verify()
    with pytest.raises(pi.IndexFormatError, match="checksum mismatch"):
        index.add(x[:1] * 0.9)
    with pytest.raises(pi.IndexFormatError, match="checksum mismatch"):
        pi.PoincareIndex.load(root, mmap=True)  # verify=True is the default


def test_a_damaged_header_is_refused_by_the_fast_open_itself(tmp_path):
    root, _, _ = _saved(tmp_path)
    path = _vectors_file(root)
    data = bytearray(path.read_bytes())
    data[24] ^= 0x01  # the curvature, in the header block
    path.write_bytes(bytes(data))
    with pytest.raises(pi.IndexFormatError, match="checksum mismatch in bytes \\[0,"):
        pi.PoincareIndex.load(root, mmap=True, verify=False)


CRAFTED_SEARCH = """
import numpy as np, poincare_index as pi
index = pi.read_index({root!r}, mmap=True, verify=False)
q = np.full((20, 16), 0.01, dtype=np.float32)
index.search(q, 10)
index.search_scored(q, 5)
index.range_search(q, 0.5)
try:
    index.verify()
except pi.IndexFormatError as exc:
    print("REFUSED", exc)
"""


CRAFTS = ["link out of range", "count past the list", "relocation head", "nan vector", "nan vector, flat"]


@pytest.mark.parametrize("craft", CRAFTS)
def test_a_crafted_file_cannot_crash_a_fast_opened_search_and_verify_refuses_it(tmp_path, craft):
    root, _, _ = _saved(tmp_path, pi.PoincareFlatIndex if craft.endswith("flat") else pi.PoincareIndex)
    if craft.startswith("nan vector"):
        path = _vectors_file(root)
        data = bytearray(path.read_bytes())
        (header,) = struct.unpack_from("<I", data, 12)
        n = 4000
        vectors_at = header + 8 * n + n + (-(header + 9 * n)) % 8
        for i in range(0, 16 * n, 7):
            struct.pack_into("<f", data, vectors_at + 4 * i, float("nan"))
    else:
        path = next(root.glob("graph-*.bin"))
        data = bytearray(path.read_bytes())
        (header,) = struct.unpack_from("<I", data, 12)
        n = struct.unpack_from("<Q", data, 40)[0]
        level0_at = header + n + (-(header + n)) % 4
        stride = 4 * (1 + 2 * 8)
        for node in range(0, n, 3):
            at = level0_at + node * stride
            if craft == "link out of range":
                struct.pack_into("<I", data, at + 4, 0x7FFFFFF0)
            elif craft == "count past the list":
                struct.pack_into("<I", data, at, 0x7FFFFFFF)
            else:
                struct.pack_into("<I", data, at, 0x80000000 | 0x7FFFFFFF)
    path.write_bytes(bytes(data))
    refresh_checksums(path)
    code = textwrap.dedent(CRAFTED_SEARCH.format(root=str(root)))
    # Outside the checkout, whose sources would shadow the installed package.
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "REFUSED" in done.stdout
    # The refusal names the file the damage is in.
    assert ("vectors-" if craft.startswith("nan vector") else "graph-") in done.stdout


def test_version_1_files_are_read_in_full_when_mapping_is_asked_for():
    index = pi.PoincareIndex.load(V1 / "index", mmap=True, verify=False)
    assert not index.mapped and index.verified


def test_the_flags_are_checked():
    with pytest.raises(TypeError, match="mmap"):
        pi.read_index(V1 / "index", mmap="yes")
    with pytest.raises(TypeError, match="verify"):
        pi.read_index(V1 / "index", mmap=True, verify=1)
