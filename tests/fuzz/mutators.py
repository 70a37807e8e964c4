"""Structure-aware mutations of saved indexes and Memory stores.

Each mutation knows the file it changes and repairs what a blind byte flip would trip on first:
JSON documents get their checksum field recomputed, binary files their CRC-32 trailer, Arrow
files the size and CRC-32 their manifest records, log records their two CRCs. So mutations
reach the parsers and validators behind the checksums, which is where a crafted file attacks.
"""

from __future__ import annotations

import json
import random
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from poincare_index._durable import json_checksum
from poincare_index.memory.log import _FILE_HEADER, LOG_MAGIC, LOG_VERSION, read_log

INTERESTING_INTS = [0, 1, -1, 2, 3, 7, 255, 256, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
                    2**53, 2**63 - 1, 2**63, -(2**63), 2**64, 10**30]  # fmt: skip
INTERESTING_VALUES: list[Any] = INTERESTING_INTS + [
    0.0, -0.0, 0.5, 1.5, 1e308, -1e308, 1e-320, "", "x", "../../etc", "snap-0000000000000001",
    "hashing", "custom", "add", "delete", None, True, False, [], {}, [1, 2], [None], {"a": 1},
    {"$datetime_us": 2**62}, {"type": "Product", "policies": []},
]  # fmt: skip

JSON_CHECKSUMMED = ("manifest.json", "config.json", "CURRENT", "usage.json")


class Case:
    """One mutated copy of a seed: the directory and what was done to it."""

    def __init__(self, root: Path, rng: random.Random) -> None:
        self.root = root
        self.rng = rng
        self.steps: list[str] = []
        # Set by a mutation whose loss no reader can detect (docs/reliability.md): a log cut
        # exactly where a record ends reads as a store whose writer stopped there.
        self.undetectable: str | None = None

    def files(self, predicate: Callable[[Path], bool]) -> list[Path]:
        return sorted(p for p in self.root.rglob("*") if p.is_file() and predicate(p))

    def pick(self, predicate: Callable[[Path], bool]) -> Path | None:
        """One of the files matching ``predicate``, drawn at random (None: there is none)."""
        targets = self.files(predicate)
        return self.rng.choice(targets) if targets else None


# ---- JSON documents ---------------------------------------------------------------------------


def _write_json(path: Path, doc: Any, checksum: bool) -> None:
    if checksum and isinstance(doc, dict):
        doc = {k: v for k, v in doc.items() if k != "checksum"}
        doc["checksum"] = json_checksum(doc)
    if path.is_file():  # an earlier step may have replaced it by a directory
        path.write_text(json.dumps(doc), encoding="utf-8")


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document (the checksum field excluded)."""
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if not (prefix == () and k == "checksum"):
                out.extend(_paths(v, prefix + (k,)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.extend(_paths(v, prefix + (i,)))
    return out


def mutate_value(doc: Any, rng: random.Random) -> tuple[Any, str]:
    """A JSON document with one value replaced, removed or one key added; and what was done."""
    paths = _paths(doc)
    if not paths:
        return rng.choice(INTERESTING_VALUES), "replaced the document"
    path = rng.choice(paths)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    how = rng.random()
    if how < 0.12 and isinstance(parent, dict):
        del parent[last]
        return doc, f"removed {'.'.join(map(str, path))}"
    if how < 0.2 and isinstance(parent, dict):
        parent[rng.choice(["extra", "op", "rows", "kind", "type"])] = rng.choice(INTERESTING_VALUES)
        return doc, f"added a key beside {'.'.join(map(str, path))}"
    old = parent[last]
    if isinstance(old, bool) or not isinstance(old, (int, float)) or how < 0.55:
        new = rng.choice(INTERESTING_VALUES)
    elif isinstance(old, int):
        new = old + rng.choice([-2, -1, 1, 2, 1000, -(10**6), 2**32])
    else:
        new = old * rng.choice([-1.0, 0.0, 1e-300, 1e300, 2.0])
    if isinstance(parent, list) and how > 0.9:
        parent.append(new)
    else:
        parent[last] = new
    return doc, f"set {'.'.join(map(str, path))} = {new!r}"


def json_field(case: Case) -> bool:
    path = case.pick(lambda p: p.name in JSON_CHECKSUMMED)
    if path is None:
        return False
    doc = _load_json(path)
    if doc is None:
        return False
    doc, what = mutate_value(doc, case.rng)
    _write_json(path, doc, checksum=True)
    case.steps.append(f"{path.relative_to(case.root)}: {what}")
    return True


# ---- binary files of the core (vectors, graph) -------------------------------------------------

_TRAILER = 8  # CRC-32 of everything before it, then 4 bytes of end magic


def _load_json(path: Path) -> Any:
    """The document, or None when an earlier mutation left it unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _fix_size_in_manifest(path: Path) -> None:
    """After a data file changed length or content, its manifest entry says so again."""
    manifest_path = path.parent / "manifest.json"
    doc = _load_json(manifest_path)
    files = doc.get("files") if isinstance(doc, dict) else None
    for entry in files.values() if isinstance(files, dict) else ():
        if isinstance(entry, dict) and entry.get("name") == path.name:
            entry["size"] = path.stat().st_size
            if "crc32" in entry:
                entry["crc32"] = zlib.crc32(path.read_bytes())
    _write_json(manifest_path, doc, checksum=True)


