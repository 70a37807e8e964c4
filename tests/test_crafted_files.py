"""Files crafted to pass every checksum: each is refused with IndexFormatError, never a crash
or another exception (the checksums are recomputed, as an attacker would)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import tempfile
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from fuzz.mutators import _arrow_buffers, _encode_raw, _fix_arrow_checksums, _write_json

import poincare_index as pi
from poincare_index.embed import HashingEmbedder
from poincare_index.memory.log import _FILE_HEADER, LOG_MAGIC, LOG_VERSION, read_log
from poincare_memory import Memory

T0 = datetime(2026, 6, 1, tzinfo=timezone.utc)


def saved_index(path: Path) -> Path:
    index = pi.PoincareIndex(4, M=4, num_threads=1)
    x = np.random.default_rng(0).uniform(-0.4, 0.4, size=(30, 4)).astype(np.float32)
    index.add(x, t=np.datetime64("2026-06-01"), metadata={"kind": ["note", "fact", "ticket"] * 10})
    index.save(path)
    return path


def saved_store(path: Path) -> Path:
    mem = Memory(embedder=HashingEmbedder(dim=16), path=path, num_threads=1)
    mem.add_many([f"note number {i}" for i in range(6)], [f"m{i}" for i in range(6)], t=T0)
    mem.checkpoint()
    mem.add("a later note", id="late", t=T0 + timedelta(hours=1))
    mem.delete("m2")
    del mem  # not closed: the add and the delete stay in the log
    return path / "default"


class _Case:
    """What fuzz.mutators' checksum repair needs (a root)."""

    def __init__(self, root: Path) -> None:
        self.root = root


def point_offsets_past_the_data(path: Path, column: str, root: Path) -> None:
    """Makes the last offset of a string column point far past its data buffer, then
    recomputes the checksums that cover the file."""
    found = [b for b in _arrow_buffers(path) if b[0] == f"{column}.offsets/values"]
    assert found, f"no offsets buffer for {column}"
    _, offset, size, _ = found[0]
    data = bytearray(path.read_bytes())
    struct.pack_into("<i", data, offset + size - 4, 1 << 30)
    path.write_bytes(bytes(data))
    _fix_arrow_checksums(_Case(root), path)


def loads_in_a_subprocess(code: str) -> subprocess.CompletedProcess[str]:
    """Runs a load where a crash cannot take pytest with it, outside the checkout (whose
    sources would shadow the installed package)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=120, cwd=tempfile.gettempdir(),
    )  # fmt: skip


def test_string_offsets_past_the_data_in_a_saved_index_are_refused(tmp_path):
    root = saved_index(tmp_path / "ix")
    columns = next(root.glob("columns-*.arrow"))
    point_offsets_past_the_data(columns, "kind", root)
    result = loads_in_a_subprocess(f"""
        import poincare_index as pi
        try:
            index = pi.read_index({str(root)!r})
            print("LOADED", index.columns.column("kind").to_pylist()[-1][:20])
        except pi.IndexFormatError as exc:
            print("REFUSED", exc)
    """)
    assert result.returncode == 0, result.stderr[-2000:]  # a signal here: the old crash
    assert result.stdout.startswith("REFUSED") and "invalid Arrow data" in result.stdout, result.stdout


def test_string_offsets_past_the_data_in_a_store_snapshot_are_refused(tmp_path):
    ns = saved_store(tmp_path / "store")
    rows = next(ns.glob("snap-*/rows.arrow"))
    point_offsets_past_the_data(rows, "text", rows.parent)
    result = loads_in_a_subprocess(f"""
        import poincare_index as pi
        from poincare_memory import Memory
        try:
            mem = Memory(path={str(ns.parent)!r}, read_only=True)
            print("LOADED", [r.text[:10] for r in mem.list()])
        except pi.IndexFormatError as exc:
            print("REFUSED", exc)
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("REFUSED") and "invalid Arrow data" in result.stdout, result.stdout


