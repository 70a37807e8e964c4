"""Three SIGKILLs (one per writer) on every test run; CI runs thirty (.ci/run), and the long
run's figures are in docs/reliability.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HARNESS = Path(__file__).with_name("crash_writers.py")


def test_killed_writers_lose_nothing_acknowledged(tmp_path):
    out = tmp_path / "crash.json"
    result = subprocess.run(
        [sys.executable, str(HARNESS), "--kills", "3", "--seed", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.exists(), result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["failures"] == [] and result.returncode == 0, report["failures"]
    assert report["kills"] == 3 and report["by_writer"] == {"mixed": 1, "checkpoint": 1, "save": 1}
    assert report["acknowledged_ops"] > 3  # each writer got work acknowledged before its kill
    # Each killed store's copy had its log damaged once, and nothing was lost without a word.
    assert sum(report["damaged_copies"].values()) == 2 and "silent_loss" not in report["damaged_copies"]
