"""The import graph of orchestrator/, workers/ and nodes/ has no circle, and the layer
contract of pyproject.toml (``lint-imports``, run by ``./dev test``) holds.

Every import counts, at module level or inside a function (an import deferred to call time
is still a dependency); only ``if TYPE_CHECKING:`` blocks are left out."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "workers", "nodes")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (a package's name stands for its __init__)."""
    files = {_module(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text())
        skip = _type_checking_lines(tree)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if getattr(node, "lineno", 0) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != module and not module.startswith(target + "."):
                    graph[module].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_finder_sees_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_of_the_project_is_in_an_import_circle() -> None:
    graph = import_graph()
    assert graph["orchestrator.kernel.step"] >= {"orchestrator.kernel.runtime"}  # the graph is read
    assert circles(graph) == []


def test_no_package_pair_imports_both_ways() -> None:
    graph = import_graph()

    def package(module: str) -> str:
        parts = module.split(".")
        return ".".join(parts[:2]) if parts[0] == "orchestrator" else parts[0]

    edges = {(package(a), package(b)) for a, targets in graph.items() for b in targets}
    both = sorted((a, b) for a, b in edges if a < b and (b, a) in edges)
    assert both == []


@pytest.mark.timeout(120)
def test_the_layer_contract_holds() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint is not None, "import-linter is a dev dependency (pyproject.toml)"
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout
