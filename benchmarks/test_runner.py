"""Smoke test of the benchmark runner: every configuration in configs/ at its tiny ``[quick]``
sizes, each in a fresh process (as ``python benchmarks/run.py CONFIG --quick``), and each
result file it writes carries the run's record. Not part of the default test run (pyproject's
testpaths is tests/): ``pytest benchmarks/test_runner.py`` (about 3 minutes on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402


@pytest.mark.parametrize("config", run.all_configs(), ids=os.path.basename)
def test_config_runs_quick(config: str, tmp_path: object) -> None:
    out = str(tmp_path)
    cmd = [sys.executable, os.path.join(HERE, "run.py"), config, "--quick", "--out", out]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for params in run.expand_runs(run.read_toml(config), quick=True):
        path = os.path.join(out, params["out"])
        if path.endswith(".json"):
            with open(path) as f:
                assert json.load(f)["run"]["quick"] is True
        else:
            assert os.path.exists(os.path.splitext(path)[0] + ".log")


def test_every_config_names_a_known_suite_and_parameters() -> None:
    import registry

    for config in run.all_configs():
        c = run.read_toml(config)
        module = registry.suite(c["suite"])
        for params in run.expand_runs(c, quick=False) + run.expand_runs(c, quick=True):
            run.suite_params(module, {k: v for k, v in params.items() if k in module.DEFAULTS or k != "out"})
