"""The README's runnable examples run as written and print what the README says.

The examples that moved to docs/ (LangChain, LlamaIndex, the sharded index, the memory service,
the hierarchy) run in tests/test_docs.py, with what these tests asserted of them (its EXPECTED).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _block_after(heading: str, page: Path = README) -> str:
    text = page.read_text(encoding="utf-8")
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
    exec(_block_after("### Time inside the index"), namespace)  # and so does this one
    assert capsys.readouterr().out == ""


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
    "headings",
    [
        # saves an index; two builds of 10,000 points (over 5 s: the test above runs it once)
        pytest.param(
            ["## API tour", "### In place of FAISS", "### Time inside the index"],
            marks=pytest.mark.slow,
            id="api-tour",
        ),  # fmt: skip
        pytest.param(["## Memory in five minutes"], id="memory"),  # archives, opens a store
    ],
)
def test_examples_run_again_in_the_same_folder(headings, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, second = _run_twice(headings)
    assert second == first and first


def test_memory_tour_prints_what_the_readme_says(tmp_path, monkeypatch, capsys):
    """The first seed's example as the tour shows it: "b 0.952 ..., a 0.25 ..." (a memory 28 days
    old under a 14-day half-life weighs 0.25; the one a day old 2^(-1/14) and ranks first)."""
    monkeypatch.chdir(tmp_path)
    block = _block_after("## Memory in five minutes")
    assert "print(r.id, round(r.time_weight, 3), r.explain())   # b 0.952 ..., a 0.25 ..." in block
    exec(block, {})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:2]] == [["b", "0.952"], ["a", "0.25"]]
    assert all(" = -distance " in line for line in lines[:2])  # explain(): the score term by term
