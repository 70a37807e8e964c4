"""Per-query time settings and the clock-skew tolerance of Memory.search."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from poincare_memory import HalfLife, Memory

AT = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)


def two_facts(**kwargs) -> Memory:
    mem = Memory(decay=HalfLife(hours=24 * 30), time_coef=0.0, **kwargs)
    mem.add("the deploy window is tuesday", id="old", t=AT - timedelta(days=120))
    mem.add("the deploy window moved to thursday", id="new", t=AT - timedelta(hours=1))
    return mem


def test_time_coef_for_one_call_lets_recency_dominate():
    mem = two_facts()
    plain = mem.search("deploy window tuesday", k=2, at_time=AT, touch=False)
    assert [r.id for r in plain] == ["old", "new"]  # the store's time_coef=0: distance alone
    recent = mem.search("deploy window tuesday", k=2, at_time=AT, touch=False, time_coef=5.0)
    assert [r.id for r in recent] == ["new", "old"] and recent[0].time_coef == 5.0
    for mode in ("keyword", "hybrid"):
        got = mem.search("deploy window tuesday", k=2, at_time=AT, touch=False, time_coef=5.0, mode=mode)
        assert got[0].id == "new", mode
    again = mem.search("deploy window tuesday", k=2, at_time=AT, touch=False)
    assert [r.id for r in again] == ["old", "new"]  # the override did not stick
    no_decay = mem.search("deploy window tuesday", k=2, at_time=AT, touch=False, decay=None, time_coef=5.0)
    assert [r.id for r in no_decay] == ["old", "new"] and no_decay[0].time_weight == 1.0


def test_bad_overrides_are_refused_naming_them():
    mem = two_facts()
    with pytest.raises(TypeError, match="decay"):
        mem.search("deploy", decay="half-life")
    with pytest.raises(ValueError, match="time_coef"):
        mem.search("deploy", time_coef=float("nan"))
    with pytest.raises(TypeError, match="future_tolerance"):
        mem.search("deploy", future_tolerance=30)


def test_a_memory_stamped_seconds_ahead_by_another_clock_is_not_the_future(tmp_path):
    mem = Memory(decay=HalfLife(hours=1), path=tmp_path)
    mem.add("the on-call engineer is dana", id="skewed", t=AT + timedelta(seconds=40))
    mem.add("the on-call engineer was sam", id="older", t=AT - timedelta(hours=3))
    got = mem.search("on-call engineer", k=2, at_time=AT, touch=False)
    assert got[0].id == "skewed" and got[0].time_weight == 1.0
    strict = mem.search("on-call engineer", k=2, at_time=AT, touch=False, future_tolerance=timedelta(0))
    assert strict[0].id == "older" and strict[1].time_weight == pytest.approx(1e-6)
    mem.close()
    with Memory(path=tmp_path, future_tolerance=timedelta(0)) as tight:  # saved with the store
        assert tight.search("on-call engineer", k=2, at_time=AT, touch=False)[0].id == "older"
    with Memory(path=tmp_path, read_only=True) as reopened:
        assert reopened.search("on-call engineer", k=2, at_time=AT, touch=False)[0].id == "older"


@pytest.mark.parametrize("candidates", [1, 5, 50])
def test_hybrid_with_a_decay_finds_the_recent_memory_among_many_equal_matches(candidates):
    """Both sides of the fusion are cut by their time-aware score: one 1-hour-old memory among
    3,000 year-old ones that match the query as well is found at any ``candidates``."""
    mem = Memory(decay=HalfLife(hours=24 * 30))
    year_old = [AT - timedelta(days=365, minutes=i) for i in range(3000)]
    mem.add_many([f"database failover runbook step {i}" for i in range(3000)], t=year_old)
    mem.add("database failover runbook step new", id="recent", t=AT - timedelta(hours=1))
    for mode in ("hybrid", "keyword", "vector"):
        got = mem.search(
            "database failover runbook", k=3, at_time=AT, touch=False, mode=mode, candidates=candidates
        )
        assert got[0].id == "recent", (mode, [r.id for r in got])
