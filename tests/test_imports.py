"""The package's modules import downward (no cycle, function-level imports included), and a
plain ``import poincare_index`` leaves the memory layer and the heavy optional modules unloaded."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "poincare_index"


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports anywhere in its body (not under TYPE_CHECKING); the
    package itself (imported first by any submodule) is left out."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join(anchor + ([child.module] if child.module else []))
                for alias in child.names:
                    if f"{base}.{alias.name}" in modules:
                        found.add(f"{base}.{alias.name}")
                    elif base in modules:
                        found.add(base)
            elif isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names if alias.name in modules)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    found.discard(name)
    found.discard("poincare_index")
    return found


def test_no_import_cycle_among_the_package_modules():
    modules = _module_names()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph["poincare_index.memory.memory"], "the scan found no imports: the test is broken"
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                walk(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            walk(name, [name])
    assert cycles == [], "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_importing_the_package_leaves_the_memory_layer_and_heavy_modules_unloaded(tmp_path):
    # Run from an empty folder: from a source checkout "-c" would import the unbuilt package.
    heavy = ["poincare_index.memory", "bm25s", "numba", "pyarrow.compute", "ray", "tqdm"]
    code = f"import sys, poincare_index; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert out.stdout.strip() == "[]"
    code = "import sys, poincare_index as pi; pi.Memory; print('poincare_index.memory' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert out.stdout.strip() == "True"
