"""Settings are read only at entry points (orchestrator/settings/__init__.py).

The process settings (``load_settings()``, its older name ``get_settings()``) are built by
the entry points: the CLI (``orchestrator/cli/``), the API app factory
(``orchestrator/api/app.py``), the worker process and beat (``workers/``) and
``orchestrator.host.node_host.standalone`` (the host of a run started without one). Every
other module of orchestrator/, workers/ and nodes/ takes its settings group from its
caller, so this scan (AST, every file) fails on any use of those two names elsewhere: a
call, an import, or the function passed on as a value.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "workers", "nodes")
READERS = frozenset({"get_settings", "load_settings"})
ENTRY_FOLDERS = ("orchestrator/settings/", "orchestrator/cli/", "workers/")
ENTRY_FILES = frozenset({"orchestrator/api/app.py"})
ENTRY_FUNCTIONS = frozenset({("orchestrator/host/node_host.py", "standalone")})


def uses(source: str) -> list[tuple[int, str]]:
    """(line, enclosing function or ``<module>``) of every use of a settings reader in ``source``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name if function == "<module>" else f"{function}.{node.name}"
        name = None
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.ImportFrom):
            imported = [a for a in node.names if a.name in READERS]
            found.extend((node.lineno, function) for _ in imported)
        if name in READERS:
            found.append((getattr(node, "lineno", 0), function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "<module>")
    return found


def allowed(path: str, function: str) -> bool:
    if path.startswith(ENTRY_FOLDERS) or path in ENTRY_FILES:
        return True
    if function == "<module>":  # the import of an entry function's module-level reader
        return any(path == p for p, _ in ENTRY_FUNCTIONS)
    return (path, function.split(".")[0]) in ENTRY_FUNCTIONS


def project_uses() -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for package in PACKAGES:
        for file in sorted((ROOT / package).rglob("*.py")):
            found = uses(file.read_text(encoding="utf-8"))
            if found:
                out[file.relative_to(ROOT).as_posix()] = found
    return out


def test_the_scan_sees_calls_imports_and_values_of_the_readers() -> None:
    source = ("from orchestrator.settings import get_settings\n"
              "import orchestrator.settings as s\n"
              "def f():\n    return get_settings().redis_url\n"
              "class C:\n    def m(self):\n        return s.load_settings()\n"
              "slots = Slots(lambda: get_settings().n)\n"
              "def g(settings):\n    return settings.redis_url\n")
    assert uses(source) == [(1, "<module>"), (4, "f"), (7, "m"), (8, "<module>")]
    assert not allowed("orchestrator/host/sandbox/python.py", "f")
    assert not allowed("orchestrator/host/node_host.py", "node_host")
    assert allowed("orchestrator/host/node_host.py", "standalone")
    assert allowed("orchestrator/cli/serve_cmd.py", "_serve") and allowed("workers/beat.py", "<module>")


def test_only_entry_points_read_the_process_settings() -> None:
    found = project_uses()
    assert any(path.startswith("orchestrator/cli/") for path in found)  # the scan reads the tree
    assert any(f == "standalone" for _, f in found["orchestrator/host/node_host.py"])
    offending = [f"{path}:{line} ({function})" for path, lines in found.items() for line, function in lines
                 if not allowed(path, function)]
    assert offending == [], ("read the settings at an entry point and pass the group down "
                             f"(orchestrator/settings/__init__.py): {offending}")
