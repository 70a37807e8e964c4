"""The README's runnable examples run as written (those that need no files or extras here)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _block_after(heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(heading)
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match is not None, f"no python block after {heading!r}"
    return match.group(1)


def test_api_tour_and_faiss_examples_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the tour saves an index to the working directory
    namespace: dict[str, object] = {}
    exec(_block_after("## API tour"), namespace)
    exec(_block_after("### In place of FAISS"), namespace)  # it continues the tour
    assert capsys.readouterr().out.split() == ["32", "0"]


@pytest.mark.parametrize(
    ("heading", "module", "printed"),
    [
        ("## Use it from LangChain", "langchain_core", "d1 {'team': 'infra', 'sev': 2}"),
        ("## Use it from LlamaIndex", "llama_index.core", "[3, 4]"),
    ],
)
def test_framework_examples_run(heading, module, printed, tmp_path, monkeypatch, capsys):
    if not os.environ.get("CI"):  # CI installs the extras: a missing one fails there
        pytest.importorskip(module)
    monkeypatch.chdir(tmp_path)  # the examples save to the working directory
    exec(_block_after(heading), {})
    assert capsys.readouterr().out.strip() == printed


def test_sharded_example_runs(tmp_path, monkeypatch, capsys):
    if not os.environ.get("CI"):
        pytest.importorskip("ray")
    import ray

    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.chdir(tmp_path)  # the example saves to the working directory
    namespace: dict[str, object] = {}
    exec(_block_after("## Beyond one machine"), namespace)
    exec(_block_after("- **Time partitions**"), namespace)  # it continues the first
    printed = [line for line in capsys.readouterr().out.splitlines() if "(raylet)" not in line]
    assert printed == ["True", "7 True", "448 5"]


def test_memory_service_example_runs(tmp_path, monkeypatch, capsys):
    if not os.environ.get("CI"):
        pytest.importorskip("ray")
    import ray

    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.chdir(tmp_path)  # the example stores the memories in the working directory
    exec(_block_after("### Memory as a service"), {})
    printed = [line for line in capsys.readouterr().out.splitlines() if "(raylet)" not in line]
    assert printed == ["['prefers green tea']", "['alice', 'bob'] 1"]


def test_hierarchy_example_runs(capsys):
    if not os.environ.get("CI"):
        pytest.importorskip("numba")
    exec(_block_after("## Embed your own hierarchy"), {})
    assert capsys.readouterr().out.split("\n")[:2] == ["True True", "dog.n.01"]
