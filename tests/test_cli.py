"""The command line: `poincare-index demo` and `info`, and `python -m poincare_index`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from poincare_index.cli import main


def test_demo_small(capsys):
    assert main(["demo", "--n", "3000", "--dim", "8", "--queries", "50", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "recall@10" in out and "queries/s" in out
    # the recall column at the largest ef is high on this easy setting
    last = [line for line in out.splitlines() if line.strip().startswith("128")][0]
    assert float(last.split()[1]) >= 0.9
    # then time at work: the changed fact ranks first now, the old one as of 40 days ago
    assert "as of now" in out and "as of 40 days ago" in out


def test_memory_demo_order_flips():
    from poincare_index.demo import run_memory_demo

    assert run_memory_demo() == [["new", "old"], ["old", "new"]]


def test_info(capsys):
    assert main(["info"]) == 0
    assert "kernels" in capsys.readouterr().out


def test_bad_arguments():
    with pytest.raises(SystemExit):
        main(["demo", "--n", "0"])


def test_module_entry_point(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "poincare_index", "info"], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 0 and "poincare_index" in proc.stdout
