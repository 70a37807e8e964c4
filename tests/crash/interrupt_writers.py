"""Interrupts writers at random points, with SIGINT (Ctrl-C) and SIGKILL, and checks each time
that the object is consistent and holds every acknowledged write.

Writers (child processes, one per kind, each working in a loop):

* ``index_add``: ``PoincareIndex.add_with_ids`` of 20,000 x 16-d (several 8,192-row chunks) with
  times and metadata, a removal now and then (so slots are reused), a save every third add;
* ``memory_add``: ``Memory.add_many`` of 2,000 texts to a store on disk, a delete now and then;
* ``save``: a 30,000-point index saved again and again after small adds;
* ``checkpoint``: ``Memory.add_many`` of 200 texts, then ``checkpoint()``.

Each writer notes an operation in ``pending`` before the call and in ``acked`` after it returned.
A SIGINT round sends Ctrl-C to the running writer; it catches the KeyboardInterrupt and checks
the object in process: consistent in every part (``_check_consistent``), holding every acknowledged
write, and of the operation in flight all or nothing (an index add: a prefix of whole chunks);
then a save (or a reader of the store) must give the same back, and the writer goes on. A SIGKILL
round kills it; the parent reopens what is on disk and checks it against the journal (the
acknowledged state, or that state plus the operation in flight), then starts a new writer.

    python tests/crash/interrupt_writers.py --rounds 20               # CI (.ci/run)
    python tests/crash/interrupt_writers.py --rounds 1000 --json out.json   # by hand (BENCHMARKS.md)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

WRITERS = ("index_add", "memory_add", "save", "checkpoint")
DIM = 16


# ---- the writers (child processes) ------------------------------------------------------------


def _points(rng: Any, n: int) -> Any:
    import numpy as np

    import poincare_index as pi

    return pi.expmap0(rng.normal(size=(n, DIM)) * 0.3).astype(np.float32)


def _digest(ids: Any) -> int:
    import numpy as np

    return zlib.crc32(np.sort(np.asarray(ids, dtype=np.int64)).tobytes())


def _live_ids(index: Any) -> Any:
    import numpy as np

    return np.asarray(index._core.slot_ids())[np.asarray(index._core.live_slots(), dtype=bool)]


class Writer:
    """One writer's loop; ``acked`` / ``pending`` are what the checks compare against."""

    def __init__(self, kind: str, target: Path, status: Path, seed: int) -> None:
        import numpy as np

        self.kind, self.target, self.status = kind, target, status
        self.rng = np.random.default_rng(seed)
        self.op_no = 0
        self.pending: dict[str, Any] | None = None
        if kind in ("index_add", "save"):
            import poincare_index as pi

            saved = target / "index"
            if (saved / "manifest.json").exists():
                self.obj = pi.read_index(saved, num_threads=1)
            else:
                self.obj = pi.PoincareIndex(DIM, M=8, ef_construction=40, num_threads=1)
                if kind == "save":
                    self.obj.add(
                        _points(self.rng, 30_000), metadata={"tag": [f"t{i}" for i in range(30_000)]}
                    )
            self.acked = set(_live_ids(self.obj).tolist())
        else:
            from poincare_index.embed import HashingEmbedder
            from poincare_memory import Memory

            self.obj = Memory(embedder=HashingEmbedder(dim=DIM), path=target / "store")
            self.acked = {r.id for r in self.obj.list()}
            self._note({"base": sorted(self.acked)})  # what this writer starts from

    # One operation; `pending` is set before the call and cleared (acked) after it returned.
    def step(self) -> None:
        self.op_no += 1
        if self.kind in ("index_add", "save"):
            self._index_step()
        else:
            self._memory_step()

    def _index_step(self) -> None:
        import numpy as np

        index = self.obj
        n = 20_000 if self.kind == "index_add" else 500
        start = int(index._core.next_auto_id)
        ids = np.arange(start, start + n, dtype=np.int64)
        self.pending = {"op": "add", "ids": ids}
        index.add_with_ids(
            _points(self.rng, n), ids, t=np.datetime64("2026-01-01", "us") + ids.astype("timedelta64[s]"),
            metadata={"tag": [f"t{i}" for i in ids.tolist()]},
        )  # fmt: skip
        self.acked |= set(ids.tolist())
        self.pending = None
        cap = 150_000 if self.kind == "index_add" else 40_000  # the index stays this size
        if self.op_no % 2 == 0 or len(self.acked) > cap:
            size = 20_000 if len(self.acked) > cap else 500
            gone = self.rng.choice(np.fromiter(self.acked, dtype=np.int64), size=size, replace=False)
            self.pending = {"op": "remove", "ids": gone}
            index.remove_ids(gone)
            self.acked -= set(gone.tolist())
            self.pending = None
        if self.kind == "save" or self.op_no % 3 == 0:
            self._save()

    def _save(self) -> None:
        digest = _digest(list(self.acked))
        self._note({"saving": digest})
        self.obj.save(self.target / "index")
        self._note({"saved": digest})

    def _memory_step(self) -> None:
        m = self.obj
        n = 1_000 if self.kind == "memory_add" else 200
        ids = [f"w{os.getpid()}-{self.op_no}-{i}" for i in range(n)]
        self.pending = {"op": "add", "ids": ids}
        self._note({"adding": ids[0], "n": n})
        m.add_many([f"note {i} of batch {self.op_no}" for i in range(n)], ids)
        # Noted before `pending` clears: a Ctrl-C between the two leaves the op pending, and
        # the check then notes how it resolved (noted after, the journal could miss it).
        self._note({"added": ids[0], "n": n})
        self.acked |= set(ids)
        self.pending = None
        if self.op_no % 3 == 0 or len(self.acked) > 20_000:  # the store stays this size
            size = 2_000 if len(self.acked) > 20_000 else 50
            gone = sorted(self.rng.choice(sorted(self.acked), size=size, replace=False).tolist())
            self.pending = {"op": "delete", "ids": gone}
            self._note({"deleting": gone})
            doomed = set(gone)
            m.delete(filters=lambda r: r.id in doomed)
            self._note({"deleted": len(gone)})
            self.acked -= doomed
            self.pending = None
        if self.kind == "checkpoint":
            m.checkpoint()

    def _note(self, entry: dict[str, Any]) -> None:
        """A line of the journal the parent reads after a SIGKILL (one write() a line)."""
        fd = os.open(self.target / "journal", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)

    # ---- the in-process check after a Ctrl-C ----------------------------------------------------
    def check(self) -> str | None:
        """None when consistent and holding every acknowledged write; else what is wrong."""
        if self.kind in ("index_add", "save"):
            return self._check_index()
        return self._check_memory()

    def _check_index(self) -> str | None:
        import poincare_index as pi

        index = self.obj
        index._check_consistent()
        live = set(_live_ids(index).tolist())
        why = _allowed_index_state(live, self.acked, self.pending, index._add_chunk)
        if why:
            return why
        self.acked, self.pending = live, None  # the in-flight op's outcome is now known
        tags = index.columns.column("tag").to_pylist()
        ids = index.columns.column("id").to_pylist()
        wrong = [i for i, t in zip(ids, tags) if i in live and t != f"t{i}"]
        if wrong:
            return f"rows of ids {wrong[:3]} carry another point's metadata"
        self._save()
        again = pi.read_index(self.target / "index", num_threads=1)
        if set(_live_ids(again).tolist()) != live or not again.columns.equals(index.columns):
            return "the index saved after the interrupt does not load back equal"
        return None

    def _check_memory(self) -> str | None:
        from poincare_index.embed import HashingEmbedder
        from poincare_memory import Memory

        m = self.obj
        m.index._check_consistent()
        held = {r.id for r in m.list()}
        why = _allowed_memory_state(held, self.acked, self.pending)
        if why:
            return why
        if len(m) != len(held):
            return f"len() says {len(m)}, the memory lists {len(held)}"
        if self.pending is not None:  # the journal learns the outcome of the op in flight
            applied = held != self.acked
            self._note({"resolved": "applied" if applied else "dropped"})
        self.acked, self.pending = held, None
        reader = Memory(embedder=HashingEmbedder(dim=DIM), path=self.target / "store", read_only=True)
        try:
            seen = {r.id for r in reader.list()}
        finally:
            reader.close()
        if seen != held:
            return f"a reader of the store sees {len(seen)} memories, the writer holds {len(held)}"
        return None