def rewrite_manifest(root: Path, change) -> None:
    path = root / "manifest.json"
    doc = json.loads(path.read_text())
    change(doc)
    _write_json(path, doc, checksum=True)


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["params"].update(M="16"),
        lambda d: d["params"].update(ef_search=True),
        lambda d: d["params"].update(seed=-1),
        lambda d: d.update(params=[16]),
        lambda d: d.update(dim=2**70),
        lambda d: d.update(curvature="1.0"),
        lambda d: d.update(ntotal=None),
        lambda d: d["files"].update(vectors="vectors.bin"),
        lambda d: d["files"]["columns"].update(crc32="0"),
        lambda d: d["files"]["graph"].update(size=-1),
        lambda d: d.pop("kind"),
    ],
    ids=[
        "M-str",
        "ef-bool",
        "seed-neg",
        "params-list",
        "dim-huge",
        "curv-str",
        "ntotal-null",
        "files-entry-str",
        "crc-str",
        "size-neg",
        "kind-missing",
    ],  # fmt: skip
)
def test_a_manifest_with_a_wrong_field_is_refused_naming_it(tmp_path, change):
    root = saved_index(tmp_path / "ix")
    rewrite_manifest(root, change)
    with pytest.raises(pi.IndexFormatError):
        pi.read_index(root)


def test_columns_whose_ids_disagree_with_the_vectors_are_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.ipc as ipc

    root = saved_index(tmp_path / "ix")
    path = next(root.glob("columns-*.arrow"))
    table = ipc.open_file(pa.BufferReader(path.read_bytes())).read_all()
    ids = table.column("id").to_numpy()[::-1].copy()
    table = table.set_column(0, "id", pa.array(ids))
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    _fix_arrow_checksums(_Case(root), path)
    with pytest.raises(pi.IndexFormatError, match="id column disagrees"):
        pi.read_index(root)


def rewrite_log(ns: Path, change) -> None:
    path = sorted(ns.glob("log-*.bin"))[-1]  # the log after the snapshot (the one before it is kept)
    records, _ = read_log(path)
    records = change(records)
    out = _FILE_HEADER.pack(LOG_MAGIC, LOG_VERSION)
    for seq, header, blob in records:
        out += _encode_raw(seq, header, blob)
    path.write_bytes(out)


def test_a_log_that_adds_an_id_the_store_holds_is_refused(tmp_path):
    """Before: the replay indexed the duplicate, len(mem) and list() disagreed."""
    ns = saved_store(tmp_path / "store")

    def duplicate(records):
        seq, header, blob = records[0]  # the add of "late"
        assert header["op"] == "add"
        header = dict(header, ids=["m1"])
        return [(seq, header, blob)] + records[1:]

    rewrite_log(ns, duplicate)
    with pytest.raises(pi.IndexFormatError, match="already held"):
        Memory(path=ns.parent, read_only=True)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda h: dict(h, rows="all"), "rows"),
        (lambda h: dict(h, rows=[99]), "holds no memory"),
        (lambda h: dict(h, rows=[0, 0]), "twice"),
        (lambda h: dict(h, op="drop"), "op"),
        (lambda h: [h], "object"),
    ],
    ids=["rows-str", "row-out-of-range", "row-twice", "unknown-op", "header-list"],
)
def test_a_log_record_with_a_wrong_field_is_refused(tmp_path, change, message):
    ns = saved_store(tmp_path / "store")

    def edit(records):
        seq, header, blob = records[1]  # the delete of "m2"
        assert header["op"] == "delete"
        return [records[0], (seq, change(header), blob)]

    rewrite_log(ns, edit)
    with pytest.raises(pi.IndexFormatError, match=message):
        Memory(path=ns.parent, read_only=True)


def test_a_log_with_a_gap_in_its_sequence_numbers_is_refused(tmp_path):
    ns = saved_store(tmp_path / "store")
    rewrite_log(ns, lambda records: [records[0], (records[1][0] + 1, *records[1][1:])])
    with pytest.raises(pi.IndexFormatError, match="lost or foreign"):
        Memory(path=ns.parent, read_only=True)


