"""A few hundred fuzz cases (marked slow: in the full run and CI's, .ci/run); CI also runs a
minute more, and the long run's figures are in docs/reliability.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FUZZER = Path(__file__).with_name("fuzz_loaders.py")


@pytest.mark.slow
def test_fuzzed_loaders_refuse_with_index_format_error_or_work(tmp_path):
    report_path = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, str(FUZZER), "--execs", "150", "--seed", "11", "--workers", "2",
         "--out", str(tmp_path / "out"), "--json", str(report_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert report_path.exists(), result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["failed"] == 0, json.dumps(report["failures"][:3], indent=1)
    assert result.returncode == 0
    assert report["execs"] == 150
    for target in ("flat", "hnsw", "store"):  # the cases reach past the checks and into use
        outcomes = report["by_target"][target]
        assert outcomes.get("refused", 0) > 0 and outcomes.get("accepted", 0) > 0, (target, outcomes)
    # Damaged logs: refused, or reported, or whole; never a loss without a word (a failure above).
    damaged = report["by_target"]["store_log"]
    assert damaged.get("refused", 0) > 0 and damaged.get("reported", 0) > 0, damaged
