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
    # then the mammals: the root near the origin, a search from dog
    assert "hierarchy demo: WordNet's mammal closure (1,182 synsets" in out
    assert "nearest to dog.n.01:" in out


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


def test_no_arguments_prints_help_instead_of_running_the_demo(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "usage: poincare-index" in out and "demo" in out and "info" in out
    assert "recall@10" not in out


def test_info_describes_a_saved_index_and_a_store(tmp_path, capsys):
    import json
    from datetime import datetime, timezone

    import numpy as np

    import poincare_index as pi
    from poincare_memory import HalfLife, Memory

    index = pi.PoincareIndex(4, M=8)
    index.add(np.full((5, 4), 0.05, dtype=np.float32) * np.arange(1, 6)[:, None],
              t=np.datetime64("2026-01-02"), metadata={"kind": ["a"] * 5})  # fmt: skip
    index.save(tmp_path / "ix")
    assert main(["info", str(tmp_path / "ix"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["points"] == 5 and doc["dim"] == 4 and doc["hnsw"]["M"] == 8
    assert doc["time_range"]["first"].startswith("2026-01-02") and doc["metadata_columns"] == ["kind"]
    with Memory(decay=HalfLife(hours=24), path=tmp_path / "store", namespace="team") as mem:
        mem.add("a fact", t=datetime(2026, 5, 1, tzinfo=timezone.utc))
    assert main(["info", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "namespace: team" in out and "memories: 1" in out and "HalfLife" in out
    assert main(["info", str(tmp_path / "nothing")]) == 2
    assert "nothing at" in capsys.readouterr().err


def test_hierarchy_demo_root_near_the_origin():
    pytest.importorskip("numba")
    from poincare_index.demo import run_hierarchy_demo

    got = run_hierarchy_demo(epochs=20)
    assert got is not None and got["map"] > 0.8 and got["root_depth"] < 1.0
