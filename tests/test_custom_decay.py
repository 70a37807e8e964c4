"""CustomDecay: a numba-compiled weight the core calls per candidate, against the same formula
in numpy; its declared bound checked on a grid; in search_scored, Product and Memory."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

pytest.importorskip("numba")

from reference import fused_brute_force  # noqa: E402

import poincare_index as pi  # noqa: E402
from poincare_index import _core, _time  # noqa: E402
from poincare_index.decay import log_weight_bound, policy_terms  # noqa: E402

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


def spaced(age_hours, access_count):
    # a spaced-repetition curve: stability grows with the square root of the accesses
    return math.exp(-age_hours / (48.0 * (1.0 + math.sqrt(access_count))))


def spaced_numpy(age_hours, access_count):
    return np.exp(-age_hours / (48.0 * (1.0 + np.sqrt(access_count))))


def stepped(age_hours, access_count):
    # non-increasing in age but not smooth: full weight for a day, then a tenth
    return 1.0 if age_hours < 24.0 else 0.1


def test_weights_in_the_core_equal_the_numpy_formula():
    policy = pi.CustomDecay(spaced, bound="age_and_access")
    rng = np.random.default_rng(3)
    n = 400
    at = _time.datetime_to_micros(NOW)
    t = at - rng.integers(0, 400 * 86_400_000_000, n)
    access = rng.integers(0, 50, n).astype(np.uint32)
    spec = _core.ScoreSpec(policy_terms(policy), at, 1e-6, 0, 0.0, 1.0)
    columns = (t, np.full(n, _time.OPEN_START), np.full(n, _time.OPEN_END), access)
    got = _core.decay_log_weights_of_rows(spec, columns, np.arange(n))
    age = (at - t) / 3.6e9
    np.testing.assert_allclose(got, np.log(spaced_numpy(age, access.astype(np.float64))), rtol=1e-12)
    # and the policy's own numpy path (weight) agrees
    w = policy.weight(t.astype("datetime64[us]"), NOW, access_count=access)
    np.testing.assert_allclose(w, spaced_numpy(age, access.astype(np.float64)), rtol=1e-12)


HALF_LIFE_HOURS = 24.0


def global_half_life(age_hours, access_count):
    return 0.5 ** (age_hours / HALF_LIFE_HOURS)


def test_globals_are_read_once_when_the_policy_is_compiled(monkeypatch):
    # The docstring's promise: a global changed after construction does not change the policy.
    policy = pi.CustomDecay(global_half_life, bound="age")
    t = np.array([(NOW - timedelta(hours=24)).replace(tzinfo=None)], dtype="datetime64[us]")
    monkeypatch.setitem(globals(), "HALF_LIFE_HOURS", 1.0)
    w = policy.weight(t, NOW, access_count=np.zeros(1, dtype=np.uint32))
    np.testing.assert_allclose(w, [0.5], rtol=1e-12)
    fresh = pi.CustomDecay(global_half_life, bound="age", name="fresh")
    np.testing.assert_allclose(
        fresh.weight(t, NOW, access_count=np.zeros(1, dtype=np.uint32)), [0.5**24], rtol=1e-12
    )


def test_declared_bounds_are_checked_on_a_grid():
    with pytest.raises(ValueError, match="non-increasing in age"):
        pi.CustomDecay(lambda a, c: min(1.0, 0.5 + a / 1e6), bound="age")
    with pytest.raises(ValueError, match="non-decreasing in the access count"):
        pi.CustomDecay(lambda a, c: math.exp(-a * (1 + c) / 100), bound="age_and_access")
    with pytest.raises(ValueError, match=r"outside \(0, 1\]"):
        pi.CustomDecay(lambda a, c: 2.0 - math.exp(-a), bound="none")
    with pytest.raises(ValueError, match=r"outside \(0, 1\]"):
        pi.CustomDecay(lambda a, c: math.exp(-a) - 0.5, bound="none")
    with pytest.raises(ValueError, match="bound must be one of"):
        pi.CustomDecay(spaced, bound="monotone")
    with pytest.raises(TypeError, match="function of"):
        pi.CustomDecay("exp(-age)")
    holder = object()  # a Python object: nopython mode cannot read it
    with pytest.raises(TypeError, match="numba cannot compile"):
        pi.CustomDecay(lambda a, c: holder.weight)
    # a bound that holds: no error; one that only needs "age"
    pi.CustomDecay(lambda a, c: math.exp(-a * (1 + c) / 100), bound="age")
    assert pi.CustomDecay(stepped, bound="age").name == "stepped"


def test_bounds_over_buckets_bound_every_weight_in_them():
    policies = [
        pi.CustomDecay(spaced, bound="age_and_access"),
        pi.CustomDecay(lambda a, c: math.exp(-a * (1 + c) / 100), bound="age", name="faster_with_use"),
        pi.CustomDecay(stepped, bound="none"),
        pi.Product(pi.HalfLife(hours=24), pi.CustomDecay(stepped, bound="age")),
    ]
    rng = np.random.default_rng(8)
    for policy in policies:
        for _ in range(50):
            min_age = float(rng.uniform(0, 500))
            max_access = int(rng.integers(0, 40))
            bound = log_weight_bound(policy, min_age, max_access)
            ages = min_age + rng.uniform(0, 300, 64)
            counts = rng.integers(0, max_access + 1, 64).astype(np.float64)
            t = np.datetime64(NOW.replace(tzinfo=None), "us") - (ages * 3.6e9).astype("timedelta64[us]")
            logw = policy.log_weight(t, NOW, access_count=counts, future_tolerance=timedelta(0))
            assert np.all(logw <= bound + 1e-9), (policy, min_age, max_access)


@pytest.mark.parametrize("kind", ["flat", "hnsw"])
def test_search_scored_equals_the_fused_brute_force(kind, tree_data):
    base, queries = tree_data
    base, queries = base[:1500], queries[:20]
    rng = np.random.default_rng(4)
    t = np.datetime64("2026-06-01T12:00", "us") - (rng.uniform(0, 24 * 60, len(base)) * 3.6e9).astype(
        "timedelta64[us]"
    )
    index = pi.PoincareFlatIndex(base.shape[1]) if kind == "flat" else pi.PoincareIndex(base.shape[1])
    index.add(base, t=t)
    counts = rng.integers(0, 8, len(base)).astype(np.uint32)
    index._columns.set_access(np.arange(len(base)), counts)
    policy = pi.CustomDecay(spaced, bound="age_and_access")
    res = index.search_scored(queries, 10, decay=policy, at_time=NOW, time_coef=1.0, ef=400)
    age = (np.datetime64("2026-06-01T12:00", "us") - t).astype(np.float64) / 3.6e9
    logw = np.log(spaced_numpy(age, counts.astype(np.float64)))
    scores, ids = fused_brute_force(base, queries, 10, logw, depth_bias=0.0, time_coef=1.0)
    np.testing.assert_allclose(res.scores, scores, rtol=1e-6, atol=1e-6)
    if kind == "flat":
        np.testing.assert_array_equal(res.ids, ids)
    else:
        assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(res.ids, ids)]) >= 0.95


def test_product_with_a_custom_term_equals_the_product_of_weights():
    custom = pi.CustomDecay(spaced, bound="age_and_access")
    both = pi.Product(pi.HalfLife(hours=24 * 7), custom)
    t = np.datetime64("2026-05-01", "us") + np.arange(5) * np.timedelta64(86_400_000_000, "us")
    w = both.weight(t, NOW, access_count=np.arange(5))
    want = pi.HalfLife(hours=24 * 7).weight(t, NOW) * custom.weight(t, NOW, access_count=np.arange(5))
    np.testing.assert_allclose(w, want, rtol=1e-12)


def test_memory_with_a_custom_decay_saves_a_reference_and_needs_it_back(tmp_path):
    custom = pi.CustomDecay(spaced, bound="age_and_access", name="spaced-v1")
    mem = pi.Memory(path=tmp_path / "store", decay=custom)
    mem.add("the deploy runs on fridays", id="a", t=NOW - timedelta(days=3))
    mem.add("the deploy runs on mondays", id="b", t=NOW - timedelta(hours=2))
    first = [r.id for r in mem.search("deploy", k=2, at_time=NOW, touch=False)]
    mem.close()
    saved = "".join(p.read_text() for p in (tmp_path / "store").rglob("*.json"))
    assert '"name": "spaced-v1"' in saved and "math" not in saved  # a name, never code
    with pytest.raises(ValueError, match="CustomDecay 'spaced-v1'.*pass decay="):
        pi.Memory(path=tmp_path / "store")
    again = pi.Memory(path=tmp_path / "store", decay=custom)
    assert [r.id for r in again.search("deploy", k=2, at_time=NOW, touch=False)] == first == ["b", "a"]
    again.close()


def test_ray_carries_the_function_and_the_receiver_compiles_its_own_callback():
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    policy = pi.CustomDecay(spaced, bound="age_and_access", name="spaced-v1")
    back = cloudpickle.loads(cloudpickle.dumps(policy))
    assert back.name == "spaced-v1" and back.bound == "age_and_access"
    t = np.datetime64("2026-05-20", "us")
    assert back.weight(t, NOW, access_count=3) == policy.weight(t, NOW, access_count=3)
