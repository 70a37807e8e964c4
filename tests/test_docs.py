"""Every ```python block of the README and of docs/*.md runs as written, and the documents' links
and benchmark commands point at things that exist.

The blocks of one page run in order in one namespace, in a temporary working directory, twice (a
user running the examples again in the same folder): what each block prints must be the same both
times, and, where EXPECTED names it, what the page says it prints. A block that needs an optional
extra (Ray, LangChain, LlamaIndex, MiniLM, numba) is skipped when the module is missing, except in
CI (the environment variable CI set), where the extras are installed and a missing one fails. A
block that cannot run here is fenced ```python no-run and named in NO_RUN.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
BENCHMARKS = ROOT / "benchmarks" / "BENCHMARKS.md"

# A fenced block, possibly indented (inside a list item); the closing fence has the same indent.
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
HEADING = re.compile(r"^(#{1,6}) .*$", re.M)

# Blocks that cannot run here (network, GPU, a real cluster), by (page, heading): must stay few.
NO_RUN: list[tuple[str, str]] = []

# The module each optional extra brings, and how a block shows it needs it.
EXTRAS: dict[str, re.Pattern[str]] = {
    "ray": re.compile(
        r"^\s*(import ray\b|from ray\b|from poincare_index\.distributed\b)|\bray\.init\(", re.M
    ),
    "langchain_core": re.compile(
        r"^\s*from (langchain_core\b|poincare_index\.integrations\.langchain\b)", re.M
    ),
    "llama_index.core": re.compile(
        r"^\s*from (llama_index\b|poincare_index\.integrations\.llama_index\b)", re.M
    ),
    "numba": re.compile(r"\bCustomDecay\(|^\s*from poincare_index\.hierarchy\b", re.M),
    "sentence_transformers": re.compile(r"\bMiniLMEmbedder\("),
}

# Pages whose run takes more than ~5 s: Ray's start, or the README (its blocks also run, with
# their own assertions, in tests/test_readme.py in the default run).
SLOW_PAGES = {"README.md", "distributed.md"}


@dataclass
class Block:
    page: str  # file name
    heading: str  # the nearest heading above the block
    ordinal: int  # its place among the blocks under that heading
    line: int
    no_run: bool
    code: str

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line} ({self.heading})"

    def extras(self) -> list[str]:
        return [module for module, pattern in EXTRAS.items() if pattern.search(self.code)]


def python_blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    fences = [m.span() for m in FENCE.finditer(text)]  # a "# comment" in a block is no heading
    headings = [(m.start(), m.group(0).strip()) for m in HEADING.finditer(text)
                if not any(a <= m.start() < b for a, b in fences)]  # fmt: skip
    found: list[Block] = []
    seen: dict[str, int] = {}
    for m in FENCE.finditer(text):
        info = m.group("info").strip().split()
        if not info or info[0] != "python":
            continue
        assert info[1:] in ([], ["no-run"]), f"{page.name}: unknown fence ```{m.group('info')}"
        heading = next((h for at, h in reversed(headings) if at < m.start()), "")
        indent = m.group("indent")
        body = "".join(line[len(indent):] if line.startswith(indent) else line
                       for line in m.group("body").splitlines(keepends=True))  # fmt: skip
        found.append(Block(page.name, heading, seen.get(heading, 0), text.count("\n", 0, m.start()) + 1,
                           info[1:] == ["no-run"], body))  # fmt: skip
        seen[heading] = seen.get(heading, 0) + 1
    return found


def _lines(printed: str) -> list[str]:
    return [line for line in printed.splitlines() if "(raylet)" not in line]


Expected = Callable[[list[str], int], bool]


def prints(*lines: str) -> Expected:
    return lambda out, run: out == list(lines)


# What the pages say their blocks print, by (page, heading, ordinal under that heading).
EXPECTED: dict[tuple[str, str, int], Expected] = {
    ("index-api.md", "## Moving from FAISS", 0): prints("[0 1]"),
    ("time-and-decay.md", "## A fact that changed", 0): prints("['new', 'old']", "['old', 'new']"),
    ("file-formats.md", "## A saved index", 0): prints(
        "['columns', 'graph', 'manifest.json', 'vectors']", "True True"
    ),
    ("file-formats.md", "## A memory store", 0): prints(
        "['CURRENT', 'LOCK', 'config.json', 'log', 'snap', 'usage.json']"
    ),
    ("integrations.md", "## Use it from LangChain", 0): prints("d1 {'team': 'infra', 'sev': 2}"),
    ("integrations.md", "## Use it from LlamaIndex", 0): prints("[3, 4]"),
    ("hierarchy.md", "# Embed your own hierarchy", 0): lambda out, run: out[:2] == ["True True", "dog.n.01"],
    ("distributed.md", "## Sharded index", 0): prints("True"),  # the merge is exact
    ("distributed.md", "## Sharded index", 1): prints("7 True", "448 5"),  # time partitions
    # a second run finds the first run's memories, as the page says ("memories" persists)
    ("distributed.md", "## Memory as a service", 0): lambda out, run: (
        out == ["['prefers green tea']", f"['alice', 'bob'] {run}"]
    ),
}
# Blocks whose output differs between the two runs by design.
PER_RUN = {("distributed.md", "## Memory as a service", 0)}


def _page_param(page: Path):
    marks = [pytest.mark.slow] if page.name in SLOW_PAGES else []
    return pytest.param(page, id=page.name, marks=marks)


PAGES_WITH_BLOCKS = [p for p in PAGES if any(not b.no_run for b in python_blocks(p))]


@pytest.mark.parametrize("page", [_page_param(p) for p in PAGES_WITH_BLOCKS])
def test_the_python_blocks_of_a_page_run_as_written(page, tmp_path, monkeypatch):
    blocks = [b for b in python_blocks(page) if not b.no_run]
    missing = set()
    if not os.environ.get("CI"):  # CI installs the extras: a missing one fails there
        for module in {m for b in blocks for m in b.extras()}:
            try:
                __import__(module)
            except ImportError:
                missing.add(module)
    monkeypatch.chdir(tmp_path)  # examples save to the working directory
    outputs: list[dict[tuple[str, str, int], list[str]]] = []
    skipped: list[str] = []
    for run in (1, 2):
        if any("ray" in b.extras() for b in blocks):
            import ray

            if ray.is_initialized():
                ray.shutdown()
        namespace: dict[str, object] = {"__name__": "__docs__"}
        printed: dict[tuple[str, str, int], list[str]] = {}
        for block in blocks:
            if missing.intersection(block.extras()):
                if run == 1:
                    skipped.append(f"{block.name} needs {sorted(missing.intersection(block.extras()))}")
                continue
            with contextlib.redirect_stdout(io.StringIO()) as out:
                try:
                    exec(compile(block.code, block.name, "exec"), namespace)
                except Exception as e:
                    raise AssertionError(f"{block.name} (run {run}) raised {e!r}") from e
            key = (block.page, block.heading, block.ordinal)
            printed[key] = _lines(out.getvalue())
            if key in EXPECTED:
                assert EXPECTED[key](printed[key], run), f"{block.name} (run {run}) printed {printed[key]}"
        outputs.append(printed)
    for key, first in outputs[0].items():
        if key not in PER_RUN:
            assert outputs[1][key] == first, f"{key}: a second run in the same folder printed otherwise"
    if skipped:
        pytest.skip("ran the other blocks; skipped " + "; ".join(skipped))


def test_every_python_block_is_run_or_named_as_not_runnable():
    blocks = [b for page in PAGES for b in python_blocks(page)]
    assert len([b for b in blocks if b.page == "README.md"]) >= 4
    assert len([b for b in blocks if b.page != "README.md"]) >= 10
    no_run = sorted((b.page, b.heading) for b in blocks if b.no_run)
    assert no_run == sorted(NO_RUN), f"```python no-run blocks: {no_run}; NO_RUN lists {NO_RUN}"
    assert len(NO_RUN) <= 3
    # every expectation names a block that exists
    keys = {(b.page, b.heading, b.ordinal) for b in blocks}
    assert set(EXPECTED) <= keys, sorted(set(EXPECTED) - keys)
    # no other spelling of a Python fence slips past the runner
    for page in PAGES:
        for m in FENCE.finditer(page.read_text(encoding="utf-8")):
            info = m.group("info").strip().split()
            assert not info or info[0] not in ("py", "python3", "pycon", "Python"), (page.name, info)


# ---------------------------------------------------------------- links and commands

LINKED_PAGES = [README, *sorted(DOCS.glob("*.md")), BENCHMARKS]
LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set()
    counts: dict[str, int] = {}
    for m in HEADING.finditer(text):
        slug = _slug(m.group(0).lstrip("#"))
        n = counts.get(slug, 0)
        found.add(slug if n == 0 else f"{slug}-{n}")
        counts[slug] = n + 1
    return found


@pytest.mark.parametrize("page", LINKED_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_and_headings_that_exist(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    broken = []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.name}")
    assert not broken, f"{page.name}: {broken}"


@pytest.fixture(scope="module")
def config_outputs() -> dict[str, list[str]]:
    """Each configuration's result files, expanded as benchmarks/run.py expands its runs
    ([[runs]] and [grid]; else the top-level out)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    outputs = {}
    for path in sorted((ROOT / "benchmarks" / "configs").glob("*.toml")):
        config = tomllib.loads(path.read_text(encoding="utf-8"))
        outs = [run.get("out") for run in config.get("runs", [])]
        grid = config.get("grid", {})
        if grid:
            for values in itertools.product(*grid.values()):
                outs.append(config["out"].format(**dict(zip(grid, values))))
        outputs[path.name] = outs or [config.get("out")]
    assert outputs
    return outputs