def _allowed_index_state(live: set[int], acked: set[int], pending: Any, chunk: int) -> str | None:
    if pending is None:
        return None if live == acked else f"holds {len(live)} ids, {len(acked)} acknowledged"
    ids = pending["ids"].tolist()
    if pending["op"] == "remove":
        if acked - set(ids) <= live <= acked:
            return None
        return "a removal in flight left other ids changed"
    extra = live - acked
    if not acked <= live:
        return f"{len(acked - live)} acknowledged ids are missing"
    k = len(extra)
    if extra != set(ids[:k]) or (k % chunk and k != len(ids)):
        return f"the add in flight left {k} of its {len(ids)} rows, not a prefix of whole chunks"
    return None


def _allowed_memory_state(held: set[str], acked: set[str], pending: Any) -> str | None:
    if pending is None:
        return None if held == acked else f"holds {len(held)} memories, {len(acked)} acknowledged"
    ids = set(pending["ids"])
    if pending["op"] == "add":
        ok = held == acked or held == acked | ids
    else:
        ok = held == acked or held == acked - ids
    return None if ok else f"the {pending['op']} in flight was applied in part ({len(held)} held)"


def child_main(kind: str, target: Path, status: Path, seed: int) -> None:
    # Ctrl-C raises KeyboardInterrupt even when the parent was started with SIGINT ignored
    # (a background job of a non-interactive shell), which children inherit.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    writer = Writer(kind, target, status, seed)
    checks = 0
    _status(status, {"ready": True, "checks": 0})
    while True:
        try:
            while True:
                writer.step()
                _status(status, {"ready": True, "checks": checks, "working": True})
        except KeyboardInterrupt:
            try:
                problem = writer.check()
            except Exception as exc:  # noqa: BLE001 - reported as the round's failure
                problem = f"check raised {type(exc).__name__}: {exc}"
            checks += 1
            _status(status, {"ready": True, "checks": checks, "problem": problem, "working": True})
            if problem:
                return


