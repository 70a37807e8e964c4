"""Decay policies: hand-computed values, parameter checks, and the C++ evaluation against numpy."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

import poincare_index as pi
from poincare_index import _core, _time
from poincare_index.decay import policy_terms

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


def test_half_life_hand_values():
    p = pi.HalfLife(hours=24 * 14)
    assert p.weight(NOW - timedelta(days=28), NOW) == pytest.approx(0.25, rel=1e-12)
    assert p.weight(NOW - timedelta(days=14), NOW) == pytest.approx(0.5, rel=1e-12)
    assert p.weight(NOW, NOW) == 1.0


def test_generative_agents_recency_is_0995_per_hour():
    p = pi.generative_agents_recency()
    assert p.hours == pytest.approx(138.28, abs=0.01)
    for h in (1, 10, 100):
        assert p.weight(NOW - timedelta(hours=h), NOW) == pytest.approx(0.995**h, rel=1e-12)


def test_ebbinghaus_strengthens_with_access():
    p = pi.Ebbinghaus(stability_hours=24, boost_per_access=0.5)
    t = NOW - timedelta(days=1)
    assert p.weight(t, NOW) == pytest.approx(math.exp(-1), rel=1e-12)
    assert p.weight(t, NOW, access_count=2) == pytest.approx(math.exp(-0.5), rel=1e-12)


def test_validity_window_open_and_closed_ends():
    p = pi.ValidityWindow(outside_weight=1e-3)
    t = NOW - timedelta(days=5)
    assert p.weight(t, NOW) == 1.0  # both ends open
    assert p.weight(t, NOW, valid_until=NOW - timedelta(days=1)) == pytest.approx(1e-3)
    assert p.weight(t, NOW, valid_until=NOW) == pytest.approx(1e-3)  # until is exclusive
    assert p.weight(t, NOW, valid_from=NOW) == 1.0  # from is inclusive
    assert p.weight(t, NOW, valid_from=NOW + timedelta(seconds=1)) == pytest.approx(1e-3)


def test_exponential_and_product():
    e = pi.Exponential(rate=2.0, per=timedelta(days=1))
    assert e.weight(NOW - timedelta(hours=12), NOW) == pytest.approx(math.exp(-1), rel=1e-12)
    p = pi.Product(pi.HalfLife(hours=10), pi.ValidityWindow())
    w = p.weight(NOW - timedelta(hours=20), NOW, valid_until=NOW - timedelta(hours=1))
    assert w == pytest.approx(0.25 * 1e-6, rel=1e-12)


def test_future_points_get_future_weight():
    p = pi.HalfLife(hours=1)
    assert p.weight(NOW + timedelta(hours=1), NOW) == pytest.approx(1e-6)
    assert p.weight(NOW + timedelta(hours=1), NOW, future_weight=0.5) == pytest.approx(0.5)


def test_arrays_and_naive_datetimes():
    p = pi.HalfLife(hours=24)
    naive_now = NOW.replace(tzinfo=None)
    ts = np.array(["2026-05-31T12:00", "2026-05-30T12:00"], dtype="datetime64[us]")
    np.testing.assert_allclose(p.weight(ts, naive_now), [0.5, 0.25], rtol=1e-12)


@pytest.mark.parametrize(
    "make",
    [
        lambda: pi.HalfLife(hours=0),
        lambda: pi.HalfLife(hours=-1),
        lambda: pi.HalfLife(hours=float("nan")),
        lambda: pi.Ebbinghaus(stability_hours=0),
        lambda: pi.Ebbinghaus(stability_hours=1, boost_per_access=-1),
        lambda: pi.ValidityWindow(outside_weight=0),
        lambda: pi.ValidityWindow(outside_weight=1.5),
        lambda: pi.Exponential(rate=-1),
        lambda: pi.Exponential(rate=1, per=timedelta(0)),
        lambda: pi.Product(),
    ],
)
def test_invalid_parameters_raise_value_error(make):
    with pytest.raises(ValueError):
        make()


def test_wrong_types_raise_type_error():
    with pytest.raises(TypeError):
        pi.HalfLife(hours="24")
    with pytest.raises(TypeError):
        pi.Product(pi.HalfLife(hours=1), 3)
    with pytest.raises(TypeError):
        pi.Exponential(rate=1, per=24)
    with pytest.raises(ValueError, match="NaT"):
        pi.HalfLife(hours=1).weight(NOW, np.datetime64("NaT"))


POLICIES = [
    pi.HalfLife(hours=24 * 14),
    pi.Ebbinghaus(stability_hours=24 * 7, boost_per_access=0.5),
    pi.ValidityWindow(),
    pi.Exponential(rate=0.3, per=timedelta(hours=6)),
    pi.Product(pi.HalfLife(hours=24 * 90), pi.ValidityWindow(outside_weight=1e-4)),
    pi.generative_agents_recency(),
]


@pytest.mark.parametrize("tolerance", [timedelta(0), timedelta(minutes=5), timedelta(days=1)])
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: type(p).__name__)
def test_core_weights_equal_numpy_reference(policy, tolerance):
    rng = np.random.default_rng(5)
    n = 500
    at = _time.datetime_to_micros(NOW)
    year = 365 * 24 * 3_600_000_000
    t = at - rng.integers(-year // 20, year, n)  # a few in the future
    t[:60] = at + rng.integers(-3_600_000_000, 2 * 86_400_000_000, 60)  # around the tolerance
    t[60] = at + tolerance // timedelta(microseconds=1)  # on its edge: still counts as now
    vf = np.where(rng.random(n) < 0.5, _time.OPEN_START, t + rng.integers(0, year // 4, n))
    vu = np.where(rng.random(n) < 0.5, _time.OPEN_END, vf.clip(min=t) + rng.integers(1, year // 2, n))
    access = rng.integers(0, 20, n).astype(np.uint32)
    tolerance_us = tolerance // timedelta(microseconds=1)
    got = _core.decay_log_weights_of_rows(
        _core.ScoreSpec(policy_terms(policy), at, 1e-6, tolerance_us, 0.0, 1.0),
        (t, vf, vu, access),
        np.arange(n),
    )
    ref = policy.log_weight(
        t.astype("datetime64[us]"),
        NOW,
        np.where(vf == _time.OPEN_START, np.datetime64("NaT"), vf.astype("datetime64[us]")),
        np.where(vu == _time.OPEN_END, np.datetime64("NaT"), vu.astype("datetime64[us]")),
        access,
        future_tolerance=tolerance,
    )
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    future = t > at + tolerance_us
    assert np.all(got[future] == pytest.approx(np.log(1e-6))) and future.any()
    assert got[60] != pytest.approx(np.log(1e-6)) or type(policy).__name__ == "ValidityWindow"
    # the same program on rows picked from the columns (what keyword/hybrid search calls)
    rows = rng.integers(0, n, 200)
    picked = _core.decay_log_weights_of_rows(
        _core.ScoreSpec(policy_terms(policy), at, 1e-6, tolerance_us, 0.0, 1.0), (t, vf, vu, access), rows
    )
    np.testing.assert_array_equal(picked, got[rows])


@pytest.mark.parametrize("policy", [None, *POLICIES], ids=lambda p: type(p).__name__)
def test_core_rank_with_time_term_equals_a_numpy_reference(policy):
    rng = np.random.default_rng(11)
    n_rows, n = 400, 300
    at = _time.datetime_to_micros(NOW)
    t = at - rng.integers(0, 365 * 24 * 3_600_000_000, n_rows)
    vf = np.full(n_rows, _time.OPEN_START)
    vu = np.full(n_rows, _time.OPEN_END)
    access = rng.integers(0, 9, n_rows).astype(np.uint32)
    rows = np.sort(rng.choice(n_rows, n, replace=False))
    relevance = np.round(rng.normal(size=n), 1)  # many ties, broken by row
    relevance[:40] = 0.5
    tau = 0.7
    terms = policy_terms(policy)
    logw = _core.decay_log_weights_of_rows(
        _core.ScoreSpec(terms, at, 1e-6, 0, 0.0, 1.0), (t, vf, vu, access), rows
    )
    want = relevance + tau * logw
    for k in (0, 1, 25, n, n + 10):
        keys, top = _core.rank_with_time_term(
            _core.ScoreSpec(terms, at, 1e-6, 0, 0.0, tau), (t, vf, vu, access), rows, relevance, k
        )
        np.testing.assert_allclose(keys, want, rtol=0, atol=1e-12)
        ref = np.lexsort((rows, -want))[:k]  # by key, ties by the smaller row
        assert top.tolist() == ref.tolist()
    with pytest.raises(ValueError, match="outside the time columns"):
        _core.rank_with_time_term(
            _core.ScoreSpec(terms, at, 1e-6, 0, 0.0, tau),
            (t, vf, vu, access),
            np.array([n_rows]),
            relevance[:1],
            1,
        )
    with pytest.raises(ValueError, match="NaN"):
        _core.rank_with_time_term(
            _core.ScoreSpec(terms, at, 1e-6, 0, 0.0, tau),
            (t, vf, vu, access),
            rows[:1],
            np.array([np.nan]),
            1,
        )
    with pytest.raises(ValueError, match="differ in length"):
        _core.rank_with_time_term(
            _core.ScoreSpec(terms, at, 1e-6, 0, 0.0, tau), (t, vf, vu, access), rows, relevance[:3], 1
        )


def test_core_weights_of_rows_refuse_rows_outside_the_columns():
    t = np.zeros(3, dtype=np.int64)
    access = np.zeros(3, dtype=np.uint32)
    terms = policy_terms(pi.HalfLife(hours=1))
    for bad in ([0, 3], [-1]):
        with pytest.raises(ValueError, match="outside the time columns"):
            _core.decay_log_weights_of_rows(
                _core.ScoreSpec(terms, 0, 1e-6, 0, 0.0, 1.0), (t, t, t, access), np.array(bad)
            )
    with pytest.raises(ValueError, match="differ in length"):
        _core.decay_log_weights_of_rows(
            _core.ScoreSpec(terms, 0, 1e-6, 0, 0.0, 1.0), (t, t[:2], t, access), np.array([0])
        )


def test_a_stamp_a_few_seconds_ahead_counts_as_now_not_as_the_future():
    """Clock skew: a memory written "now" on a machine whose clock runs 30 s ahead."""
    p = pi.HalfLife(hours=24)
    assert p.weight(NOW + timedelta(seconds=30), NOW) == 1.0
    assert p.weight(NOW + timedelta(minutes=6), NOW) == pytest.approx(1e-6)
    assert p.weight(NOW + timedelta(seconds=30), NOW, future_tolerance=timedelta(0)) == pytest.approx(1e-6)
    with pytest.raises(TypeError, match="timedelta"):
        p.weight(NOW, NOW, future_tolerance=300)
    with pytest.raises(ValueError, match="one day"):
        p.weight(NOW, NOW, future_tolerance=timedelta(days=2))
