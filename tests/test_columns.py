"""Columns: times in every accepted form, validity windows, metadata, and their persistence."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pytest

import poincare_index as pi

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


def points(n, dim=4, seed=0):
    return (np.random.default_rng(seed).normal(size=(n, dim)) * 0.1).astype(np.float32)


@pytest.fixture(params=["flat", "hnsw"])
def index(request):
    return pi.PoincareFlatIndex(4) if request.param == "flat" else pi.PoincareIndex(4, num_threads=1)


def test_times_in_every_form_land_as_utc(index):
    x = points(4)
    t = [
        NOW,
        NOW.replace(tzinfo=None) - timedelta(hours=1),  # naive: read as UTC
        datetime(2026, 6, 1, 2, tzinfo=timezone(timedelta(hours=2))),  # = 00:00 UTC
        np.datetime64("2026-05-01T00:00"),
    ]
    index.add_with_ids(x, [1, 2, 3, 4], t=t)
    index.add_with_ids(
        points(2, seed=1),
        [5, 6],
        t=pa.array([NOW, NOW], type=pa.timestamp("ms", tz="Asia/Tokyo")),
        valid_until=np.array(["2027-01-01", "NaT"], dtype="datetime64[s]"),
    )
    cols = index.columns
    assert cols.column_names[:5] == ["id", "t", "valid_from", "valid_until", "access_count"]
    assert cols.schema.field("t").type == pa.timestamp("us", tz="UTC")
    got = cols.column("t").to_pylist()
    assert got[:4] == [NOW, NOW - timedelta(hours=1), NOW, datetime(2026, 5, 1, tzinfo=timezone.utc)]
    assert got[4:] == [NOW, NOW]
    assert cols.column("valid_from").null_count == 6
    assert cols.column("valid_until").to_pylist()[4:] == [datetime(2027, 1, 1, tzinfo=timezone.utc), None]
    assert cols.column("access_count").to_pylist() == [0] * 6
    assert cols.column("id").to_pylist() == [1, 2, 3, 4, 5, 6]


def test_t_defaults_to_now_and_scalar_broadcasts(index):
    before = datetime.now(timezone.utc)
    index.add(points(3))
    after = datetime.now(timezone.utc)
    ts = index.columns.column("t").to_pylist()
    assert all(before - timedelta(seconds=1) <= t <= after for t in ts)
    index.add(points(2, seed=2), t=NOW)
    assert index.columns.column("t").to_pylist()[3:] == [NOW, NOW]


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"t": [NOW, None, NOW]}, ValueError, "t row 1"),
        (
            {
                "t": np.array(
                    [NOW.replace(tzinfo=None), "NaT", NOW.replace(tzinfo=None)], dtype="datetime64[us]"
                )
            },
            ValueError,
            "t row 1",
        ),
        ({"t": [NOW, NOW]}, ValueError, "2 entries"),
        ({"t": [1, 2, 3]}, TypeError, "not a datetime"),
        ({"t": "2026-01-01"}, TypeError, "datetimes"),
        ({"valid_from": NOW, "valid_until": NOW - timedelta(days=1)}, ValueError, "valid_until"),
        ({"valid_from": NOW, "valid_until": NOW}, ValueError, "row 0"),
        ({"metadata": {"kind": ["a", "b"]}}, ValueError, "2 rows"),
        ({"metadata": {"t": [1, 2, 3]}}, ValueError, "clashes"),
        ({"metadata": [1, 2, 3]}, TypeError, "metadata"),
    ],
)
def test_bad_column_inputs_change_nothing(index, kwargs, exc, match):
    index.add(points(2, seed=3), t=NOW)
    before = index.columns
    with pytest.raises(exc, match=match):
        index.add(points(3), **kwargs)
    assert index.ntotal == 2
    assert index.columns.equals(before)


def test_metadata_dict_and_table_merge(index):
    index.add(points(2), t=NOW, metadata={"kind": ["a", "b"], "score": [1.0, 2.0]})
    index.add(points(1, seed=1), t=NOW)  # no metadata: nulls
    index.add(points(2, seed=2), t=NOW, metadata=pa.table({"kind": ["c", "d"], "user": [7, 8]}))
    cols = index.columns
    assert cols.column("kind").to_pylist() == ["a", "b", None, "c", "d"]
    assert cols.column("score").to_pylist() == [1.0, 2.0, None, None, None]
    assert cols.column("user").to_pylist() == [None, None, None, 7, 8]
    with pytest.raises(ValueError, match="metadata does not match"):
        index.add(points(1, seed=4), t=NOW, metadata={"score": ["not a float"]})
    assert index.ntotal == 5


def test_columns_survive_save_and_load(index, tmp_path):
    index.add(
        points(50),
        t=[NOW - timedelta(hours=i) for i in range(50)],
        valid_until=[NOW + timedelta(days=1) if i % 3 else None for i in range(50)],
        metadata={"kind": [f"k{i % 4}" for i in range(50)]},
    )
    index.search_scored(points(5, seed=9), 3, decay=pi.HalfLife(hours=24), at_time=NOW, touch=True)
    index.save(tmp_path / "idx")
    loaded = pi.read_index(tmp_path / "idx")
    assert loaded.columns.equals(index.columns)
    assert sum(loaded.columns.column("access_count").to_pylist()) == 15
    q = points(5, seed=10)
    a = index.search_scored(q, 5, decay=pi.HalfLife(hours=24), at_time=NOW)
    b = loaded.search_scored(q, 5, decay=pi.HalfLife(hours=24), at_time=NOW)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.scores, b.scores)
    loaded.add(points(1, seed=11), t=NOW)  # a loaded index keeps growing
    assert loaded.columns.num_rows == 51


def test_corrupted_columns_file_is_refused(tmp_path):
    index = pi.PoincareFlatIndex(4)
    index.add(points(20), t=NOW)
    index.save(tmp_path / "idx")
    path = next((tmp_path / "idx").glob("columns-*.arrow"))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(pi.IndexFormatError, match="checksum"):
        pi.read_index(tmp_path / "idx")


def test_time_columns_share_memory_with_the_index():
    """The Arrow time columns are views of the buffers the core reads during a search."""
    index = pi.PoincareIndex(4)
    index.add(points(10), t=NOW, valid_until=[NOW + timedelta(days=i + 1) for i in range(10)])
    cols = index.columns
    store = index._columns
    assert cols.column("t").chunk(0).buffers()[1].address == store._t.ctypes.data
    assert cols.column("valid_until").chunk(0).buffers()[1].address == store._valid_until.data.ctypes.data
    with store.buffers() as (t, _, valid_until, _):
        assert t.ctypes.data == store._t.ctypes.data


def test_time_buckets_follow_adds():
    """The time buckets of search_scored's time pass follow adds: every row in exactly one
    bucket, each bucket's range bounds its rows (rows newest first inside the sorted ones); rows
    added since the last full sort form one bucket in front, newest added first, until there are
    bucket_rows of them, then the whole order equals a full sort again. A view taken earlier is
    never overwritten by a later call (a search may still be reading it)."""
    rng = np.random.default_rng(4)
    index = pi.PoincareIndex(4)
    store = index._columns
    sizes = [300, 1, 1, 40, 200, 1, 700, 3, 650]
    for batch, m in enumerate(sizes):
        t = np.datetime64(NOW.replace(tzinfo=None), "us") - (rng.uniform(0, 1000, m) * 3600e6).astype(
            "timedelta64[us]"
        )
        before = store._buckets[0] if store._buckets is not None else 0
        earlier = store.time_buckets(bucket_rows=256) if len(store) else None
        kept = None if earlier is None else [a.copy() for a in earlier]
        index.add(points(m, seed=batch), t=t)
        order, starts, t_min, t_max = store.time_buckets(bucket_rows=256)
        if earlier is not None:
            for a, b in zip(earlier, kept):
                np.testing.assert_array_equal(a, b)
        times = store._t[: len(store)]
        assert sorted(order.tolist()) == list(range(len(store)))
        assert starts[0] == 0 and starts[-1] == len(store) and np.all(np.diff(starts) > 0)
        merged = len(store) - before > 256
        for i in range(len(starts) - 1):
            rows = times[order[starts[i] : starts[i + 1]]]
            assert rows.min() == t_min[i] and rows.max() == t_max[i]
            if merged or i > 0:
                assert np.all(np.diff(rows) <= 0)
        if merged:  # one sorted order again
            assert np.all(np.diff(times[order]) <= 0)
        else:  # the new rows in front, newest added first, the sorted order after them
            tail = len(store) - before
            assert order[:tail].tolist() == list(range(len(store) - 1, before - 1, -1))
            assert np.all(np.diff(times[order[tail:]]) <= 0)


def test_dictionary_encoded_metadata_in_several_batches_saves_and_loads(tmp_path):
    """Two batches with different dictionaries made save() raise ArrowInvalid."""
    index = pi.PoincareIndex(4)
    x = np.full((4, 4), 0.1, dtype=np.float32)
    index.add(x[:2], metadata={"kind": pa.array(["a", "b"]).dictionary_encode()})
    index.add(x[2:], metadata={"kind": pa.array(["c", "a"]).dictionary_encode()})
    index.save(tmp_path / "idx")
    loaded = pi.read_index(tmp_path / "idx")
    assert loaded.columns.column("kind").to_pylist() == ["a", "b", "c", "a"]
    r = loaded.search_scored(x[:1], 4, filters={"kind": "a"})
    assert sorted(r.ids[0][r.ids[0] >= 0].tolist()) == [0, 3]


def test_access_counts_are_touched_only_through_the_atomic_helpers():
    """Searches increment access_count atomically in the core; a plain numpy read or write of
    the array elsewhere would race them (lost updates, torn copies). Only columns.py holds the
    array, and there only _grow, append and the helpers use it."""
    import re
    from pathlib import Path

    package = Path(pi.__file__).parent
    pattern = re.compile(r"\._access\b")
    offenders = [
        f"{path.relative_to(package)}:{i}"
        for path in package.rglob("*.py")
        if path.name != "columns.py"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, offenders


def test_metadata_appends_keep_few_chunks_and_every_value():
    import math

    from poincare_index.columns import ColumnStore

    store = ColumnStore()
    want = []
    rng = np.random.default_rng(5)
    for i in range(600):
        n = int(rng.integers(1, 4))
        meta = {"i": list(range(len(want), len(want) + n))}
        if i > 300:
            meta["late"] = [f"x{i}"] * n  # a column that appears later: null before
        ids = np.arange(len(want), len(want) + n, dtype=np.int64)
        store.append(ids, np.zeros(n, np.int64), np.zeros(n, np.int64),
                     np.full(n, np.iinfo(np.int64).max), pa.table(meta))  # fmt: skip
        want.extend(meta["i"])
    table = store.metadata
    assert len(table.to_batches()) <= 2 * math.log2(len(want)) + 2
    assert table.column("i").to_pylist() == want
    late = table.column("late").to_pylist()
    assert late[0] is None and late[-1] == "x599"
