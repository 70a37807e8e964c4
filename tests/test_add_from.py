"""add_from: chunked adds from a memmap, a .npy file and a Parquet file give the same index as
one add of the whole array; bad sources and bad rows are refused with the rows named."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import poincare_index as pi

NOW = np.datetime64("2026-06-01T00:00", "us")


@pytest.fixture
def points(tree_data):
    base, queries = tree_data
    return base[:1000], queries[:20]


def _same_flat(a: pi.PoincareFlatIndex, b: pi.PoincareFlatIndex, queries) -> None:
    Da, Ia = a.search(queries, 10)
    Db, Ib = b.search(queries, 10)
    np.testing.assert_array_equal(Ia, Ib)
    np.testing.assert_array_equal(Da, Db)


def test_memmap_and_npy_file_equal_one_add(points, tmp_path):
    base, queries = points
    path = tmp_path / "x.npy"
    np.save(path, base)
    whole = pi.PoincareFlatIndex(16)
    whole.add(base, t=NOW)
    from_file = pi.PoincareFlatIndex(16)
    assert from_file.add_from(path, chunk_rows=137, t=NOW) == len(base)
    mm = np.load(path, mmap_mode="r")
    from_map = pi.PoincareFlatIndex(16)
    assert from_map.add_from(mm, chunk_rows=256, t=NOW) == len(base)
    for index in (from_file, from_map):
        assert index.ntotal == len(base)
        np.testing.assert_array_equal(index.reconstruct_n(0, len(base)), base)
        _same_flat(whole, index, queries)
    # The memmap still reads right after its pages were let go.
    np.testing.assert_array_equal(np.asarray(mm), base)


def test_hnsw_add_from_finds_what_one_add_finds(points):
    base, queries = points
    whole = pi.PoincareIndex(16, num_threads=1)
    whole.add(base)
    chunked = pi.PoincareIndex(16, num_threads=1)
    chunked.add_from(base.astype(np.float64), chunk_rows=300)  # other dtypes are cast per chunk
    assert chunked.check_integrity()["unreachable"] == 0
    _, Iw = whole.search(queries, 1, ef=200)
    _, Ic = chunked.search(queries, 1, ef=200)
    np.testing.assert_array_equal(Iw, Ic)


def test_parquet_with_ids_and_times(points, tmp_path):
    base, queries = points
    ids = np.arange(len(base), dtype=np.int64) * 3 + 7
    t = NOW - np.arange(len(base)).astype("timedelta64[h]").astype("timedelta64[us]")
    table = pa.table(
        {
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(base.reshape(-1)), 16),
            "key": pa.array(ids),
            "when": pa.array(t, type=pa.timestamp("us", tz="UTC")),
        }
    )
    path = tmp_path / "x.parquet"
    pq.write_table(table, path, row_group_size=250)
    index = pi.PoincareFlatIndex(16)
    n = index.add_from(path, chunk_rows=100, vector_column="emb", id_column="key", time_column="when")
    assert n == len(base) == index.ntotal
    reference = pi.PoincareFlatIndex(16)
    reference.add_with_ids(base, ids, t=t)
    _same_flat(reference, index, queries)
    cols = index.columns
    assert cols.column("id").to_pylist() == ids.tolist()
    assert cols.column("t").equals(reference.columns.column("t"))


def test_a_bad_row_names_its_chunk_and_keeps_the_earlier_ones(points):
    base, _ = points
    bad = base.copy()
    bad[450, 3] = np.nan
    index = pi.PoincareFlatIndex(16)
    with pytest.raises(ValueError, match=r"rows 400\.\.599 of the source \(400 added before\)"):
        index.add_from(bad, chunk_rows=200)
    assert index.ntotal == 400


def test_bad_sources_are_refused(points, tmp_path):
    base, _ = points
    index = pi.PoincareFlatIndex(16)
    with pytest.raises(TypeError, match="source must be"):
        index.add_from(base.tolist())
    with pytest.raises(ValueError, match=r"shape \(1000, 8\), expected \(n, 16\)"):
        index.add_from(base[:, :8])
    with pytest.raises(FileNotFoundError, match="no file"):
        index.add_from(tmp_path / "missing.npy")
    (tmp_path / "x.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match="neither a .npy nor a .parquet"):
        index.add_from(tmp_path / "x.csv")
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"v": pa.array([[0.1] * 15])}), path)
    with pytest.raises(ValueError, match="no column"):
        index.add_from(path)
    with pytest.raises(ValueError, match="row 0 of 'v' has 15 values, expected 16"):
        index.add_from(path, vector_column="v")
    with pytest.raises(ValueError, match="chunk_rows"):
        index.add_from(base, chunk_rows=0)
    with pytest.raises(ValueError, match="either t or time_column"):
        index.add_from(path, vector_column="v", t=NOW, time_column="v")
    assert index.ntotal == 0


def _mapped_rss(path) -> int:
    """Resident bytes of this process's mappings of ``path`` (Linux /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc")
def test_a_read_only_map_lets_its_pages_go(tmp_path):
    """After add_from of a read-only memmap (a slice of one, too), the map's resident pages are
    about one chunk, not the file; a plain read of the same map keeps them all."""
    rows = pi.project(np.random.default_rng(4).normal(size=(131_072, 16)) * 0.1).astype(np.float32)
    path = (tmp_path / "rows.npy").resolve()
    np.save(path, rows)  # 8 MiB
    mm = np.load(path, mmap_mode="r")
    index = pi.PoincareFlatIndex(16)
    index.add_from(mm[1000:], chunk_rows=8192)  # chunks of 512 KiB
    assert index.ntotal == len(rows) - 1000
    assert _mapped_rss(path) <= 2 * 8192 * 64, _mapped_rss(path)
    assert float(np.asarray(mm, dtype=np.float64).sum()) != 0.0  # reads every page again
    assert _mapped_rss(path) >= 8 * 2**20 - 2 * 4096


def test_rows_without_times_share_the_moment_of_the_call(points):
    """Without t, every chunk gets the same time (one add_from is one moment, as one add is)."""
    base, _ = points
    index = pi.PoincareFlatIndex(16)
    index.add_from(base, chunk_rows=100)
    t = index.columns.column("t").to_numpy()
    assert len(np.unique(t)) == 1


@pytest.mark.parametrize("kind", [pi.PoincareIndex, pi.PoincareFlatIndex])
def test_a_source_refused_at_its_first_chunk_leaves_no_allocation_for_its_size(kind, tmp_path):
    x = np.zeros((200_000, 16), dtype=np.float32)
    x[3, 5] = np.nan
    path = tmp_path / "bad.npy"
    np.save(path, x)
    index = kind(16)
    before = index.memory_usage()
    with pytest.raises(ValueError, match="rows 0..1023"):
        index.add_from(path, chunk_rows=1024)
    assert index.ntotal == 0
    assert index.memory_usage() == before
    # A source accepted chunk by chunk allocates for all of it once its first chunk is in.
    x[3, 5] = 0.0
    np.save(path, x[:5000])
    index.add_from(path, chunk_rows=1024, t=NOW)
    assert index.ntotal == 5000
    usage = index.memory_usage()
    assert usage["vectors"] == 5000 * 16 * 4 and usage["column_t"] == 5000 * 8  # no growth slack
