"""ScoringSpec: every time setting checked once, when the spec is made; one spec gives the same
results as the keyword arguments it stands for; it travels (pickled, as Ray sends it) without
its core struct."""

from __future__ import annotations

import pickle
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

import poincare_index as pi
from poincare_index.scoring import ScoringSpec

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("settings", "error", "match"),
    [
        ({"decay": "half-life"}, TypeError, "decay must be a decay policy"),
        ({"depth_bias": float("nan")}, ValueError, "depth_bias"),
        ({"time_coef": float("inf")}, ValueError, "time_coef"),
        ({"time_coef": "1"}, TypeError, "time_coef"),
        ({"future_weight": 0.0}, ValueError, "future_weight"),
        ({"future_weight": 2.0}, ValueError, "future_weight"),
        ({"future_tolerance": 5}, TypeError, "future_tolerance"),
        ({"future_tolerance": timedelta(days=2)}, ValueError, "future_tolerance"),
    ],
)
def test_a_bad_setting_is_refused_when_the_spec_is_made(settings, error, match):
    with pytest.raises(error, match=match):
        ScoringSpec.at(NOW, **settings)
    good = ScoringSpec.at(NOW)
    with pytest.raises(error, match=match):
        good.replace(**settings)  # a changed copy is checked the same way


def test_the_query_time_is_checked():
    with pytest.raises(TypeError, match="at_us must be an int"):
        ScoringSpec(1.5)
    with pytest.raises(TypeError, match="at_us must be an int"):
        ScoringSpec(True)
    with pytest.raises(ValueError, match="at_us .* is outside the supported times"):
        ScoringSpec(2**62)
    with pytest.raises(TypeError, match="at_time"):
        ScoringSpec.at("yesterday")
    spec = ScoringSpec.at(NOW)
    assert spec.at_us == int(NOW.timestamp()) * 1_000_000
    assert spec.core().at_us == spec.at_us and spec.core() is spec.core()


def test_a_spec_scores_as_the_keyword_arguments_it_stands_for():
    rng = np.random.default_rng(5)
    x = pi.project(rng.normal(size=(400, 8)) * 0.2)
    t = np.datetime64("2026-05-01", "us") + (np.arange(400) * 3_600_000_000).astype("timedelta64[us]")
    index = pi.PoincareIndex(8, seed=0, num_threads=1)
    index.add(x, t=t)
    settings = {"decay": pi.HalfLife(hours=48), "depth_bias": 0.2, "time_coef": 0.7}
    by_words = index.search_scored(x[:20], 10, at_time=NOW, **settings)
    by_spec = index._search_scoring(x[:20], 10, ScoringSpec.at(NOW, **settings))
    np.testing.assert_array_equal(by_words.ids, by_spec.ids)
    np.testing.assert_array_equal(by_words.scores, by_spec.scores)
    with pytest.raises(TypeError, match="ScoringSpec"):
        index._search_scoring(x[:1], 1, settings)


def test_a_pickled_spec_leaves_its_core_struct_behind_and_makes_it_again():
    spec = ScoringSpec.at(NOW, decay=pi.Ebbinghaus(stability_hours=10.0), time_coef=0.5)
    spec.core()
    back = pickle.loads(pickle.dumps(spec))
    assert back == spec and back._core_spec is None
    assert back.core().time_coef == 0.5 and back.reads_access
