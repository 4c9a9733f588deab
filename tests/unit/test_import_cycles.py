"""No runtime import cycle between product modules (e.g. trainer/loop.py <-> trainer/rollback.py, broken by
trainer/state.py).

Covered: every module of pyproject's ``package-dir`` folders, imports at any depth (a function-level import is
a runtime edge too); imports under ``if TYPE_CHECKING:`` are not edges. Not covered: ``importlib`` by name.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def product_modules() -> dict[str, Path]:
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {(pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"): path
            for pkg, folder in package_dir.items() for path in sorted((ROOT / folder).glob("*.py"))}


def runtime_imports(source: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` imports when it runs (anywhere but under TYPE_CHECKING)."""
    tree = ast.parse(source)
    typing_only = {id(node) for branch in ast.walk(tree)
                   if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
                   for node in ast.walk(branch)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found & known


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, set()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_scanner_sees_function_level_imports_and_skips_type_checking() -> None:
    known = {"p.loop", "p.rollback", "p.config"}
    rollback = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.config import X\n" \
               "def restore():\n    from p.loop import build\n"
    assert runtime_imports(rollback, known) == {"p.loop"}
    assert runtime_imports("from p import rollback\nimport p.config\n", known) == {"p.rollback", "p.config"}
    assert cycles({"p.loop": {"p.rollback"}, "p.rollback": {"p.loop"}, "p.config": set()}) == [["p.loop", "p.rollback"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_runtime_import_cycle_between_product_modules() -> None:
    modules = product_modules()
    graph = {name: runtime_imports(path.read_text(), set(modules)) - {name} for name, path in modules.items()}
    assert "streamgrpo.trainer.loop" in graph and len(graph) > 100
    assert not cycles(graph), f"runtime import cycles: {cycles(graph)}"


def test_the_sandbox_package_imports_nothing_of_rollout() -> None:
    """The python sandbox is its own package (rollout's tool uses it, not the other way round); its errors
    derive from the root error, not from rollout's."""
    modules = product_modules()
    sandbox = {name for name in modules if name.startswith("streamgrpo.sandbox")}
    assert len(sandbox) > 5
    reached = {dep for name in sandbox for dep in runtime_imports(modules[name].read_text(), set(modules))}
    assert not {dep for dep in reached if dep.startswith("streamgrpo.rollout")}, sorted(reached)
