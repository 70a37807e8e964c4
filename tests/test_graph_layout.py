"""Level-0 lists hold 2M links in place; the repair relocates the few that need more. Files of
format version 1 (4 repair slots reserved in every list) still load, converted; crafted
relocation heads are refused."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

import poincare_index as pi
from poincare_index.datasets import boundary_tree

V1 = Path(__file__).parent / "data" / "format_v1"
REPAIR_SLOTS = 4


def _boundary_index(n: int = 3000, M: int = 8) -> tuple[pi.PoincareIndex, np.ndarray]:
    x = boundary_tree(n, 16, seed=1).points
    index = pi.PoincareIndex(16, M=M, num_threads=1)
    index.add(x)
    return index, x


def _level0(index: pi.PoincareIndex, first_part: bool = False) -> list[list[int]]:
    return [list(index._core.neighbors(i, 0, first_part=first_part)) for i in range(index.ntotal)]


def test_boundary_crowds_relocate_a_few_lists_to_take_repair_links():
    index, x = _boundary_index()
    stats = index.check_integrity()
    assert stats["unreachable"] == 0
    lists = _level0(index)
    over = sum(len(lst) > 2 * 8 for lst in lists)
    # Lists over 2M exist, each relocated; none exceeds 2M plus the repair slots.
    assert over > 0 and stats["relocated_lists"] >= over
    assert stats["relocated_lists"] < 0.02 * index.ntotal
    assert max(len(lst) for lst in lists) <= 2 * 8 + REPAIR_SLOTS


def test_relocated_lists_survive_a_round_trip(tmp_path):
    index, x = _boundary_index()
    q = boundary_tree(3100, 16, seed=2).points[:50]
    index.ef_search = 48
    D, I = index.search(q, 10)
    index.save(tmp_path / "ix")
    loaded = pi.PoincareIndex.load(tmp_path / "ix")
    loaded.ef_search = 48
    assert loaded.check_integrity() == index.check_integrity()
    assert _level0(loaded) == _level0(index)
    D2, I2 = loaded.search(q, 10)
    np.testing.assert_array_equal(I2, I)
    np.testing.assert_array_equal(D2, D)
    # Adds after loading keep the relocated lists working (re-selection, repair).
    extra = boundary_tree(600, 16, seed=3).points
    loaded.add(extra)
    assert loaded.check_integrity()["unreachable"] == 0


def test_each_first_part_is_a_prefix_of_its_list_and_survives_a_round_trip(tmp_path):
    index, _ = _boundary_index()
    lists, firsts = _level0(index), _level0(index, first_part=True)
    assert all(f == lst[: len(f)] for f, lst in zip(firsts, lists))
    # The heuristic passes candidates over on these crowds: many lists end in a refill.
    assert sum(len(f) < len(lst) for f, lst in zip(firsts, lists)) > 0.1 * index.ntotal
    assert all(len(f) > 0 for f in firsts)
    index.save(tmp_path / "ix")
    assert _level0(pi.PoincareIndex.load(tmp_path / "ix"), first_part=True) == firsts
    assert index._core.neighbors(0, 99, first_part=True) == []


def test_a_version_1_file_loads_with_every_link_and_result_of_the_build_that_wrote_it():
    # Written by the build before this layout (tests/data/format_v1: 600 boundary-tree points,
    # M=4, ids 3i + 7, five removed); it recorded its level-0 lists and results there.
    loaded = pi.PoincareIndex.load(V1 / "index")
    counts = np.load(V1 / "neighbor_counts.npy")
    flat = np.load(V1 / "neighbors.npy")
    assert counts.max() > 2 * 4  # the file holds lists that used the reserved repair slots
    ids = np.arange(600, dtype=np.int64)[5:] * 3 + 7
    at = 0
    for node_id, c in zip(ids, counts):
        assert list(loaded._core.neighbors(int(node_id), 0)) == flat[at : at + c].tolist()
        at += c
    assert loaded.check_integrity()["relocated_lists"] >= int((counts > 8).sum())
    # The file recorded no refill: every list is all first part.
    core = loaded._core
    assert all(core.neighbors(int(i), 0, first_part=True) == core.neighbors(int(i), 0) for i in ids)
    loaded.ef_search = 64
    D, I = loaded.search(np.load(V1 / "queries.npy"), 10)
    np.testing.assert_array_equal(I, np.load(V1 / "expected_I.npy"))
    np.testing.assert_array_equal(D, np.load(V1 / "expected_D.npy"))


# ---- crafted relocation heads ---------------------------------------------------------------


def _graph_layout(path: Path) -> tuple[bytearray, int, int, int, int]:
    """(bytes, n, n_relocated, offset of level-0 lists, offset of relocated lists) of a v2 file."""
    data = bytearray(path.read_bytes())
    (header_bytes,) = struct.unpack_from("<I", data, 12)
    M, _efc, _seed, _top, _entry, n, n_relocated = struct.unpack_from("<IIQiIQQ", data, 16)
    level0_at = header_bytes + n + (-(header_bytes + n)) % 4
    return data, n, n_relocated, level0_at, level0_at + n * (1 + 2 * M) * 4


def _rewrite(path: Path, data: bytearray) -> None:
    """Writes the crafted bytes with a recomputed CRC trailer and manifest entry."""
    struct.pack_into("<I", data, len(data) - 8, zlib.crc32(bytes(data[:-8])))
    path.write_bytes(bytes(data))
    from fuzz.mutators import _fix_size_in_manifest

    _fix_size_in_manifest(path)


def _saved(tmp_path: Path) -> tuple[Path, list[int]]:
    index, _ = _boundary_index(n=1500)
    index.save(tmp_path / "ix")
    graph = next((tmp_path / "ix").glob("graph-*.bin"))
    data, n, n_rel, level0_at, _ = _graph_layout(graph)
    stride = 4 * (1 + 2 * 8)
    heads = [i for i in range(n) if struct.unpack_from("<I", data, level0_at + i * stride)[0] & 0x80000000]
    assert len(heads) == n_rel >= 2
    return graph, heads


@pytest.mark.parametrize("crafted", ["missing list", "list named twice", "count past capacity"])
def test_crafted_relocation_heads_are_refused(tmp_path, crafted):
    graph, heads = _saved(tmp_path)
    data, n, n_rel, level0_at, relocated_at = _graph_layout(graph)
    stride = 4 * (1 + 2 * 8)
    if crafted == "missing list":
        struct.pack_into("<I", data, level0_at + heads[0] * stride, 0x80000000 | n_rel)
        message = "missing or taken"
    elif crafted == "list named twice":
        first = struct.unpack_from("<I", data, level0_at + heads[0] * stride)[0]
        struct.pack_into("<I", data, level0_at + heads[1] * stride, first)
        message = "missing or taken"
    else:
        struct.pack_into("<I", data, relocated_at, 2 * 8 + REPAIR_SLOTS + 1)
        message = "too many links"
    _rewrite(graph, data)
    with pytest.raises(pi.IndexFormatError, match=message):
        pi.PoincareIndex.load(tmp_path / "ix")


def test_a_loaded_index_takes_small_adds_as_the_one_it_was_saved_from(tmp_path):
    # The repair's sources are saved (format 2): re-selections after a load keep the links the
    # repair gave, so small adds leave no node unreachable (before: 5-14 nodes until the next
    # full repair, n/64 rows later).
    index, x = _boundary_index(n=5000)
    index.save(tmp_path / "ix")
    loaded = pi.PoincareIndex.load(tmp_path / "ix")
    for target in (index, loaded):
        for i in range(10):
            target.add(x[i : i + 1] * 0.99)
    assert loaded.check_integrity() == index.check_integrity()
    assert loaded.check_integrity()["unreachable"] == 0
    assert _level0(loaded) == _level0(index)


def test_crafted_repair_sources_are_refused(tmp_path):
    from test_mmap import refresh_checksums

    graph, data, n, payload_end = _saved_payload(tmp_path)
    # The last (slot, source) pair ends before the refill starts (2 bytes a node): point its
    # source past the nodes.
    struct.pack_into("<I", data, payload_end - 2 * n - 4, 0x7FFFFFFF)
    graph.write_bytes(bytes(data))
    refresh_checksums(graph)
    with pytest.raises(pi.IndexFormatError, match="invalid repair source"):
        pi.PoincareIndex.load(tmp_path / "ix")


def _saved_payload(tmp_path: Path) -> tuple[Path, bytearray, int, int]:
    """A saved boundary index's graph file: (path, bytes, nodes, where its payload ends)."""
    index, _ = _boundary_index(n=1500)
    index.save(tmp_path / "ix")
    graph = next((tmp_path / "ix").glob("graph-*.bin"))
    data, n, *_ = _graph_layout(graph)
    end = len(data) - 8
    n_blocks = struct.unpack_from("<Q", data, end - 12)[0]
    return graph, data, n, end - 20 - 4 * n_blocks


