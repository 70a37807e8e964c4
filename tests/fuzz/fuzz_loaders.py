"""Fuzzes the loaders of saved indexes and Memory stores with structure-aware mutations.

Each case copies a seed (tests/fuzz/corpus.py), mutates it (tests/fuzz/mutators.py: checksums
recomputed, so the parsers behind them are reached) and opens and uses it in a forked child
with limits on memory, CPU time and wall time. A case passes when the input is refused with
IndexFormatError or is accepted and then works: searched, listed, its strings read, saved and
reopened (an index), written to, checkpointed and reopened (a store). Anything else -- another
exception, MemoryError, a signal, a hang -- is a failure, kept under ``--out`` with the steps
that made it and the traceback.

The ``store_log`` target damages a store's log once, as a disk, a crash or a person would (no
checksum recomputed), and checks that nothing is lost without a word: the store opens with
every logged operation, or with a prefix of them and a RecoveryWarning, or refuses with
LogDamageError (and then ``recover=True`` opens a prefix, with a warning). A prefix opened
without a warning is a failure ("silent loss"), except a log cut exactly where a record ends,
which no reader can tell from a writer that stopped there: counted apart as "undetectable_cut".

    python tests/fuzz/fuzz_loaders.py --seconds 40                 # a short run (CI)
    python tests/fuzz/fuzz_loaders.py --execs 100000 --json r.json # the long run, by hand
    python tests/fuzz/fuzz_loaders.py --replay 1000000042          # one case, in this process
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # "fuzz.corpus" and "fuzz.mutators" as a package

from fuzz.mutators import DAMAGE, Case, mutate  # noqa: E402

TARGETS = ("flat", "hnsw", "store", "hnsw_sq8", "store_log")
# Child exit codes (signals and timeouts are told apart by the parent).
ACCEPTED, REFUSED, NEEDS_EMBEDDER, OTHER_ERROR, OUT_OF_MEMORY, HARNESS_ERROR = 0, 3, 4, 5, 6, 7
REPORTED, UNDETECTABLE_CUT = 8, 9
_OUTCOME = {
    ACCEPTED: "accepted",
    REFUSED: "refused",
    NEEDS_EMBEDDER: "needs_embedder",
    OTHER_ERROR: "other_error",
    OUT_OF_MEMORY: "out_of_memory",
    HARNESS_ERROR: "harness_error",
    REPORTED: "reported",
    UNDETECTABLE_CUT: "undetectable_cut",
}
PASSING = {"accepted", "refused", "needs_embedder", "reported", "undetectable_cut"}


@dataclass
class FuzzReport:
    execs: int = 0
    seconds: float = 0.0
    execs_per_second: float = 0.0
    workers: int = 1
    seed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    by_target: dict[str, dict[str, int]] = field(default_factory=dict)
    by_mutator: dict[str, int] = field(default_factory=dict)
    # The most frequent refusal messages (paths and numbers blanked): which checks the cases reach.
    refusal_reasons: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, object]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(v for k, v in self.outcomes.items() if k not in PASSING)


# ---- what a case does with its input ------------------------------------------------------------


def _read_every_value(table: object) -> None:
    """Reads every value of every column (strings byte by byte) as Python objects;
    nanosecond times as integers (datetime cannot hold them)."""
    import pyarrow as pa

    for column in table.columns:  # type: ignore[attr-defined]
        if pa.types.is_timestamp(column.type) and column.type.unit == "ns":
            column = column.cast(pa.int64())
        column.to_pylist()


def exercise_index(path: Path, work: Path) -> None:
    import numpy as np
    import pyarrow as pa

    import poincare_index as pi

    index = pi.read_index(path, num_threads=1)
    rng = np.random.default_rng(0)
    q = (rng.normal(size=(3, index.dim)) * 0.1).astype(np.float32)
    index.search(q, 5)
    _read_every_value(index.columns)
    decay = pi.Ebbinghaus(stability_hours=48, boost_per_access=0.5)
    index.search_scored(q, 5, decay=decay, at_time=np.datetime64("2026-07-01"), touch=True)
    for filters in ({"n": {"$gte": 3}}, {"kind": "note"}, {"t": {"$lt": np.datetime64("2026-06-02")}}):
        try:
            index.search_scored(q, 5, filters=filters)
        except (TypeError, ValueError) as exc:  # the column is gone or has another type now
            if isinstance(exc, pi.IndexFormatError):
                raise
    if isinstance(index, pi.PoincareIndex):
        index.check_integrity()
    if int(index._core.next_auto_id) > 2**63 - 1 - len(q):  # valid: the high-water mark is the top id
        used = index.columns.column("id").to_numpy()
        free = np.setdiff1d(np.arange(len(q) + len(used)), used)
        index.add_with_ids(q * 0.5, free[: len(q)])
    else:
        index.add(q * 0.5)
    index.remove_ids(index.columns.column("id").to_numpy()[:2])
    again = work / "resaved"
    index.save(again)
    reread = pi.read_index(again, num_threads=1)
    same = (
        all(  # NaN equal to NaN
            repr(a.cast(pa.int64()).to_pylist() if pa.types.is_timestamp(a.type) else a.to_pylist())
            == repr(b.cast(pa.int64()).to_pylist() if pa.types.is_timestamp(b.type) else b.to_pylist())
            for a, b in zip(reread.columns.columns, index.columns.columns)
        )
        and reread.columns.schema == index.columns.schema
    )
    if reread.ntotal != index.ntotal or not same:
        raise AssertionError("an accepted index does not survive save and load")


def exercise_store(path: Path, work: Path) -> None:
    from datetime import datetime, timezone

    from poincare_index.memory import Memory

    at = datetime(2026, 7, 1, tzinfo=timezone.utc)
    mem = Memory(path=path, num_threads=1)
    n = len(mem)
    listed = mem.list()
    if len(listed) != n or len({r.id for r in listed}) != n:
        raise AssertionError(f"len(mem) is {n} but list() returned {len(listed)} memories")
    for r in listed:
        mem.get(r.id)
    mem.search("alpha note", k=5, at_time=at)
    mem.to_arrow()
    mem.add("a fact added after opening", id="fuzz-new", t=at)
    mem.checkpoint()
    mem.close()
    again = Memory(path=path, num_threads=1)
    if len(again) != n + 1 or "fuzz-new" not in again:
        raise AssertionError("an accepted store does not keep what was added after reopening")
    again.close()


def exercise_store_log(path: Path, states: list[object], undetectable: str | None) -> int:
    """Opens a store whose log was damaged once; the outcome, or AssertionError for a loss
    without a word (see the module's docstring). ``states``: the store's state after each
    logged operation (corpus.build)."""
    import warnings

    from fuzz.corpus import store_state

    from poincare_index.memory import LogDamageError, Memory, RecoveryWarning

    def opened(**kwargs: object) -> tuple[object, bool]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mem = Memory(path=path, num_threads=1, **kwargs)
        found = json.loads(json.dumps(store_state(mem)))
        mem.close()
        return found, any(issubclass(w.category, RecoveryWarning) for w in caught)

    def prefix(found: object) -> int:
        if found not in states:
            raise AssertionError("the store opened in a state that no prefix of its log builds")
        return states.index(found)

    try:
        found, warned = opened()
    except LogDamageError:
        try:
            found, warned = opened(recover=True)
        except Exception as exc:  # noqa: BLE001 - recover=True must open a damaged log
            raise AssertionError(f"recover=True did not open it: {type(exc).__name__}: {exc}") from None
        if prefix(found) < len(states) - 1 and not warned:
            raise AssertionError("recover=True dropped operations without a RecoveryWarning") from None
        return REFUSED
    kept = prefix(found)
    if kept == len(states) - 1:
        return REPORTED if warned else ACCEPTED
    if warned:
        return REPORTED
    if undetectable:
        return UNDETECTABLE_CUT
    raise AssertionError(
        f"silent loss: opened with {kept} of {len(states) - 1} logged operations, no warning"
    )


def run_case(seed_dirs: dict[str, Path], target: str, case_seed: int, work: Path) -> tuple[int, str]:
    """Mutates a copy of the seed and exercises it; (exit code, detail). Runs in the child."""
    import poincare_index as pi

    case_dir = work / "input"
    shutil.copytree(seed_dirs[target], case_dir)
    case = Case(case_dir, random.Random(case_seed))
    try:
        used = mutate(case, max_steps=1, mutators=DAMAGE) if target == "store_log" else mutate(case)
    except Exception:  # noqa: BLE001 - a harness bug, reported as such
        return HARNESS_ERROR, traceback.format_exc()
    (work / "STEPS").write_text(json.dumps({"mutators": used, "steps": case.steps}))
    if target == "store_log":
        states = json.loads((seed_dirs[target].parent / "store.states.json").read_text())
        try:
            return exercise_store_log(case_dir, states, case.undetectable), case.undetectable or ""
        except BaseException:  # noqa: BLE001 - a silent loss, or any other exception: a finding
            return OTHER_ERROR, traceback.format_exc()
    try:
        if target == "store":
            exercise_store(case_dir, work)
        else:
            exercise_index(case_dir, work)
    except pi.IndexFormatError as exc:
        return REFUSED, str(exc)
    except ValueError as exc:
        if str(exc).startswith("this store was built with the embedder"):
            return NEEDS_EMBEDDER, str(exc)  # a valid store of a custom embedder
        return OTHER_ERROR, traceback.format_exc()
    except MemoryError:
        return OUT_OF_MEMORY, traceback.format_exc()
    except BaseException:  # noqa: BLE001 - every other exception is a finding
        return OTHER_ERROR, traceback.format_exc()
    return ACCEPTED, ""


def _child(
    seed_dirs: dict[str, Path], target: str, case_seed: int, work: Path, limits: argparse.Namespace
) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
        if limits.memory_mb:
            cap = limits.memory_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        code, detail = run_case(seed_dirs, target, case_seed, work)
        (work / "RESULT").write_text(detail)
    except BaseException:  # noqa: BLE001
        code = HARNESS_ERROR
        try:
            (work / "RESULT").write_text(traceback.format_exc())
        except OSError:
            pass
    os._exit(code)


# ---- the driver -------------------------------------------------------------------------------


def build_seeds(root: Path) -> dict[str, Path]:
    """In a subprocess, so this process starts no threads before it forks."""
    code = (
        f"import sys; sys.path.insert(0, {str(HERE.parent)!r}); from pathlib import Path; "
        f"import fuzz.corpus as c; c.build(Path({str(root)!r}))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root.parent)  # not the checkout
    return {t: root / ("store" if t == "store_log" else t) for t in TARGETS}


def fuzz(args: argparse.Namespace) -> FuzzReport:
    report = FuzzReport(workers=args.workers, seed=args.seed)
    out = Path(args.out)
    failures_dir = out / "failures"
    failures_dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="poincare-fuzz-"))
    seeds = build_seeds(scratch / "seeds")
    running: dict[int, tuple[str, int, Path, float]] = {}
    reasons: dict[str, int] = {}
    start = time.monotonic()
    i = 0

    def finish(pid: int, status: int | None) -> None:
        target, case_seed, work, _ = running.pop(pid)
        if status is None:
            outcome = "hang"
        elif os.WIFSIGNALED(status):
            outcome = f"signal_{signal.Signals(os.WTERMSIG(status)).name}"
        else:
            outcome = _OUTCOME.get(os.WEXITSTATUS(status), f"exit_{os.WEXITSTATUS(status)}")
        if outcome == "signal_SIGXCPU":
            outcome = "hang"
        report.execs += 1
        report.outcomes[outcome] = report.outcomes.get(outcome, 0) + 1
        per = report.by_target.setdefault(target, {})
        per[outcome] = per.get(outcome, 0) + 1
        steps = {}
        if (work / "STEPS").exists():
            steps = json.loads((work / "STEPS").read_text())
            for name in steps.get("mutators", []):
                report.by_mutator[name] = report.by_mutator.get(name, 0) + 1
        if outcome not in PASSING:
            kept = failures_dir / f"{target}-{case_seed}"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.move(str(work), kept)
            detail = (kept / "RESULT").read_text()[-2000:] if (kept / "RESULT").exists() else ""
            failure = {"target": target, "case_seed": case_seed, "outcome": outcome}
            report.failures.append(dict(failure, steps=steps.get("steps", []), detail=detail))
            print(f"FAIL {failure}: {steps.get('steps')}\n{detail}", file=sys.stderr)
        else:
            if outcome == "refused" and (work / "RESULT").exists():
                reason = _reason((work / "RESULT").read_text())
                reasons[reason] = reasons.get(reason, 0) + 1
            shutil.rmtree(work, ignore_errors=True)

    def more() -> bool:
        if args.execs is not None:
            return i < args.execs
        return time.monotonic() - start < args.seconds

    try:
        while more() or running:
            while more() and len(running) < args.workers:
                target = TARGETS[i % len(TARGETS)]
                case_seed = args.seed * 1_000_000_000 + i
                work = scratch / f"case-{case_seed}"
                work.mkdir()
                pid = os.fork()
                if pid == 0:
                    _child(seeds, target, case_seed, work, args)
                running[pid] = (target, case_seed, work, time.monotonic())
                i += 1
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid:
                finish(pid, status)
                continue
            now = time.monotonic()
            for pid, (_, _, _, began) in list(running.items()):
                if now - began > args.timeout:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    finish(pid, None)
            time.sleep(0.001)
    finally:
        for pid in running:
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(scratch, ignore_errors=True)
    report.refusal_reasons = dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:40])
    report.seconds = round(time.monotonic() - start, 1)
    report.execs_per_second = round(report.execs / max(report.seconds, 1e-9), 1)
    return report


def _reason(message: str) -> str:
    """A refusal message with its paths, numbers and quoted values blanked."""
    text = re.sub(r"/\S*", "<path>", message.splitlines()[0] if message else "")
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "<value>", text)
    return re.sub(r"-?\d[\d.e+-]*", "<n>", text)[:160]


def replay(args: argparse.Namespace) -> int:
    """Runs one case in this process and prints what was done and what happened."""
    scratch = Path(tempfile.mkdtemp(prefix="poincare-fuzz-replay-"))
    seeds = build_seeds(scratch / "seeds")
    i = args.replay % 1_000_000_000
    target = args.target or TARGETS[i % len(TARGETS)]
    work = scratch / "case"
    work.mkdir()
    code, detail = run_case(seeds, target, args.replay, work)
    print(json.dumps(json.loads((work / "STEPS").read_text()), indent=1))
    print(_OUTCOME[code], detail, sep="\n")
    print(f"(the mutated input is kept in {work / 'input'})")
    return 0 if _OUTCOME[code] in PASSING else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60.0, help="run this long (ignored with --execs)")
    p.add_argument("--execs", type=int, default=None, help="run exactly this many cases")
    p.add_argument("--workers", type=int, default=max(1, len(os.sched_getaffinity(0))))
    p.add_argument("--seed", type=int, default=1, help="cases are numbered seed * 1e9 + i")
    p.add_argument("--timeout", type=float, default=20.0, help="wall seconds per case")
    p.add_argument("--cpu-seconds", type=int, default=15, help="CPU seconds per case")
    p.add_argument("--memory-mb", type=int, default=2048, help="address-space cap per case (0: none; ASan)")
    p.add_argument("--out", default="fuzz-out", help="failing cases are kept here")
    p.add_argument("--json", default=None, help="write the report here")
    p.add_argument("--replay", type=int, default=None, help="run one case number in this process")
    p.add_argument("--target", choices=TARGETS, default=None)
    args = p.parse_args(argv)
    if args.replay is not None:
        return replay(args)
    report = fuzz(args)
    doc = dict(asdict(report), failed=report.failed)
    text = json.dumps(doc, indent=1)
    if args.json:
        Path(args.json).write_text(text)
    print(json.dumps({k: doc[k] for k in ("execs", "seconds", "execs_per_second", "outcomes", "failed")}))
    return 1 if report.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