def test_a_log_record_with_nan_vectors_is_refused(tmp_path):
    ns = saved_store(tmp_path / "store")

    def nan(records):
        seq, header, blob = records[0]
        return [(seq, header, np.full(len(blob) // 4, np.nan, dtype="<f4").tobytes()), records[1]]

    rewrite_log(ns, nan)
    with pytest.raises(pi.IndexFormatError, match="NaN"):
        Memory(path=ns.parent, read_only=True)


def test_a_store_without_its_config_is_refused_not_recreated(tmp_path):
    ns = saved_store(tmp_path / "store")
    (ns / "config.json").unlink()
    with pytest.raises(pi.IndexFormatError, match="no config.json"):
        Memory(path=ns.parent)
    assert not (ns / "config.json").exists()


def test_a_config_whose_embedder_name_disagrees_with_its_parameters_is_refused(tmp_path):
    ns = saved_store(tmp_path / "store")
    path = ns / "config.json"
    doc = json.loads(path.read_text())
    doc["embedder"]["dim"] = 24
    _write_json(path, doc, checksum=True)
    with pytest.raises(pi.IndexFormatError, match="parameters make"):
        Memory(path=ns.parent, read_only=True)


def test_a_snapshot_manifest_for_another_sequence_number_is_refused(tmp_path):
    ns = saved_store(tmp_path / "store")
    path = next(ns.glob("snap-*/manifest.json"))
    doc = json.loads(path.read_text())
    doc["seq"] += 1
    _write_json(path, doc, checksum=True)
    with pytest.raises(pi.IndexFormatError, match="not CURRENT's"):
        Memory(path=ns.parent, read_only=True)


def test_checksums_recomputed_by_the_helpers_match_the_loaders(tmp_path):
    """The crafted files above fail on content, not on a checksum the helpers got wrong."""
    root = saved_index(tmp_path / "ix")
    path = next(root.glob("columns-*.arrow"))
    _fix_arrow_checksums(_Case(root), path)
    rewrite_manifest(root, lambda d: None)
    pi.read_index(root)
    ns = saved_store(tmp_path / "store")
    rewrite_log(ns, lambda records: records)
    assert len(Memory(path=ns.parent, read_only=True)) == 6


def test_a_log_replaced_by_a_directory_or_a_missing_snapshot_manifest_is_refused(tmp_path):
    ns = saved_store(tmp_path / "a")
    log = sorted(ns.glob("log-*.bin"))[-1]
    log.unlink()
    log.mkdir()
    with pytest.raises(pi.IndexFormatError, match="not a regular file"):
        Memory(path=ns.parent, read_only=True)
    ns = saved_store(tmp_path / "b")
    next(ns.glob("snap-*/manifest.json")).unlink()
    with pytest.raises(pi.IndexFormatError, match="missing"):
        Memory(path=ns.parent, read_only=True)


def test_time_metadata_past_what_datetime_holds_is_refused_at_add_and_in_a_file(tmp_path):
    import pyarrow as pa
    import pyarrow.ipc as ipc

    index = pi.PoincareFlatIndex(2)
    x = np.array([[0.1, 0.0]], dtype=np.float32)
    with pytest.raises(ValueError, match="years 1..9999"):
        index.add(x, metadata={"due": pa.array([2**62], pa.timestamp("us"))})
    index.add(x, metadata={"due": pa.array([0], pa.timestamp("us"))})
    index.save(tmp_path / "ix")
    path = next((tmp_path / "ix").glob("columns-*.arrow"))
    table = ipc.open_file(pa.BufferReader(path.read_bytes())).read_all()
    table = table.set_column(5, "due", pa.array([2**62], pa.timestamp("us")))
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    _fix_arrow_checksums(_Case(tmp_path / "ix"), path)
    with pytest.raises(pi.IndexFormatError, match="years 1..9999"):
        pi.read_index(tmp_path / "ix")


def test_a_snapshot_with_metadata_of_a_type_memory_never_writes_is_refused(tmp_path):
    """Found by the long fuzz run: a metadata column cast to timestamp[ns] made list() fail."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    mem = Memory(embedder=HashingEmbedder(dim=16), path=tmp_path, num_threads=1)
    mem.add_many(["alpha note", "beta note"], ["a", "b"], t=T0, metadata=[{"n": 1}, {"n": 2}])
    mem.close()
    path = next((tmp_path / "default").glob("snap-*/index/columns-*.arrow"))
    table = ipc.open_file(pa.BufferReader(path.read_bytes())).read_all()
    i = table.column_names.index("n")
    table = table.set_column(i, "n", table.column(i).cast(pa.timestamp("ns")))
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    _fix_arrow_checksums(_Case(path.parent), path)
    with pytest.raises(pi.IndexFormatError, match="never writes"):
        Memory(path=tmp_path, read_only=True)