def core_binary(case: Case) -> bool:
    path = case.pick(lambda p: p.suffix == ".bin" and p.name.startswith(("vectors-", "graph-")))
    if path is None:
        return False
    rng = case.rng
    data = bytearray(path.read_bytes())
    body_end = len(data) - _TRAILER
    if body_end <= 16:
        return False
    how = rng.random()
    if how < 0.45:  # a header or array field: the first 64 bytes hold the sizes and parameters
        width = rng.choice([1, 4, 8])
        top = min(body_end, 72) if how < 0.3 else body_end
        at = rng.randrange(16, top - width + 1)
        value = rng.choice(INTERESTING_INTS) % (1 << (8 * width))
        data[at : at + width] = value.to_bytes(width, "little")
        what = f"u{8 * width} at {at} = {value}"
    elif how < 0.7:  # a float inside the payload (vectors: a point's coordinate)
        at = rng.randrange(16, body_end - 4 + 1)
        value = rng.choice([float("nan"), float("inf"), 1.0, -1.0, 0.99999, 1e30])
        struct.pack_into("<f", data, at, value)
        what = f"f32 at {at} = {value}"
    elif how < 0.85:  # random bytes
        at = rng.randrange(16, body_end)
        for i in range(at, min(body_end, at + rng.randint(1, 16))):
            data[i] = rng.randrange(256)
        what = f"random bytes at {at}"
    else:  # the payload cut or extended (the manifest's size follows)
        cut = rng.randrange(16, body_end)
        grow = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 4, 8, 64])))
        data = data[:cut] + grow + data[body_end:]
        body_end = len(data) - _TRAILER
        what = f"payload cut at {cut}, {len(grow)} bytes added"
    struct.pack_into("<I", data, body_end, zlib.crc32(bytes(data[:body_end])))
    path.write_bytes(bytes(data))
    _fix_size_in_manifest(path)
    case.steps.append(f"{path.relative_to(case.root)}: {what}, CRC recomputed")
    return True


# ---- Arrow IPC files (index columns, store rows) -----------------------------------------------


def _arrow_buffers(path: Path) -> list[tuple[str, int, int, int]]:
    """(what, file offset, size, column) of every buffer of every array in an IPC file, found
    through the memory map: the reader hands out views into the mapped file."""
    mm = pa.memory_map(str(path))
    base = mm.read_buffer().address
    mm.seek(0)
    table = ipc.open_file(mm).read_all()
    out = []
    for ci, column in enumerate(table.columns):
        for chunk in column.chunks:
            for bi, buf in enumerate(chunk.buffers()):
                if buf is not None and buf.size:
                    role = ["validity", "offsets/values", "data"][min(bi, 2)]
                    out.append((f"{table.column_names[ci]}.{role}", buf.address - base, buf.size, ci))
    return out


def _fix_arrow_checksums(case: Case, path: Path) -> None:
    if path.name == "rows.arrow":
        manifest_path = path.parent / "manifest.json"
        doc = _load_json(manifest_path)
        if isinstance(doc, dict):
            doc["rows_crc32"] = zlib.crc32(path.read_bytes())
            _write_json(manifest_path, doc, checksum=True)
    else:
        _fix_size_in_manifest(path)


def arrow_buffer(case: Case) -> bool:
    """Overwrites values inside one buffer of one array (offsets pointing past their data, a
    validity bitmap that disagrees with the null count, bytes that are not UTF-8, ...)."""
    path = case.pick(lambda p: p.suffix == ".arrow")
    if path is None:
        return False
    rng = case.rng
    try:
        buffers = _arrow_buffers(path)
    except (pa.ArrowException, OSError):
        return False
    if not buffers:
        return False
    what, offset, size, _ = rng.choice(buffers)
    data = bytearray(path.read_bytes())
    width = min(size, rng.choice([1, 4, 8]))
    at = offset + rng.randrange(0, size - width + 1)
    if rng.random() < 0.6:
        value = rng.choice(INTERESTING_INTS + [size * 2, size + 1, 2**31 - 8]) % (1 << (8 * width))
        data[at : at + width] = value.to_bytes(width, "little")
    else:
        data[at] = rng.choice([0x00, 0xFF, 0x80, 0xC3, 0xED])
    path.write_bytes(bytes(data))
    _fix_arrow_checksums(case, path)
    case.steps.append(f"{path.relative_to(case.root)}: {what} at byte {at} overwritten, checksums recomputed")
    return True


