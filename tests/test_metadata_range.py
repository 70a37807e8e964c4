"""Datetime metadata outside 1678-01-01 .. 2261-12-31 UTC (what the Memory's log reads back) is
refused at add, naming the key and the row: accepted, it made the store unopenable after a kill
before a checkpoint. In-range datetimes, the edges included, come back from the log."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

import poincare_index as pi
from poincare_memory import Memory

PLUS2, MINUS2 = timezone(timedelta(hours=2)), timezone(timedelta(hours=-2))
RANGE = "outside the supported times 1678-01-01 .. 2261-12-31 UTC"


def _reopened(path) -> Memory:
    """The store at ``path`` as a new process finds it: from its log, no checkpoint taken."""
    return Memory(path=path)


@pytest.mark.parametrize(
    "value",
    [
        datetime(1500, 1, 1),
        datetime(2262, 1, 1, tzinfo=timezone.utc),
        datetime(1678, 1, 1, 1, tzinfo=PLUS2),  # 1677-12-31T23:00Z
        datetime(2261, 12, 31, 23, tzinfo=MINUS2),  # 2262-01-01T01:00Z
    ],
)
def test_a_datetime_outside_the_range_is_refused_at_add(tmp_path, value):
    mem = Memory(path=tmp_path)
    with pytest.raises(ValueError, match=rf"memory 0 \(id 'a'\): metadata 'born' .*{RANGE}"):
        mem.add("hello there", id="a", metadata={"born": value})
    assert len(mem) == 0
    mem._ns.unlock()  # the process dies: nothing was logged, the store opens
    again = _reopened(tmp_path)
    assert len(again) == 0
    again.close()


def test_add_many_and_update_name_the_row_and_the_key(tmp_path):
    mem = Memory(path=tmp_path)
    metas = [{"born": datetime(1900, 1, 1)}, {"x": 1, "died": datetime(1500, 6, 1)}]
    with pytest.raises(
        ValueError, match=rf"memory 1: metadata 'died' \(1500-06-01T00:00:00\+00:00\) .*{RANGE}"
    ):
        mem.add_many(["first text", "second text"], metadata=metas)
    assert len(mem) == 0
    mem.add("kept text", id="k", metadata={"born": datetime(1900, 1, 1)})
    with pytest.raises(ValueError, match=rf"memory 0 \(id 'k'\): metadata 'born' .*{RANGE}"):
        mem.update("k", metadata={"born": datetime(1500, 1, 1)})
    assert mem["k"].metadata["born"] == datetime(1900, 1, 1, tzinfo=timezone.utc)
    mem._ns.unlock()
    again = _reopened(tmp_path)
    assert again["k"].metadata["born"] == datetime(1900, 1, 1, tzinfo=timezone.utc)
    again.close()


def test_in_range_datetimes_come_back_from_the_log_after_a_kill(tmp_path):
    edges = {
        "first": datetime(1678, 1, 1, tzinfo=timezone.utc),
        "last": datetime(2261, 12, 31, 23, 59, 59, 999999),
        "local": datetime(1678, 1, 1, 3, tzinfo=PLUS2),  # 1678-01-01T01:00Z
    }
    mem = Memory(path=tmp_path)
    mem.add("edges of the range", id="e", metadata=edges)
    mem.add("plain", id="p", metadata={"last": datetime(2000, 1, 1)})
    mem.update("p", metadata={"first": datetime(1700, 1, 1)})
    want = {k: mem[k].metadata for k in ("e", "p")}
    reader = Memory(path=tmp_path, read_only=True)  # reads the same log while the writer lives
    assert reader["e"].metadata["first"] == edges["first"]
    reader.close()
    mem._ns.unlock()  # simulate the process dying: no close, no checkpoint
    again = _reopened(tmp_path)
    got = again["e"].metadata
    assert got["first"] == edges["first"]
    assert got["last"] == edges["last"].replace(tzinfo=timezone.utc)
    assert got["local"] == edges["local"]
    assert again["p"].metadata["first"] == datetime(1700, 1, 1, tzinfo=timezone.utc)
    assert {k: again[k].metadata for k in want} == want
    again.close()


def test_a_killed_writer_with_out_of_range_metadata_in_a_subprocess_leaves_an_openable_store(tmp_path):
    import subprocess
    import sys
    import textwrap

    child = textwrap.dedent(
        f"""
        import os
        from datetime import datetime
        from poincare_memory import Memory
        mem = Memory(path={str(tmp_path)!r})
        mem.add("in range", id="ok", metadata={{"born": datetime(1900, 1, 1)}})
        try:
            mem.add("out of range", id="bad", metadata={{"born": datetime(1500, 1, 1)}})
        except ValueError:
            print("refused", flush=True)
        os._exit(0)
        """
    )
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "refused"
    mem = _reopened(tmp_path)
    assert "ok" in mem and "bad" not in mem
    mem.close()


def test_the_index_names_the_row_of_a_time_past_what_datetime_holds():
    index = pi.PoincareFlatIndex(2)
    x = [[0.1, 0.0], [0.0, 0.1]]
    with pytest.raises(
        ValueError, match="metadata column 'due' row 1 holds a time outside the years 1..9999"
    ):
        index.add(x, metadata={"due": pa.array([0, 2**62], pa.timestamp("us"))})


def test_the_langchain_store_refuses_it_through_the_memory(tmp_path):
    # (LlamaIndex hands its stores datetimes as ISO strings: nothing to refuse there.)
    if not os.environ.get("CI"):
        pytest.importorskip("langchain_core")
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from poincare_index.integrations.langchain import PoincareVectorStore

    store = PoincareVectorStore(DeterministicFakeEmbedding(size=8), path=tmp_path / "lc")
    with pytest.raises(ValueError, match=rf"metadata 'metadata\.born' .*{RANGE}"):
        store.add_texts(["a text"], [{"born": datetime(1500, 1, 1)}])
    store.add_texts(["a text"], [{"born": datetime(1678, 1, 1)}], ids=["a"])
    store.close()
    again = PoincareVectorStore(DeterministicFakeEmbedding(size=8), path=tmp_path / "lc")
    assert again.get_by_ids(["a"])[0].metadata["born"] == datetime(1678, 1, 1)
    again.close()