def _status(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


# ---- after a SIGKILL (parent) ------------------------------------------------------------------


def check_on_disk(kind: str, target: Path) -> str | None:
    """What is on disk after a kill, against the journal the writer kept."""
    entries = []
    journal = target / "journal"
    if journal.exists():
        for line in journal.read_text().splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                pass  # a line cut by the kill
    if kind in ("index_add", "save"):
        import poincare_index as pi

        saved, saving = None, None
        for e in entries:
            if "saving" in e:
                saving = e["saving"]
            elif "saved" in e:
                saved, saving = e["saved"], None
        path = target / "index"
        if saved is None and not (path / "manifest.json").exists():
            return None
        index = pi.read_index(path, num_threads=1)
        index._check_consistent()
        got = _digest(_live_ids(index))
        return (
            None
            if got in (saved, saving)
            else "the saved index is neither the last save nor the one in flight"
        )
    from poincare_index.embed import HashingEmbedder
    from poincare_memory import Memory

    m = Memory(embedder=HashingEmbedder(dim=DIM), path=target / "store")
    try:
        m.index._check_consistent()
        held = {r.id for r in m.list()}
    finally:
        m.close()
    # Replay the journal: the acknowledged ops must be there; the one in flight whole or absent.
    must: set[str] = set()
    adding: set[str] = set()
    deleting: set[str] = set()
    for e in entries:
        if "base" in e:
            must, adding, deleting = set(e["base"]), set(), set()
        elif "adding" in e:
            adding = {f"{e['adding'].rsplit('-', 1)[0]}-{i}" for i in range(e["n"])}
        elif "deleting" in e:
            deleting = set(e["deleting"])
        elif "added" in e or e.get("resolved") == "applied":
            must = (must | adding) - deleting if adding else must - deleting
            adding, deleting = set(), set()
        elif "deleted" in e or e.get("resolved") == "dropped":
            must = must - deleting if "deleted" in e else must
            adding, deleting = set(), set()
    missing, extra = must - held, held - must
    if missing and missing != deleting:
        return f"{len(missing)} acknowledged memories are missing after the kill"
    if extra and extra != adding:
        return f"{len(extra)} memories were never acknowledged"
    return None


# ---- the parent --------------------------------------------------------------------------------


@dataclass
class Report:
    rounds: int = 0
    sigint: int = 0
    sigkill: int = 0
    by_writer: dict[str, int] = field(default_factory=dict)
    inconsistent: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _read_status(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def run(rounds: int, seed: int, work: Path, kill_share: float, max_ms: int) -> Report:
    report = Report()
    rng = random.Random(seed)
    started = time.monotonic()
    children: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for round_no in range(rounds):
            kind = WRITERS[round_no % len(WRITERS)]
            target = work / kind
            target.mkdir(parents=True, exist_ok=True)
            status = target / "status.json"
            # Only this round's writer runs: the others are stopped (four busy writers on two
            # cores made each round several times slower), and go on where they stopped.
            for other, proc in children.items():
                if other != kind and proc.poll() is None:
                    proc.send_signal(signal.SIGSTOP)
            child = children.get(kind)
            if child is not None and child.poll() is None:
                child.send_signal(signal.SIGCONT)
            if child is None or child.poll() is not None:
                status.unlink(missing_ok=True)
                child = children[kind] = subprocess.Popen(
                    [sys.executable, __file__, "--child", kind, str(target), str(status),
                     str(seed * 100_000 + round_no)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                )  # fmt: skip
            if not _wait(lambda s=status: _read_status(s).get("working"), child, 120):
                report.failures.append(f"round {round_no} ({kind}): the writer did not start: {_err(child)}")
                break
            time.sleep(rng.uniform(0, max_ms) / 1000)
            report.rounds += 1
            report.by_writer[kind] = report.by_writer.get(kind, 0) + 1
            if rng.random() < kill_share:
                child.send_signal(signal.SIGKILL)
                child.wait()
                report.sigkill += 1
                try:
                    problem = check_on_disk(kind, target)
                except Exception as exc:  # noqa: BLE001 - did not open: the worst outcome
                    problem = f"did not open: {type(exc).__name__}: {exc}"
            else:
                checks = _read_status(status).get("checks", 0)
                child.send_signal(signal.SIGINT)
                report.sigint += 1
                if not _wait(lambda s=status, c=checks: _read_status(s).get("checks", 0) > c, child, 120):
                    problem = f"no check after Ctrl-C (the writer hung or died): {_err(child)}"
                else:
                    problem = _read_status(status).get("problem")
            if problem:
                report.inconsistent += 1
                report.failures.append(f"round {round_no} ({kind}): {problem}")
                break
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
    report.seconds = round(time.monotonic() - started, 1)
    return report


def _wait(cond: Any, child: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        if child.poll() is not None:
            return bool(cond())
        time.sleep(0.005)
    return False


def _err(child: subprocess.Popen[bytes]) -> str:
    if child.poll() is None or child.stderr is None:
        return "still running"
    return child.stderr.read().decode(errors="replace")[-1500:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kill-share", type=float, default=0.25, help="share of rounds that SIGKILL")
    p.add_argument("--max-ms", type=int, default=1500, help="longest wait before the signal")
    p.add_argument("--work", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--child", nargs=4, metavar=("KIND", "TARGET", "STATUS", "SEED"))
    args = p.parse_args(argv)
    if args.child:
        kind, target, status, seed = args.child
        child_main(kind, Path(target), Path(status), int(seed))
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="interrupt-writers-"))
    report = run(args.rounds, args.seed, work, args.kill_share, args.max_ms)
    out = json.dumps(asdict(report), indent=2)
    print(out)
    if args.json:
        args.json.write_text(out)
    return 0 if not report.failures and report.rounds == args.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
