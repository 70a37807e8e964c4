"""The README's runnable examples run as written (those that need no files or extras here)."""

from __future__ import annotations

import contextlib
import io
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


def _run_twice(headings: list[str]) -> list[str]:
    """Runs the blocks after ``headings`` (one program, in order) twice in the working directory,
    as a user running an example again would; returns what each run printed."""
    printed = []
    for _ in range(2):
        namespace: dict[str, object] = {}
        with contextlib.redirect_stdout(io.StringIO()) as out:
            for heading in headings:
                exec(_block_after(heading), namespace)
        printed.append(out.getvalue())
    return printed


@pytest.mark.parametrize(
    ("headings", "module"),
    [
        (["## API tour", "### In place of FAISS", "### Time inside the index"], None),  # saves an index
        (["## Memory in five minutes"], None),  # archives a session and old memories, opens a store
        (["## Use it from LangChain"], "langchain_core"),  # save_local
        (["## Use it from LlamaIndex"], "llama_index.core"),  # persist
    ],
    ids=["api-tour", "memory", "langchain", "llama-index"],
)
def test_examples_run_again_in_the_same_folder(headings, module, tmp_path, monkeypatch):
    if module is not None and not os.environ.get("CI"):
        pytest.importorskip(module)
    monkeypatch.chdir(tmp_path)
    first, second = _run_twice(headings)
    assert second == first and first


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
    for _ in range(2):  # a second run saves over the first run's index
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
    for count in (1, 2):  # a second run finds the first run's memories, as it says
        exec(_block_after("### Memory as a service"), {})
        printed = [line for line in capsys.readouterr().out.splitlines() if "(raylet)" not in line]
        assert printed == ["['prefers green tea']", f"['alice', 'bob'] {count}"]


def test_hierarchy_example_runs(capsys):
    if not os.environ.get("CI"):
        pytest.importorskip("numba")
    exec(_block_after("## Embed your own hierarchy"), {})
    assert capsys.readouterr().out.split("\n")[:2] == ["True True", "dog.n.01"]
