"""Two rules about time that hold whatever else is configured:

- as of a time, a point stamped after it did not exist yet: it weighs ``future_weight``, with a
  decay policy or without one (``decay=None`` used to weigh it 1, so a Memory asked what it would
  have retrieved 30 days ago answered with a memory added today);
- a naive datetime is the local time of the process (``datetime.timestamp()``'s reading), in every
  entry point: times of points, ``at_time``, filter operands, metadata values.
"""

from __future__ import annotations

import math
import os
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

import poincare_index as pi
from poincare_index import _time
from poincare_index.embed import HashingEmbedder
from poincare_memory import Memory

NOW = datetime(2026, 6, 1, 12, tzinfo=timezone.utc)


@pytest.fixture
def tokyo():
    """The process's local zone is Asia/Tokyo (UTC+9) for the test."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Tokyo"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


# ---- as of a time, later points did not exist -------------------------------------------------


@pytest.mark.parametrize("mode", ["vector", "keyword", "hybrid"])
def test_a_memory_without_decay_answers_as_of_a_day_with_what_existed_then(mode):
    m = Memory(embedder=HashingEmbedder(dim=32))
    m.add("the rate limit is 100 requests", id="old", t=NOW - timedelta(days=60))
    m.add("the rate limit is 500 requests", id="new", t=NOW)
    then = m.search("rate limit", k=2, at_time=NOW - timedelta(days=30), mode=mode, touch=False)
    assert [r.id for r in then] == ["old", "new"]
    assert then[0].time_weight == 1.0 and then[1].time_weight == pytest.approx(1e-6)
    now = m.search("rate limit", k=2, at_time=NOW, mode=mode, touch=False)
    assert {r.time_weight for r in now} == {1.0}


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_search_scored_without_decay_weighs_later_points_future_weight(kind):
    rng = np.random.default_rng(5)
    x = pi.expmap0(rng.normal(size=(300, 8)) * 0.4).astype(np.float32)
    t_us = _time.datetime_to_micros(NOW) + rng.integers(-30, 30, size=300) * 86_400_000_000
    index = pi.PoincareFlatIndex(8) if kind == "flat" else pi.PoincareIndex(8, M=16, ef_construction=100)
    index.add(x, t=t_us.astype("datetime64[us]"))
    q = x[:5] * 0.9
    r = index.search_scored(q, k=300, at_time=NOW, ef=300)
    # the float64 reference: score = -d + log w, w = 1e-6 for points stamped after NOW (+5 min)
    later = t_us > _time.datetime_to_micros(NOW) + 5 * 60_000_000
    for qi in range(5):
        d = pi.distance(q[qi].astype(np.float64), x.astype(np.float64))
        ref = -d + np.where(later, math.log(1e-6), 0.0)
        np.testing.assert_allclose(np.sort(r.scores[qi])[::-1], np.sort(ref)[::-1], rtol=1e-5, atol=1e-5)
        assert set(r.ids[qi][: (~later).sum()].tolist()) == set(np.flatnonzero(~later).tolist())
    # a plain search (no time at all) still ranks by distance alone
    D, I = index.search(q, k=3)
    np.testing.assert_array_equal(I, index.search(q, k=3, filters={"t": {"$exists": True}})[1])


# ---- naive datetimes are local time -----------------------------------------------------------


def test_a_naive_datetime_is_local_time(tokyo):
    naive = datetime(2026, 6, 1, 21)  # 21:00 in Tokyo is 12:00 UTC
    assert _time.datetime_to_micros(naive) == _time.datetime_to_micros(NOW)
    assert _time.datetime_to_micros(naive) == round(naive.timestamp() * 1_000_000)


def test_a_memory_stamped_with_datetime_now_is_fresh_in_any_time_zone(tokyo):
    m = Memory(embedder=HashingEmbedder(dim=32), decay=pi.HalfLife(hours=24))
    m.add("just now", id="a", t=datetime.now())
    (r,) = m.search("just now", k=1, at_time=datetime.now(), touch=False)
    assert r.time_weight > 0.999  # was 1e-06: read as UTC it lay 9 hours in the future
    assert abs(r.t - datetime.now(timezone.utc)) < timedelta(minutes=1)


def test_naive_filter_operands_and_metadata_follow_the_same_rule(tokyo):
    m = Memory(embedder=HashingEmbedder(dim=32))
    m.add("breakfast", id="b", t=datetime(2026, 6, 1, 8), metadata={"due": datetime(2026, 6, 1, 9)})
    m.add("dinner", id="d", t=datetime(2026, 6, 1, 19), metadata={"due": datetime(2026, 6, 1, 20)})
    # 8:00 Tokyo is 23:00 UTC the day before
    assert m["b"].t == datetime(2026, 5, 31, 23, tzinfo=timezone.utc)
    for operand in (
        datetime(2026, 6, 1, 12),
        "2026-06-01T12:00",
        datetime(2026, 6, 1, 3, tzinfo=timezone.utc),
    ):
        assert [r.id for r in m.list(filters={"t": {"$lt": operand}})] == ["b"]
        assert [r.id for r in m.list(filters={"due": {"$lt": operand}})] == ["b"]
    assert m["b"].metadata["due"] == datetime(2026, 6, 1, 0, tzinfo=timezone.utc)


def test_numpy_times_stay_utc(tokyo):
    index = pi.PoincareFlatIndex(4)
    index.add(np.zeros((1, 4), np.float32), t=np.datetime64("2026-06-01T12:00", "us"))
    assert index.columns.column("t")[0].as_py() == NOW


def test_index_metadata_datetimes_follow_the_rule_and_arrow_data_stays_utc(tokyo):
    import pyarrow as pa

    index = pi.PoincareFlatIndex(4)
    x = np.zeros((2, 4), np.float32)
    index.add(x, metadata={"due": [datetime(2026, 6, 1, 9), None]})  # 9:00 Tokyo = 0:00 UTC
    assert index.columns.column("due")[0].as_py() == datetime(2026, 6, 1, 0, tzinfo=timezone.utc)
    found = index.search_scored(x[:1], k=2, filters={"due": {"$lt": datetime(2026, 6, 1, 10)}})
    assert found.ids[0].tolist() == [0, -1]
    arrow = pa.array([datetime(2026, 6, 1, 9), None], type=pa.timestamp("us"))  # Arrow data: UTC
    other = pi.PoincareFlatIndex(4)
    other.add(x, metadata={"due": arrow})
    assert other.columns.column("due")[0].as_py() == datetime(2026, 6, 1, 9)
    # 9:00 UTC is 18:00 in Tokyo: after a naive 10:00 (local), before a naive 19:00
    assert other.search_scored(x[:1], k=2, filters={"due": {"$lt": datetime(2026, 6, 1, 10)}}).ids[0][0] == -1
    assert other.search_scored(x[:1], k=2, filters={"due": {"$lt": datetime(2026, 6, 1, 19)}}).ids[0][0] == 0


# ---- the rule says so when it changes a result ------------------------------------------------


@pytest.fixture
def fresh_warning(monkeypatch):
    """The once-per-process NaiveTimeWarning not yet shown."""
    import threading

    monkeypatch.setattr(_time, "_naive_warning", threading.Lock())


def test_a_naive_datetime_outside_utc_warns_once_naming_the_rule_and_the_fix(tokyo, fresh_warning):
    import warnings

    m = Memory(embedder=HashingEmbedder(dim=32))
    with pytest.warns(
        _time.NaiveTimeWarning, match=r"local time .*UTC\+9 h.*utcnow.*timezone\.utc"
    ) as caught:
        m.add("stamped naive", id="a", t=datetime(2026, 6, 1, 9))
    assert caught[0].filename == __file__  # points at the caller, not into the package
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.add("again", id="b", t=datetime(2026, 6, 1, 10))  # once per process
        m.search("again", k=1, at_time=datetime(2026, 6, 2))


def test_no_warning_where_the_rule_changes_nothing(fresh_warning, monkeypatch):
    import warnings

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _time.datetime_to_micros(datetime(2026, 6, 1, 12)) == _time.datetime_to_micros(NOW)
    finally:
        monkeypatch.undo()
        time.tzset()


def test_aware_times_never_warn(tokyo, fresh_warning):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _time.datetime_to_micros(NOW)
        _time.as_time_column([NOW, NOW + timedelta(hours=1)], 2, "t")


def test_a_window_as_of_a_past_time_ends_at_that_time():
    m = Memory(embedder=HashingEmbedder(dim=32))
    for day in range(10):
        m.add(f"standup notes day {day}", id=f"d{day}", t=NOW + timedelta(days=day))
    as_of = NOW + timedelta(days=5, hours=1)
    found = {
        r.id for r in m.search("standup notes", k=10, at_time=as_of, window=timedelta(days=2), touch=False)
    }
    assert found == {"d4", "d5"}  # not d6..d9, stamped after the question's time
    tolerance = m.search(
        "standup notes", k=10, at_time=NOW + timedelta(days=5) - timedelta(minutes=3),
        window=timedelta(days=1), touch=False,
    )  # fmt: skip
    assert {r.id for r in tolerance} == {"d4", "d5"}  # within future_tolerance (5 min) counts as now