def test_crafted_refill_starts_are_refused(tmp_path):
    from test_mmap import refresh_checksums

    graph, data, n, payload_end = _saved_payload(tmp_path)
    # The refill starts end the payload (version 4): put node 0's past its list's end.
    struct.pack_into("<H", data, payload_end - 2 * n, 2 * 8 + 1)
    graph.write_bytes(bytes(data))
    refresh_checksums(graph)
    with pytest.raises(pi.IndexFormatError, match="refill start past"):
        pi.PoincareIndex.load(tmp_path / "ix")


def _reachable_by_bfs(index: pi.PoincareIndex, entry: int) -> int:
    """Independent reference: a plain breadth-first walk over the lists the index reports."""
    seen = {entry}
    frontier = [entry]
    while frontier:
        nxt = []
        for u in frontier:
            for v in index._core.neighbors(u, 0):
                if v not in seen:
                    seen.add(v)
                    nxt.append(v)
        frontier = nxt
    return len(seen)


def test_reachability_of_a_graph_with_cut_in_links_matches_a_plain_walk(tmp_path):
    # 20k nodes: the walk's bounded queue (4,096 entries here) spills, so its mark scans run.
    from test_mmap import refresh_checksums

    M = 8
    index, x = _boundary_index(20_000, M)
    index.save(tmp_path / "ix")
    path = next((tmp_path / "ix").glob("graph-*.bin"))
    data = bytearray(path.read_bytes())
    (header,) = struct.unpack_from("<I", data, 12)
    entry, n = struct.unpack_from("<IQ", data, 36)
    levels = np.frombuffer(bytes(data[header : header + n]), dtype=np.uint8)
    level0_at = header + n + (-(header + n)) % 4
    stride = 1 + 2 * M
    lists = np.frombuffer(bytes(data[level0_at : level0_at + 4 * stride * n]), dtype="<u4").reshape(n, stride)
    relocated = lists[:, 0] >= 0x80000000
    # Cut every in-place in-link of 300 level-0 nodes that no relocated list links to (those
    # lists live elsewhere in the file); nodes reached only through them are cut off too.
    kept_by_relocated = {v for u in np.flatnonzero(relocated) for v in index._core.neighbors(int(u), 0)}
    rng = np.random.default_rng(5)
    candidates = [
        int(u)
        for u in rng.permutation(n)
        if levels[u] == 0 and u != entry and int(u) not in kept_by_relocated
    ]
    cut = np.array(candidates[:300], dtype=np.uint32)
    lists = lists.copy()
    for u in np.flatnonzero(~relocated):
        count = int(lists[u, 0])
        links = lists[u, 1 : 1 + count]
        keep = links[~np.isin(links, cut)]
        lists[u, 1:] = 0
        lists[u, 0] = len(keep)
        lists[u, 1 : 1 + len(keep)] = keep
    data[level0_at : level0_at + 4 * stride * n] = lists.astype("<u4").tobytes()
    # The cut lists' refill is no longer where it was: record them as lists without one (the
    # refill starts, 2 bytes a node, end the payload).
    end = len(data) - 8
    refill_at = end - 20 - 4 * struct.unpack_from("<Q", data, end - 12)[0] - 2 * n
    for u in np.flatnonzero(~relocated):
        struct.pack_into("<H", data, refill_at + 2 * int(u), 0xFFFF)
    path.write_bytes(bytes(data))
    refresh_checksums(path)
    loaded = pi.PoincareIndex.load(tmp_path / "ix")
    unreachable = loaded.check_integrity()["unreachable"]
    assert unreachable >= 300
    assert unreachable == n - _reachable_by_bfs(loaded, int(entry))
    # The repair (its walks use the same bounded queue, its in-link counts are 16-bit) links them all.
    loaded.add(boundary_tree(n // 32, 16, seed=9).points)
    assert loaded.check_integrity()["unreachable"] == 0