def arrow_table(case: Case) -> bool:
    """Rewrites an Arrow file as a valid IPC file of another table: a column dropped, renamed,
    retyped, reordered or nulled, rows cut or repeated."""
    path = case.pick(lambda p: p.suffix == ".arrow")
    if path is None:
        return False
    rng = case.rng
    try:
        table = ipc.open_file(pa.BufferReader(path.read_bytes())).read_all()  # not mapped: rewritten below
        table.validate(full=True)
    except (pa.ArrowException, OSError):
        return False
    if table.num_columns == 0:  # an earlier step dropped the last column
        return False
    i = rng.randrange(table.num_columns)
    name = table.column_names[i]
    how = rng.randrange(7)
    try:
        if how == 0:
            table, what = table.remove_column(i), f"dropped {name}"
        elif how == 1:
            names = [*table.column_names[:i], "id", *table.column_names[i + 1 :]]
            table, what = table.rename_columns(names), f"renamed {name} to id"
        elif how == 2:
            target = rng.choice(
                [pa.string(), pa.int32(), pa.float64(), pa.timestamp("ns"), pa.large_string()]
            )
            column = table.column(i).cast(target, safe=False)
            table, what = table.set_column(i, name, column), f"cast {name} to {target}"
        elif how == 3:
            order = list(range(table.num_columns))
            rng.shuffle(order)
            table, what = table.select(order), "columns reordered"
        elif how == 4:
            column = pa.nulls(table.num_rows, table.schema.field(i).type)
            table, what = table.set_column(i, name, column), f"{name} all null"
        elif how == 5:
            table, what = table.slice(0, rng.randrange(table.num_rows + 1)), "rows cut"
        else:
            table, what = pa.concat_tables([table, table.slice(0, 1)]), "a row repeated"
    except (pa.ArrowException, ValueError):
        return False
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    _fix_arrow_checksums(case, path)
    case.steps.append(f"{path.relative_to(case.root)}: {what}, checksums recomputed")
    return True


# ---- the operation log ------------------------------------------------------------------------


def _is_log(p: Path) -> bool:
    return p.name.startswith("log-") and p.suffix == ".bin"


def log_record(case: Case) -> bool:
    path = case.pick(_is_log)
    rng = case.rng
    if path is None:
        return False
    try:
        records, _ = read_log(path)
    except Exception:  # noqa: BLE001 - an earlier mutation broke it; nothing to build on
        return False
    if not records:
        return False
    how = rng.random()
    i = rng.randrange(len(records))
    seq, header, blob = records[i]
    if how < 0.55:
        header, what = mutate_value(header, rng)
        records[i] = (seq, header, blob)
    elif how < 0.7:
        blob = bytearray(blob)
        if blob:
            at = rng.randrange(0, len(blob) - 3) if len(blob) > 4 else 0
            struct.pack_into("<f", blob, at, rng.choice([float("nan"), float("inf"), 0.9999999, 2.0]))
        records[i] = (seq, header, bytes(blob[: len(blob) - rng.choice([0, 0, 4])]))
        what = "vector bytes changed"
    elif how < 0.8:
        records[i] = (seq + rng.choice([-2, -1, 1, 5, 2**40]), header, blob)
        what = "sequence number changed"
    elif how < 0.9:
        j = rng.randrange(len(records))
        records.insert(j, records[i])
        records = [(k + records[0][0], h, b) for k, (_, h, b) in enumerate(records)]
        what = f"record {seq} repeated at position {j} (numbers kept consecutive)"
    else:
        del records[i]
        records = [(k + records[0][0], h, b) for k, (_, h, b) in enumerate(records)] if records else []
        what = f"record {seq} removed (numbers kept consecutive)"
    out = _FILE_HEADER.pack(LOG_MAGIC, LOG_VERSION)
    for s, h, b in records:
        try:
            out += _encode_raw(s, h, b)
        except (ValueError, TypeError, OverflowError, struct.error):
            return False
    path.write_bytes(out)
    case.steps.append(f"{path.relative_to(case.root)}: {what}, CRCs recomputed")
    return True


