"""SIGKILLs writers at random points and checks that nothing acknowledged was lost.

Each round starts a writer process on the same store (or saved index), lets it work for a
random time, and kills it with SIGKILL. The writer journals every operation to an
append-only file: an ``intent`` line (with everything needed to redo it) before the call, a
``done`` line after the call returned (the operation was acknowledged). After the kill the
store must open, and its whole state (every memory's text, time, validity end, access count;
the index's ids and vectors) must equal the state the acknowledged operations build, or that
state plus the one operation that was in flight. Writers:

* ``mixed``: adds, text updates (new rows), time updates (in place), deletes, invalidations,
  searches (access counts), with the default checkpoint interval lowered to 25 writes;
* ``checkpoint``: the same with an explicit checkpoint() after nearly every write, so kills
  land inside checkpoints (snapshot written, CURRENT switched, old files removed);
* ``save``: a PoincareIndex saved again and again to one directory after adds and removals.

After each Memory kill, a copy of the store has its log damaged once as a disk or a person
would (tests/fuzz/mutators.py ``log_damage``: a cut anywhere, a flipped bit, zeros appended, a
log deleted or emptied) and is opened as a writer: it must hold every acknowledged operation, or
a prefix of them with a RecoveryWarning, or refuse with LogDamageError (then ``recover=True``
opens a prefix, with a warning). A prefix opened without a word is a silent loss (a failure),
except a log cut exactly where a record ends (no reader can tell; counted apart).

    python tests/crash/crash_writers.py --kills 200 --json crash.json    # by hand
    python tests/crash/crash_writers.py --kills 20                       # CI (.ci/run)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

WRITERS = ("mixed", "checkpoint", "save")
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()


def _us(dt: datetime) -> int:
    return (dt - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


class Journal:
    """Append-only, one write() per line: a line is on disk when the call that wrote it returns."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, obj: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(obj) + "\n").encode())


