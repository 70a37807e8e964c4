"""Filters: MongoDB-style dicts compiled to masks, and filtered searches against brute force."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pytest
from reference import brute_force, recall

import poincare_index as pi
from poincare_index.filters import compile_filter

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)

TABLE = pa.table(
    {
        "id": pa.array([10, 11, 12, 13, 14], pa.int64()),
        "t": pa.array([NOW - timedelta(days=d) for d in (0, 1, 2, 3, 4)], pa.timestamp("us", tz="UTC")),
        "kind": ["a", "b", None, "a", "c"],
        "n": [1, 5, None, 3, 9],
    }
)


@pytest.mark.parametrize(
    "spec, rows",
    [
        ({"kind": "a"}, [0, 3]),
        ({"kind": {"$eq": "a"}}, [0, 3]),
        ({"kind": None}, [2]),
        ({"kind": {"$ne": "a"}}, [1, 2, 4]),  # missing matches $ne, as in MongoDB
        ({"n": {"$gt": 3}}, [1, 4]),
        ({"n": {"$gte": 3, "$lt": 9}}, [1, 3]),
        ({"n": {"$lte": 1}}, [0]),
        ({"kind": {"$in": ["a", "c"]}}, [0, 3, 4]),
        ({"kind": {"$in": ["c", None]}}, [2, 4]),
        ({"kind": {"$nin": ["a"]}}, [1, 2, 4]),
        ({"n": {"$exists": True}}, [0, 1, 3, 4]),
        ({"n": {"$exists": False}}, [2]),
        ({"n": {"$not": {"$gt": 3}}}, [0, 2, 3]),
        ({"$or": [{"kind": "b"}, {"n": 9}]}, [1, 4]),
        ({"$and": [{"kind": "a"}, {"n": {"$gt": 1}}]}, [3]),
        ({"kind": "a", "n": 1}, [0]),
        ({"t": {"$gte": NOW - timedelta(days=1)}}, [0, 1]),
        ({"t": {"$gte": (NOW - timedelta(days=1)).timestamp()}}, [0, 1]),
        ({"t": {"$lt": (NOW - timedelta(days=2, hours=12)).isoformat()}}, [3, 4]),
        ({"t": {"$lt": "2026-05-29T12:00:00Z"}}, [3, 4]),
    ],
)
def test_dict_filters_follow_mongodb_semantics(spec, rows):
    mask = compile_filter(spec, TABLE)
    assert np.flatnonzero(mask).tolist() == rows


@pytest.mark.parametrize(
    "spec, exc, match",
    [
        ({"nope": 1}, ValueError, "unknown column 'nope'"),
        ({"n": {"$regex": "x"}}, ValueError, r"unknown operator '\$regex'"),
        ({"$xor": []}, ValueError, r"unknown operator '\$xor'"),
        ({"$or": {"n": 1}}, ValueError, "non-empty list"),
        ({"n": {"$in": 3}}, TypeError, "list"),
        ({"n": "many"}, TypeError, "cannot be compared"),
        ({"t": {"$gt": "last week"}}, ValueError, "ISO-8601"),
    ],
)
def test_bad_filters_name_the_problem(spec, exc, match):
    with pytest.raises(exc, match=match):
        compile_filter(spec, TABLE)


def test_mask_and_id_filters():
    assert compile_filter(np.array([1, 0, 0, 0, 1], dtype=bool), TABLE).tolist() == [
        True,
        False,
        False,
        False,
        True,
    ]
    assert np.flatnonzero(compile_filter(np.array([12, 14, 99]), TABLE)).tolist() == [2, 4]
    with pytest.raises(ValueError, match="5 rows"):
        compile_filter(np.ones(3, dtype=bool), TABLE)
    with pytest.raises(TypeError):
        compile_filter(np.ones(5, dtype=np.float32), TABLE)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.5])
def test_filtered_search_against_brute_force(tree_data, kind, fraction):
    base, queries = tree_data
    rng = np.random.default_rng(int(fraction * 1000))
    allowed = rng.random(len(base)) < fraction
    index = pi.PoincareFlatIndex(base.shape[1]) if kind == "flat" else pi.PoincareIndex(base.shape[1], seed=3)
    index.add(base, t=NOW, metadata={"group": np.where(allowed, "in", "out")})
    _, truth = brute_force(base[allowed], queries, 10)
    truth = np.where(truth >= 0, np.flatnonzero(allowed)[np.maximum(truth, 0)], -1)
    for filters in ({"group": "in"}, allowed, np.flatnonzero(allowed)):
        D, I = index.search(queries, 10, filters=filters)
        assert np.isin(I[I >= 0], np.flatnonzero(allowed)).all()
        assert recall(I, truth) >= (1.0 if kind == "flat" else 0.95)
        assert np.all(np.diff(D, axis=1) >= 0)


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": {"$gt": 1}},
        {"kind": 5},
        {"n": "3"},
        {"n": True},
        {"flag": 1},
        {"kind": {"$in": ["note", 1]}},
        {"n": {"$nin": [True]}},
    ],
)
def test_a_value_of_another_kind_than_its_column_is_a_type_error(spec):
    """Arrow casts across kinds (1 -> "1", "3" -> 3, True -> 1), which gave silent wrong
    answers: every row for {"kind": {"$gt": 1}}, none for {"kind": 5}, n == 3 for {"n": "3"}."""
    table = pa.table({"kind": ["note", "fact"], "n": [1, 3], "flag": [True, False]})
    with pytest.raises(TypeError, match="cannot be compared with column"):
        compile_filter(spec, table)


def test_values_of_the_columns_kind_still_compare():
    table = pa.table({"kind": ["note", "fact"], "n": [1, 3], "x": [0.5, 2.0], "flag": [True, False]})
    assert compile_filter({"n": 3}, table).tolist() == [False, True]
    assert compile_filter({"n": {"$gte": 1.5}}, table).tolist() == [False, True]
    assert compile_filter({"x": {"$lt": 1}}, table).tolist() == [True, False]
    assert compile_filter({"flag": False}, table).tolist() == [False, True]
    assert compile_filter({"kind": {"$in": ["fact"]}}, table).tolist() == [False, True]