RUNNER = re.compile(
    r"python benchmarks/run\.py\s+benchmarks/configs/(?P<config>[\w.-]+\.toml)(?P<rest>[^`]*)`"
)


def test_benchmark_commands_name_configurations_and_runs_that_exist(config_outputs):
    bad = []
    for page in LINKED_PAGES:
        text = re.sub(r"\s*\n\s*", " ", page.read_text(encoding="utf-8"))  # commands may wrap
        for m in RUNNER.finditer(text):
            config = m.group("config")
            if config not in config_outputs:
                bad.append(f"{page.name}: {config} does not exist")
                continue
            only = re.search(r"--only (\S+)", m.group("rest"))
            if only and only.group(1) not in config_outputs[config]:
                bad.append(f"{page.name}: {config} has no run {only.group(1)}")
    assert not bad, bad


def test_the_headline_table_gives_each_figure_a_command():
    text = BENCHMARKS.read_text(encoding="utf-8")
    table = text.split("## Headlines", 1)[1].split("\n## ", 1)[0]
    rows = [
        line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| headline")
    ]
    assert len(rows) >= 10
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 7, row
        if cells[1] == "not measured yet":
            continue
        assert cells[6].startswith("`python benchmarks/run.py benchmarks/configs/"), row
        assert cells[5], row  # when, and on which hardware
    for headline in ("Chroma", "LoCoMo"):
        assert any(headline in row and "not measured yet" in row for row in rows), headline
