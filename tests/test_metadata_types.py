"""Metadata types: dates in the framework stores (stored, filtered with MongoDB semantics, back as
dates), date columns in the dict filters, and one rule for a key's type (ints widen to float64,
other mixes are refused naming the key and both types) in Memory, the index and LangChain."""

from __future__ import annotations

import os
from datetime import date, datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pytest

import poincare_index as pi
from poincare_index.filters import compile_filter

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
PLUS2 = timezone(timedelta(hours=2))


# ---- date columns in the dict filters ---------------------------------------------------------
DATES = pa.table(
    {
        "d32": pa.array([date(2026, 1, 1), date(2026, 1, 2), None, date(2026, 1, 3)], pa.date32()),
        "d64": pa.array([date(2026, 1, 1), date(2026, 1, 2), None, date(2026, 1, 3)], pa.date64()),
    }
)


@pytest.mark.parametrize("column", ["d32", "d64"])
@pytest.mark.parametrize(
    "cond, rows",
    [
        ({"$lt": "2026-01-03"}, [0, 1]),
        ({"$lt": date(2026, 1, 3)}, [0, 1]),
        ({"$lte": date(2026, 1, 2)}, [0, 1]),
        # A date is its midnight: before a time that day, after the day before.
        ({"$lt": datetime(2026, 1, 2, 12)}, [0, 1]),
        ({"$lte": datetime(2026, 1, 2, 12)}, [0, 1]),
        ({"$gt": datetime(2026, 1, 2, 12)}, [3]),
        ({"$gte": "2026-01-02T00:00:01"}, [3]),
        ({"$eq": datetime(2026, 1, 2, 12)}, []),
        ({"$ne": datetime(2026, 1, 2, 12)}, [0, 1, 2, 3]),
        ({"$eq": datetime(2026, 1, 2)}, [1]),
        ({"$lt": datetime(2026, 1, 2, 1, tzinfo=PLUS2)}, [0]),  # 2026-01-01T23:00Z
        ({"$lt": "2026-01-02T01:00:00+02:00"}, [0]),
        ({"$in": ["2026-01-01", date(2026, 1, 3), datetime(2026, 1, 2, 5)]}, [0, 3]),
        ({"$nin": ["2026-01-01", None]}, [1, 3]),
        ({"$exists": True}, [0, 1, 3]),
        ({"$not": {"$gte": "2026-01-02"}}, [0, 2]),
        ("2026-01-02", [1]),
        (None, [2]),
    ],
)
def test_date_columns_compare_with_dates_datetimes_and_iso_strings(column, cond, rows):
    assert np.flatnonzero(compile_filter({column: cond}, DATES)).tolist() == rows


@pytest.mark.parametrize(
    "cond, exc, match",
    [
        ({"$gt": 20000}, TypeError, "compare a date with a date, a datetime or an ISO-8601 string"),
        ({"$gt": True}, TypeError, "got True"),
        ({"$lt": "next tuesday"}, ValueError, "'next tuesday' is not an ISO-8601 date or time"),
        ({"$in": [date(2026, 1, 1), 3]}, TypeError, r"filters\.d32\.\$in"),
    ],
)
def test_a_date_column_refuses_operands_that_are_not_dates(cond, exc, match):
    with pytest.raises(exc, match=match):
        compile_filter({"d32": cond}, DATES)


# ---- dates in the LangChain store -------------------------------------------------------------
def _langchain_store(**kw):
    if not os.environ.get("CI"):
        pytest.importorskip("langchain_core")
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from poincare_index.integrations.langchain import PoincareVectorStore

    return PoincareVectorStore(DeterministicFakeEmbedding(size=16), **kw)


DATED = {
    "A": {"when": date(2026, 1, 1), "page": 1},
    "B": {"when": date(2026, 1, 5)},
    "C": {"page": 2},  # no date
    "D": {"when": date(1, 1, 1), "at": datetime(2026, 1, 2, 3, 4)},
}


