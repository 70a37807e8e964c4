"""stats(): retrieval counters that last across reopening, per period and per session."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

import poincare_index as pi
from poincare_memory import Memory


def test_counters_persist_across_reopen_and_answer_per_period_and_session(tmp_path):
    now = datetime.now(timezone.utc)
    with Memory(path=tmp_path) as mem:
        mem.add("the api rate limit is 250 rps", id="a", t=now)
        mem.add("the deploy window is thursday", id="b", t=now)
        mem.search("rate limit", k=1)
        with mem.session("chat-7") as s:
            s.add("the user prefers tea", t=now)
            s.search("tea", k=1)
            s.search("tea", k=1)
        first = mem.stats()
    assert first.retrievals == 3 and first.sessions["chat-7"].retrievals == 2
    with Memory(path=tmp_path) as mem:  # reopened: the counts continue
        assert mem.stats() == first
        mem.search("deploy", k=1)  # no write since the last checkpoint: saved on close
    with Memory(path=tmp_path, read_only=True) as reader:
        later = reader.stats()
        assert later.retrievals == 4 and later.tokens_retrieved > first.tokens_retrieved
        assert reader.stats(since=now + timedelta(hours=2)).retrievals == 0
        assert reader.stats(since=now - timedelta(hours=1)).retrievals == 4
        assert later.tokens_per_retrieval == pytest.approx(later.tokens_retrieved / 4)


def test_a_crafted_usage_file_is_refused(tmp_path):
    from fuzz.mutators import _write_json

    with Memory(path=tmp_path) as mem:
        mem.add("x fact", id="x")
        mem.search("x", k=1)
    path = tmp_path / "default" / "usage.json"
    doc = json.loads(path.read_text())
    doc["buckets"][0][2] = -5
    _write_json(path, doc, checksum=True)
    with pytest.raises(pi.IndexFormatError, match="searches"):
        Memory(path=tmp_path, read_only=True)