def read_journal(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(acknowledged operations in order, the operation in flight or None)."""
    acked, pending = [], None
    if not path.exists():
        return acked, None
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:  # a line cut by the kill: its operation was never acknowledged
            continue
        if "intent" in entry:
            pending = entry["intent"]
        elif "done" in entry and pending is not None:
            acked.append(dict(pending, result=entry.get("result")))
            pending = None
    return acked, pending


# ---- the writers (child processes) ------------------------------------------------------------


def memory_writer(path: Path, journal_path: Path, seed: int, checkpoint_heavy: bool) -> None:
    from poincare_index.embed import HashingEmbedder
    from poincare_memory import Memory

    rng = random.Random(seed)
    journal = Journal(journal_path)
    mem = Memory(embedder=HashingEmbedder(dim=16), path=path, checkpoint_every=25, num_threads=1, M=8)
    live = [r.id for r in mem.list()]
    if checkpoint_heavy:  # nothing written since the snapshot it opened
        journal.write({"intent": {"op": "checkpoint"}})
        mem.checkpoint()
        journal.write({"done": 0})
    n = 0
    while True:
        n += 1
        roll = rng.random()
        text = " ".join(rng.choice(WORDS) for _ in range(3)) + f" {seed}-{n}"
        t_us = _us(T0) + rng.randrange(10**12)
        if roll < 0.35 or len(live) < 5:
            op = {"op": "add", "id": f"k{seed}-{n}", "text": text, "t": t_us}
        elif roll < 0.45:
            op = {"op": "update", "id": rng.choice(live), "text": text}
        elif roll < 0.55:
            op = {"op": "set", "id": rng.choice(live), "t": t_us}
        elif roll < 0.65:
            op = {"op": "delete", "id": rng.choice(live)}
        elif roll < 0.72:
            op = {"op": "invalidate", "id": rng.choice(live), "until": t_us + 2 * 10**12}
        elif roll < 0.9:
            op = {"op": "search", "text": text}
        else:
            op = {"op": "checkpoint"}
        journal.write({"intent": op})
        result = apply_to_memory(mem, op)
        journal.write({"done": n, "result": result})
        if op["op"] == "add":
            live.append(op["id"])
        elif op["op"] == "delete":
            live.remove(op["id"])
        if checkpoint_heavy and op["op"] not in ("search", "checkpoint") and rng.random() < 0.8:
            # Often twice: a checkpoint with nothing new since the last one (as right after
            # reopening) is the one that once replaced the live snapshot directory.
            for _ in range(rng.choice([1, 2, 2, 3])):
                journal.write({"intent": {"op": "checkpoint"}})
                mem.checkpoint()
                journal.write({"done": n})


def apply_to_memory(mem: Any, op: dict[str, Any]) -> Any:
    def at(us: int) -> datetime:
        return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=us)

    kind = op["op"]
    if kind == "add":
        mem.add(op["text"], id=op["id"], t=at(op["t"]))
    elif kind == "update":
        mem.update(op["id"], op["text"])
    elif kind == "set":
        mem.update(op["id"], t=at(op["t"]))
    elif kind == "delete":
        mem.delete(op["id"])
    elif kind == "invalidate":
        mem.invalidate(op["id"], at=at(op["until"]))
    elif kind == "search":
        return [r.id for r in mem.search(op["text"], k=3, at_time=T0)]
    elif kind == "checkpoint":
        mem.checkpoint()
    return None


def index_writer(path: Path, journal_path: Path, seed: int) -> None:
    import numpy as np

    import poincare_index as pi

    rng = np.random.default_rng(seed)
    journal = Journal(journal_path)
    index = pi.read_index(path, num_threads=1) if path.exists() else pi.PoincareIndex(8, M=8, num_threads=1)
    n = 0
    while True:
        n += 1
        x = (rng.normal(size=(int(rng.integers(1, 200)), 8)) * 0.1).astype(np.float32)
        index.add(x)
        ids = index.columns.column("id").to_numpy()
        if len(ids) > 50:
            index.remove_ids(rng.choice(ids, size=10, replace=False))
        state = index_state(index)
        journal.write({"intent": {"op": "save", "state": state}})
        index.save(path)
        journal.write({"done": n})


def index_state(index: Any) -> dict[str, Any]:
    """What a saved index must give back: its live ids and a digest of their vectors."""
    import hashlib

    import numpy as np

    ids = sorted(int(i) for i in index.columns.column("id").to_numpy() if int(i) in index)
    digest = hashlib.sha256(
        np.stack([index.reconstruct(i) for i in ids]).tobytes() if ids else b""
    ).hexdigest()
    return {"ids": len(ids), "max_id": ids[-1] if ids else -1, "vectors": digest}


# ---- the checks (parent) ----------------------------------------------------------------------


def memory_model(acked: list[dict[str, Any]], base: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The state the acknowledged operations build from ``base``."""
    model = {k: dict(v) for k, v in base.items()}
    for op in acked:
        model = apply_to_model(model, op)
    return model


def apply_to_model(model: dict[str, dict[str, Any]], op: dict[str, Any]) -> dict[str, dict[str, Any]]:
    model = {k: dict(v) for k, v in model.items()}
    kind = op["op"]
    if kind == "add":
        model[op["id"]] = {"text": op["text"], "t": op["t"], "until": None, "count": 0}
    elif kind == "update":
        model[op["id"]]["text"] = op["text"]
    elif kind == "set":
        model[op["id"]]["t"] = op["t"]
    elif kind == "delete":
        del model[op["id"]]
    elif kind == "invalidate":
        model[op["id"]]["until"] = op["until"]
    elif kind == "search":
        for mid in op.get("result") or []:
            model[mid]["count"] += 1
    return model


def memory_state(path: Path) -> dict[str, dict[str, Any]]:
    from poincare_memory import Memory

    with Memory(path=path, read_only=True, num_threads=1) as mem:
        return state_of(mem)


def state_of(mem: Any) -> dict[str, dict[str, Any]]:
    """Every memory's text, time, validity end and access count, by id."""
    return {
        r.id: {
            "text": r.text,
            "t": _us(r.t),
            "until": None if r.valid_until is None else _us(r.valid_until),
            "count": r.access_count,
        }
        for r in mem.list()
    }


def check_memory(
    path: Path, acked: list[dict[str, Any]], pending: dict[str, Any] | None, base: dict
) -> tuple[bool, dict, str]:
    """(state is as acknowledged, the state found, why not)."""
    found = memory_state(path)
    expected = memory_model(acked, base)
    if found == expected:
        return True, found, ""
    if pending is not None:
        if pending["op"] == "search":  # its results are unknown: each count may be one higher
            same = found.keys() == expected.keys() and all(
                {k: v for k, v in found[m].items() if k != "count"}
                == {k: v for k, v in expected[m].items() if k != "count"}
                and expected[m]["count"] <= found[m]["count"] <= expected[m]["count"] + 1
                for m in found
            )
            if same:
                return True, found, ""
        elif found == apply_to_model(expected, pending):
            return True, found, ""
    lost = sorted(set(expected) - set(found))[:5]
    extra = sorted(set(found) - set(expected))[:5]
    changed = sorted(m for m in set(found) & set(expected) if found[m] != expected[m])[:5]
    return (
        False,
        found,
        f"lost {lost}, unexpected {extra}, differing {[(m, expected[m], found[m]) for m in changed]}",
    )


@dataclass
class CrashReport:
    kills: int = 0
    seconds: float = 0.0
    by_writer: dict[str, int] = field(default_factory=dict)
    acknowledged_ops: int = 0
    lost_ops: int = 0
    stores_that_did_not_open: int = 0
    kills_inside_a_checkpoint_or_save: int = 0  # an unfinished snapshot/data file was left
    in_flight_applied: int = 0
    damaged_copies: dict[str, int] = field(default_factory=dict)  # outcome -> count
    failures: list[str] = field(default_factory=list)


def run(kills: int, seed: int, work: Path, min_ms: int, max_ms: int) -> CrashReport:
    report = CrashReport()
    rng = random.Random(seed)
    started = time.monotonic()
    bases: dict[str, Any] = {"mixed": {}, "checkpoint": {}, "save": None}
    # Every state the acknowledged operations built, in order, per Memory writer: what a store
    # whose log lost its end may hold.
    history: dict[str, list[dict[str, Any]]] = {"mixed": [{}], "checkpoint": [{}]}
    for round_no in range(kills):
        writer = WRITERS[round_no % len(WRITERS)]
        target = work / writer
        journal = work / f"{writer}-{round_no}.journal"
        command = [sys.executable, __file__, "--child", writer, str(target), str(journal)]
        child = subprocess.Popen(
            [*command, str(seed * 100000 + round_no)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        # Wait until the writer is working (its first acknowledgement), then a random while.
        deadline = time.monotonic() + 60
        while not (journal.exists() and b'"done"' in journal.read_bytes()) and child.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
        time.sleep(rng.uniform(min_ms, max_ms) / 1000)
        if child.poll() is not None:
            err = child.stderr.read().decode() if child.stderr else ""
            report.failures.append(f"round {round_no} ({writer}): the writer exited by itself: {err[-1500:]}")
            break
        child.send_signal(signal.SIGKILL)
        child.wait()
        report.kills += 1
        report.by_writer[writer] = report.by_writer.get(writer, 0) + 1
        acked, pending = read_journal(journal)
        report.acknowledged_ops += len(acked)
        leftovers = [p for p in target.rglob("*") if p.name.endswith(".tmp") or ".tmp-" in p.name]
        report.kills_inside_a_checkpoint_or_save += bool(leftovers)
        try:
            if writer == "save":
                ok, state, why = check_index(target, acked, pending, bases["save"])
            else:
                ok, state, why = check_memory(target, acked, pending, bases[writer])
        except Exception as exc:  # noqa: BLE001 - the store did not open: the worst outcome
            report.stores_that_did_not_open += 1
            report.failures.append(f"round {round_no} ({writer}): did not open: {type(exc).__name__}: {exc}")
            break
        if not ok:
            report.lost_ops += 1
            report.failures.append(f"round {round_no} ({writer}): {why}")
            break
        expected_without = (
            memory_model(acked, bases[writer])
            if writer != "save"
            else (acked[-1]["state"] if acked else bases["save"])
        )
        report.in_flight_applied += state != expected_without
        if writer != "save":
            states = history[writer]
            for j in range(1, len(acked) + 1):
                states.append(memory_model(acked[:j], bases[writer]))
            outcome, why = damaged_copy(target, state, states, rng, work / "damaged")
            report.damaged_copies[outcome] = report.damaged_copies.get(outcome, 0) + 1
            if outcome == "silent_loss":
                report.failures.append(f"round {round_no} ({writer}), damaged copy: {why}")
                break
            states.append(state)
        bases[writer] = state
    report.seconds = round(time.monotonic() - started, 1)
    return report


def opened_as_writer(path: Path, **kwargs: Any) -> tuple[dict[str, dict[str, Any]], bool]:
    """(the store's state, whether opening it raised a RecoveryWarning)."""
    import warnings

    from poincare_memory import Memory, RecoveryWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mem = Memory(path=path, num_threads=1, **kwargs)
    with mem:
        state = state_of(mem)
    return state, any(issubclass(w.category, RecoveryWarning) for w in caught)


def damaged_copy(
    target: Path, whole: dict[str, Any], states: list[dict[str, Any]], rng: random.Random, copy: Path
) -> tuple[str, str]:
    """Damages a copy of the store's log once and opens it: ("whole" | "reported" | "refused" |
    "undetectable_cut" | "silent_loss", why). ``whole``: the state it holds undamaged;
    ``states``: every earlier state, in order."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: fuzz.mutators
    from fuzz.mutators import Case, log_damage

    from poincare_memory import LogDamageError

    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(target, copy)
    case = Case(copy, rng)
    if not log_damage(case):
        return "whole", "no log"
    what = "; ".join(case.steps)

    def older(found: dict[str, Any]) -> bool:
        return any(found == s for s in reversed(states))

    try:
        found, warned = opened_as_writer(copy)
    except LogDamageError:
        found, warned = opened_as_writer(copy, recover=True)
        if found != whole and not (warned and older(found)):
            return "silent_loss", f"{what}: recover=True opened another state without a warning"
        return "refused", ""
    if found == whole:
        return ("reported" if warned else "whole"), ""
    if not older(found):
        return "silent_loss", f"{what}: opened a state no prefix of the acknowledged operations builds"
    if warned:
        return "reported", ""
    if case.undetectable:
        return "undetectable_cut", ""
    return "silent_loss", f"{what}: opened with acknowledged operations missing, and no warning"


def check_index(
    path: Path, acked: list[dict[str, Any]], pending: dict[str, Any] | None, base: Any
) -> tuple[bool, Any, str]:
    import poincare_index as pi

    expected = acked[-1]["state"] if acked else base
    if expected is None and not (path / "manifest.json").exists():
        return True, None, ""
    index = pi.read_index(path, num_threads=1)
    index.check_integrity()
    found = index_state(index)
    if found == expected or (pending is not None and found == pending["state"]):
        return True, found, ""
    return (
        False,
        found,
        f"saved index holds {found}, acknowledged {expected}, in flight {pending and pending['state']}",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=30)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--min-ms", type=int, default=20, help="shortest run after the first acknowledgement")
    p.add_argument("--max-ms", type=int, default=600)
    p.add_argument("--json", default=None)
    p.add_argument("--child", nargs=4, metavar=("WRITER", "PATH", "JOURNAL", "SEED"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        writer, path, journal, seed = args.child
        if writer == "save":
            index_writer(Path(path), Path(journal), int(seed))
        else:
            memory_writer(Path(path), Path(journal), int(seed), checkpoint_heavy=writer == "checkpoint")
        return 0
    work = Path(tempfile.mkdtemp(prefix="poincare-crash-"))
    try:
        report = run(args.kills, args.seed, work, args.min_ms, args.max_ms)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = asdict(report)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc))
    ok = not report.failures and report.kills == args.kills
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
