"""The code examples of the "Time and forgetting" document, verbatim, with what they must print."""

from __future__ import annotations

import textwrap

HALF_LIFE = textwrap.dedent(
    """
    from datetime import datetime, timedelta, timezone
    from poincare_memory import HalfLife, Memory, generative_agents_recency

    now = datetime.now(timezone.utc)
    mem = Memory(decay=HalfLife(hours=24 * 14))
    mem.add("Calf tightness after hill sprints", id="a", t=now - timedelta(days=28))
    mem.add("Completed 6 x 300 m at 95 %, felt strong", id="b", t=now - timedelta(days=1))
    for r in mem.search("training this week", k=2):
        print(r.id, round(r.time_weight, 3))
    """
)

EBBINGHAUS = textwrap.dedent(
    """
    from poincare_memory import Ebbinghaus

    mem = Memory(decay=Ebbinghaus(stability_hours=24 * 7, boost_per_access=0.5))
    """
)

VALIDITY = textwrap.dedent(
    """
    from poincare_memory import Product, ValidityWindow

    mem = Memory(decay=Product(HalfLife(hours=24 * 90), ValidityWindow()))
    mem.add(
        "API rate limit is 100 rps (release 2.3)",
        id="old",
        t=now - timedelta(days=90),
        valid_until=now - timedelta(days=20),
    )
    mem.add(
        "API rate limit is 250 rps (release 2.4)",
        id="new",
        t=now - timedelta(days=20),
        valid_from=now - timedelta(days=20),
    )
    print([r.id for r in mem.search("rate limit", k=2)])  # ['new', 'old']
    print(
        [r.id for r in mem.search("rate limit", k=2, at_time=now - timedelta(days=40))]
    )  # ['old', 'new']
    """
)


def test_half_life_example_prints_the_documented_weights(capsys):
    scope: dict = {}
    exec(HALF_LIFE, scope)
    lines = capsys.readouterr().out.split()
    # "A memory 28 days old under a 14-day half-life has weight 0.25"; the 1-day-old one
    # weighs 2^(-1/14) = 0.952 and ranks first (the texts are equally unrelated to the query).
    assert lines == ["b", "0.952", "a", "0.25"]
    assert abs(scope["generative_agents_recency"]().hours - 138.3) < 0.1


def test_ebbinghaus_example_and_access_strengthening(capsys):
    scope: dict = {}
    exec(HALF_LIFE, scope)
    exec(EBBINGHAUS, scope)
    mem, now, timedelta = scope["mem"], scope["now"], scope["timedelta"]
    mem.add("knee felt fine on the long run", id="x", t=now - timedelta(days=7))
    before = mem.search("knee", k=1, at_time=now)[0]  # counts one access
    after = mem.search("knee", k=1, at_time=now)[0]
    # S = 168 h * (1 + 0.5 * accesses): weight e^(-168/168) then e^(-168/252)
    assert abs(before.time_weight - 0.36788) < 1e-4
    assert abs(after.time_weight - 0.51342) < 1e-4
    assert after.access_count == 2


def test_validity_example_prints_new_old_then_old_new(capsys):
    scope: dict = {}
    exec(HALF_LIFE, scope)
    capsys.readouterr()
    exec(VALIDITY, scope)
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["['new', 'old']", "['old', 'new']"]