def _ids(store, flt):
    return sorted(d.id for d in store.similarity_search("note", k=10, filter=flt))


@pytest.fixture(params=["in memory", "persistent"])
def dated_store(request, tmp_path):
    path = tmp_path / "store" if request.param == "persistent" else None
    store = _langchain_store(path=path)
    store.add_texts([f"note {i}" for i in DATED], list(DATED.values()), ids=list(DATED))
    if path is not None:  # reopened: what a filter reads survives the log and the snapshot
        store.close()
        store = _langchain_store(path=path)
    yield store
    store.close()


@pytest.mark.parametrize(
    "flt, ids",
    [
        ({"when": {"$lt": "2026-01-03"}}, ["A", "D"]),
        ({"when": {"$lt": date(2026, 1, 3)}}, ["A", "D"]),
        ({"when": {"$lt": datetime(2026, 1, 3, tzinfo=timezone.utc)}}, ["A", "D"]),
        ({"when": {"$gt": datetime(2026, 1, 1, 12)}}, ["B"]),
        ({"when": {"$gte": "2026-01-01", "$lte": "2026-01-05T00:00:00Z"}}, ["A", "B"]),
        ({"when": {"$exists": True}}, ["A", "B", "D"]),
        ({"when": {"$exists": False}}, ["C"]),
        ({"when": None}, ["C"]),
        ({"when": date(2026, 1, 5)}, ["B"]),
        ({"when": {"$ne": "2026-01-05"}}, ["A", "C", "D"]),
        ({"when": {"$in": [date(2026, 1, 1), "0001-01-01"]}}, ["A", "D"]),
        ({"when": {"$nin": [date(2026, 1, 1)]}}, ["B", "C", "D"]),
        ({"$not": {"when": {"$gt": "2000-01-01"}}}, ["C", "D"]),
        ({"$or": [{"when": {"$lt": "1000-01-01"}}, {"page": 2}]}, ["C", "D"]),
        ({"at": {"$lt": datetime(2026, 1, 2, 3, 5, tzinfo=timezone.utc)}}, ["D"]),  # datetimes as before
    ],
)
def test_langchain_dates_round_trip_and_filter_with_mongodb_semantics(dated_store, flt, ids):
    assert _ids(dated_store, flt) == ids
    docs = {d.id: d.metadata for d in dated_store.get_by_ids(list(DATED))}
    assert docs == DATED and type(docs["A"]["when"]) is date and type(docs["D"]["at"]) is datetime


def test_langchain_date_keys_take_dates_only_and_date_operands():
    store = _langchain_store()
    store.add_texts(["a"], [{"when": date(2026, 1, 1)}], ids=["A"])
    with pytest.raises(ValueError, match="text 0: metadata 'when' is a datetime, but the store holds date"):
        store.add_texts(["b"], [{"when": datetime(2026, 1, 1)}], ids=["B"])
    with pytest.raises(ValueError, match="text 1: metadata 'when' is a str, but the store holds date"):
        store.add_texts(["b", "c"], [{}, {"when": "2026-01-01"}], ids=["B", "C"])
    assert len(store.memory) == 1  # nothing written
    with pytest.raises(TypeError, match=r"filters\.when\.\$gt: compare a date with .* got 3"):
        _ids(store, {"when": {"$gt": 3}})
    with pytest.raises(ValueError, match="filters.when: .soon. is not an ISO-8601 date or time"):
        _ids(store, {"when": "soon"})
    # Another key's date operand is compared as a date too, a key no document has as null.
    assert _ids(store, {"other": {"$lt": date(2026, 1, 3)}}) == []
    assert _ids(store, {"other": {"$ne": date(2026, 1, 3)}}) == ["A"]


# ---- one type rule for a key ------------------------------------------------------------------
def _memory():
    return pi.Memory(decay=None)


