"""Retention as configuration: the writer applies it on its own schedule, archiving first."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow.parquet as pq
import pytest

from poincare_index.memory.retention import RetentionRun
from poincare_memory import Memory, Retention

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_the_writer_applies_retention_when_due_and_archives_each_run(tmp_path):
    clock = Clock(T0 + timedelta(days=40))
    archive = tmp_path / "archive"
    archive.mkdir()
    with Memory(path=tmp_path / "store") as mem:  # forty days of history, no policy yet
        mem.add_many([f"note {d}" for d in range(40)], [f"d{d}" for d in range(40)],
                     t=[T0 + timedelta(days=d) for d in range(40)])  # fmt: skip
    policy = Retention(max_age=timedelta(days=30), archive_dir=archive, every=timedelta(hours=6), clock=clock)
    mem = Memory(path=tmp_path / "store", retention=policy)
    assert len(mem) == 40  # opening deletes nothing
    mem.add("fresh", id="fresh", t=clock.now)  # the first write after opening: due
    assert len(mem) == 31 and "d9" not in mem and "d10" in mem  # older than 30 days: gone
    (first,) = sorted(archive.iterdir())
    assert first.name == "memories-20260101T000000Z--20260110T000000Z.parquet"
    assert sorted(pq.read_table(first).column("id").to_pylist()) == sorted(
        f"d{d}" for d in range(9 + 1) if d < 10
    )
    clock.now += timedelta(hours=2)  # not due yet: nothing runs although memories aged
    mem.add("another", t=clock.now)
    assert "d10" in mem and len(list(archive.iterdir())) == 1
    clock.now += timedelta(hours=5)  # due: d10 (aged past 30 days by now) goes, in a new file
    mem.add("a third", t=clock.now)
    assert "d10" not in mem and len(list(archive.iterdir())) == 2
    mem.close()
    with Memory(path=tmp_path / "store", read_only=True) as reopened:  # the deletions were logged
        assert "d10" not in reopened and "fresh" in reopened


def test_an_archive_is_never_overwritten_and_manual_runs_work(tmp_path):
    clock = Clock(T0)
    policy = Retention(max_age=timedelta(days=30), archive_dir=tmp_path, clock=clock)
    mem = Memory(retention=policy)
    mem.add("old fact", id="a", t=T0)  # a run at T0: nothing is old yet
    clock.now = T0 + timedelta(days=100)
    taken = tmp_path / "memories-20260101T000000Z--20260101T000000Z.parquet"
    taken.write_bytes(b"someone else's file")
    assert mem.apply_retention() == 1
    assert taken.read_bytes() == b"someone else's file"
    assert (tmp_path / "memories-20260101T000000Z--20260101T000000Z-2.parquet").exists()
    assert mem.apply_retention(at_time=T0 + timedelta(days=200)) == 0
    with pytest.raises(ValueError, match="no retention policy"):
        Memory().apply_retention()


def test_a_missing_archive_dir_is_made_with_its_parents_and_again_when_removed(tmp_path):
    archive = tmp_path / "not" / "yet" / "archive"
    clock = Clock(T0 + timedelta(days=40))
    policy = Retention(max_age=timedelta(days=30), archive_dir=str(archive), clock=clock)
    assert archive.is_dir()  # made where the policy is configured, as mkdir -p
    archive.rmdir()  # removed while the store runs: the next run makes it again
    mem = Memory(retention=policy)
    mem.add("old fact", id="a", t=T0)
    assert "a" not in mem and [p.name for p in archive.iterdir()] == [
        "memories-20260101T000000Z--20260101T000000Z.parquet"
    ]


def test_retention_is_validated(tmp_path):
    with pytest.raises(TypeError, match="max_age"):
        Retention(max_age=30)
    with pytest.raises(ValueError, match="every"):
        Retention(max_age=timedelta(days=1), every=timedelta(0))
    (tmp_path / "file").write_text("x")
    for under_a_file in (tmp_path / "file", tmp_path / "file" / "archive"):
        with pytest.raises(NotADirectoryError, match=f"archive_dir {under_a_file}: .* is a file"):
            Retention(max_age=timedelta(days=1), archive_dir=under_a_file)
    with pytest.raises(TypeError, match="retention"):
        Memory(retention={"max_age": 30})


def test_a_run_deletes_in_chunks_and_leaves_rows_that_changed_since_they_were_chosen(tmp_path, monkeypatch):
    import poincare_index.memory.retention as retention

    archive = tmp_path / "archive"
    archive.mkdir()
    mem = Memory(path=tmp_path / "store")
    mem.add_many([f"note {d}" for d in range(20)], [f"d{d}" for d in range(20)],
                 t=[T0 + timedelta(days=d) for d in range(20)])  # fmt: skip
    monkeypatch.setattr(retention, "DELETE_CHUNK_ROWS", 3)
    real_write = retention.write_parquet_durably

    def write_while_the_store_changes(table, path):  # the archive is written under no lock
        real_write(table, path)
        mem.update("d2", t=T0 + timedelta(days=35))  # re-stamped young: must stay
        mem.delete("d4")  # gone already: not deleted twice

    monkeypatch.setattr(retention, "write_parquet_durably", write_while_the_store_changes)
    policy = Retention(max_age=timedelta(days=10), archive_dir=archive, clock=lambda: T0 + timedelta(days=20))
    mem._retention = RetentionRun(policy)
    assert mem.apply_retention() == 8  # d0..d9 chosen; d2 re-stamped, d4 deleted meanwhile
    assert "d2" in mem and "d4" not in mem and "d10" in mem and len(mem) == 11
    (run,) = archive.iterdir()
    assert sorted(pq.read_table(run).column("id").to_pylist()) == sorted(f"d{d}" for d in range(10))
    deletes = [h for _, h, _ in _records(mem) if h["op"] == "delete"]
    # d4's own delete, then the run's chunks of 3 rows, less d2 (0-2) and d4 (3-5)
    assert [len(h["rows"]) for h in deletes] == [1, 2, 2, 3, 1]
    kept = sorted(r.id for r in mem)
    mem.close()
    assert sorted(r.id for r in Memory(path=tmp_path / "store", read_only=True)) == kept


def _records(mem):
    from poincare_index.memory.log import iter_records

    return list(iter_records(mem._ns.log_paths(), 0))
