"""The README's runnable examples run as written (those that need no files or extras here)."""

from __future__ import annotations

import re
from pathlib import Path

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


def test_langchain_example_runs(tmp_path, monkeypatch, capsys):
    import os

    import pytest

    if not os.environ.get("CI"):
        pytest.importorskip("langchain_core")
    monkeypatch.chdir(tmp_path)  # save_local writes to the working directory
    exec(_block_after("## Use it from LangChain"), {})
    assert capsys.readouterr().out.strip() == "d1 {'team': 'infra', 'sev': 2}"


def test_llama_index_example_runs(tmp_path, monkeypatch, capsys):
    import os

    import pytest

    if not os.environ.get("CI"):
        pytest.importorskip("llama_index.core")
    monkeypatch.chdir(tmp_path)  # persist writes to the working directory
    exec(_block_after("## Use it from LlamaIndex"), {})
    assert capsys.readouterr().out.strip() == "[3, 4]"