def test_memory_widens_int_to_float_within_a_key():
    mem = _memory()
    mem.add("one", id="a", metadata={"x": 1}, t=NOW)
    mem.add("one and a half", id="b", metadata={"x": 1.5}, t=NOW)
    mem.add("two", id="c", metadata={"x": 2}, t=NOW)  # an int after the widening
    assert mem.index.columns.schema.field("x").type == pa.float64()
    assert {r.id: r.metadata["x"] for r in mem.list()} == {"a": 1.0, "b": 1.5, "c": 2.0}
    assert sorted(r.id for r in mem.list({"x": {"$gte": 1.5}})) == ["b", "c"]
    mem.update("a", "three and a half", metadata={"x": 3.5})
    assert mem["a"].metadata["x"] == 3.5
    floats_first = _memory()
    floats_first.add("x", metadata={"y": 0.5}, t=NOW)
    floats_first.add_many(["y", "z"], metadata=[{"y": 7}, {"y": 2.5}], t=NOW)
    assert sorted(r.metadata["y"] for r in floats_first.list()) == [0.5, 2.5, 7.0]


@pytest.mark.parametrize(
    "first, then, match",
    [
        (1, "one", r"'x' holds int64 values, the new rows give string"),
        (1.5, True, r"'x' holds double values, the new rows give bool"),
        ("one", 1, r"'x' holds string values, the new rows give int64"),
        (NOW, 1, r"'x' holds timestamp\[us, tz=UTC\] values, the new rows give int64"),
        (0.5, 2**53 + 1, r"'x' mixes integers and floats"),
    ],
)
def test_memory_refuses_other_mixes_across_adds_naming_the_key_and_both_types(first, then, match):
    mem = _memory()
    mem.add("first", metadata={"x": first}, t=NOW)
    with pytest.raises(ValueError, match=match):
        mem.add("then", metadata={"x": then}, t=NOW)
    assert len(mem) == 1 and mem.index.columns.num_rows == 1


@pytest.mark.parametrize(
    "values, match",
    [
        ([1.5, True], r"'x' holds float \(memory 0\) and bool \(memory 1\) values"),  # was 1.0
        ([NOW, 1], r"'x' holds datetime \(memory 0\) and int \(memory 1\) values"),  # was 1970+1us
        ([1, "a"], r"'x' holds int \(memory 0\) and str \(memory 1\) values"),
        ([0.5, 2**60], r"'x' mixes int and float values.* 1152921504606846976"),
    ],
)
def test_memory_refuses_other_mixes_within_a_batch_naming_the_key_and_both_types(values, match):
    mem = _memory()
    with pytest.raises(ValueError, match=match):
        mem.add_many(["p", "q"], metadata=[{"x": v} for v in values], t=NOW)
    assert len(mem) == 0


def test_the_index_widens_integer_metadata_to_float_across_adds():
    index = pi.PoincareFlatIndex(4)
    x = (np.random.default_rng(0).normal(size=(4, 4)) * 0.1).astype(np.float32)
    index.add(x[:2], t=NOW, metadata={"score": [1, 2]})
    index.add(x[2:3], t=NOW, metadata=pa.table({"score": pa.array([0.5], pa.float32())}))
    assert index.columns.column("score").to_pylist() == [1.0, 2.0, 0.5]
    with pytest.raises(ValueError, match="'score' holds double values, the new rows give string"):
        index.add(x[3:], t=NOW, metadata={"score": ["high"]})
    assert index.ntotal == 3


@pytest.mark.parametrize("store", ["memory", "langchain"])
def test_memory_and_langchain_share_the_type_rule(store):
    if store == "memory":
        mem = _memory()

        def add(i, meta):
            mem.add(f"text {i}", id=str(i), metadata=meta, t=NOW)

        def count():
            return len(mem)
    else:
        lc = _langchain_store()

        def add(i, meta):
            lc.add_texts([f"text {i}"], [meta], ids=[str(i)])

        def count():
            return len(lc.memory)

    add(0, {"x": 1})
    add(1, {"x": 1.5})  # int then float under one key: accepted by both
    with pytest.raises(ValueError, match="'x'"):
        add(2, {"x": "two"})  # another kind: refused by both, naming the key
    assert count() == 2