def _encode_raw(seq: int, header: Any, blob: bytes) -> bytes:
    """A record with valid CRCs around any JSON header and raw vector bytes (log.py's framing;
    its own encoder refuses some of what a crafted file may hold, e.g. NaN in the header)."""
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    body = struct.pack("<I", len(head)) + head + blob
    head_crc = zlib.crc32(struct.pack("<IQ", len(body), seq % 2**64))
    return struct.pack("<IQII", len(body), seq % 2**64, head_crc, zlib.crc32(body)) + body


def log_tail(case: Case) -> bool:
    """A log cut anywhere (a torn tail: the loss of what was never acknowledged is allowed)."""
    path = case.pick(_is_log)
    if path is None:
        return False
    data = path.read_bytes()
    cut = case.rng.randrange(0, len(data) + 1)
    path.write_bytes(data[:cut])
    case.steps.append(f"{path.relative_to(case.root)}: cut at byte {cut} of {len(data)}")
    return True


def _record_ends(data: bytes) -> list[int]:
    """Where each whole record of a log ends (the framing alone, no checksum checked), the end
    of the file header first."""
    ends, pos = [_FILE_HEADER.size], _FILE_HEADER.size
    while pos + 20 <= len(data):
        (length,) = struct.unpack_from("<I", data, pos)
        if pos + 20 + length > len(data):
            break
        pos += 20 + length
        ends.append(pos)
    return ends


def log_damage(case: Case) -> bool:
    """What a disk, a crash or a person does to a log, no checksum recomputed: a cut anywhere, one
    flipped bit, a zero-filled extension, the file deleted or emptied. Only these keep a store's
    promise checkable: it opens with every operation, or says what it dropped, or refuses."""
    path = case.pick(_is_log)
    if path is None:
        return False
    rng = case.rng
    data = bytearray(path.read_bytes())
    how = rng.randrange(5)
    if how == 0:
        cut = rng.randrange(0, len(data) + 1)
        path.write_bytes(bytes(data[:cut]))
        what = f"cut at byte {cut} of {len(data)}"
        if cut in _record_ends(bytes(data)) and cut < len(data):
            case.undetectable = f"{path.name} cut where a record ends"
    elif how == 1 and data:
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        what = f"one bit of byte {at} flipped"
    elif how == 2:
        extra = rng.choice([1, 19, 20, 21, 4096])
        path.write_bytes(bytes(data) + bytes(extra))
        what = f"{extra} zero bytes appended"
    elif how == 3:
        path.unlink()
        what = "deleted"
    else:
        path.write_bytes(b"")
        what = "emptied"
    case.steps.append(f"{path.relative_to(case.root)}: {what}")
    return True


# ---- whole files ------------------------------------------------------------------------------


def file_op(case: Case) -> bool:
    targets = case.files(lambda p: p.name != "LOCK")
    if not targets:
        return False
    rng = case.rng
    path = rng.choice(targets)
    how = rng.randrange(4)
    if how == 0:
        path.unlink()
        what = "deleted"
    elif how == 1:
        path.write_bytes(b"")
        what = "emptied"
    elif how == 2:
        path.unlink()
        path.mkdir()
        what = "replaced by a directory"
    else:
        other = rng.choice(targets)
        if other == path:
            return False
        path.write_bytes(other.read_bytes())
        what = f"replaced by a copy of {other.relative_to(case.root)}"
    case.steps.append(f"{path.relative_to(case.root)}: {what}")
    return True


MUTATORS: dict[str, Callable[[Case], bool]] = {
    "json_field": json_field,
    "core_binary": core_binary,
    "arrow_buffer": arrow_buffer,
    "arrow_table": arrow_table,
    "log_record": log_record,
    "log_tail": log_tail,
    "file_op": file_op,
}
# Damage only (the store_log target: one of these, then the silent-loss check).
DAMAGE: dict[str, Callable[[Case], bool]] = {"log_damage": log_damage}
# How often each is drawn: the parsers behind the checksums get most of the cases.
WEIGHTS = {"json_field": 5, "core_binary": 4, "arrow_buffer": 5, "arrow_table": 2, "log_record": 5,
           "log_tail": 1, "file_op": 1}  # fmt: skip


def mutate(
    case: Case, max_steps: int = 3, mutators: dict[str, Callable[[Case], bool]] = MUTATORS
) -> list[str]:
    """Applies 1..max_steps mutations drawn by weight (from ``mutators``); returns the names used."""
    names = list(mutators)
    weights = [WEIGHTS.get(n, 1) for n in names]
    used = []
    for _ in range(case.rng.randint(1, max_steps)):
        for _attempt in range(8):
            name = case.rng.choices(names, weights)[0]
            if mutators[name](case):
                used.append(name)
                break
    return used
