"""The kernel stays generic: no foreign imports, no domain words, no node type names."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import get_args

import orchestrator.kernel as kernel_pkg
from orchestrator.kernel.definition import ParameterType

KERNEL = Path(kernel_pkg.__file__).parent
REPO = KERNEL.parent.parent
FORBIDDEN_IMPORTS = {"celery", "redis", "fastapi", "starlette", "agno", "kombu", "nodes", "workers",
                     "httpx", "sse_starlette", "uvicorn", "openai", "mcp"}
DOMAIN_WORDS = ("agent", "agents", "tool", "tools", "chat", "llm", "mcp", "toolset", "prompt")


def kernel_files() -> list[Path]:
    return sorted(KERNEL.glob("*.py"))


def test_kernel_imports_nothing_but_stdlib_and_pydantic() -> None:
    for path in kernel_files():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN_IMPORTS, f"{path.name} imports {name}"


def _code_without_docstrings_and_comments(path: Path) -> str:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0].value.value = ""
    return ast.unparse(tree)


def test_kernel_contains_no_domain_word() -> None:
    pattern = re.compile(r"\b(" + "|".join(DOMAIN_WORDS) + r")\b", re.IGNORECASE)
    for path in kernel_files():
        text = _code_without_docstrings_and_comments(path)
        hits = pattern.findall(text)
        assert not hits, f"{path.name} mentions {sorted(set(hits))}"


def test_kernel_contains_no_node_type_name() -> None:
    type_ids = {p.parent.name for p in (REPO / "nodes").rglob("definition.json")}
    assert type_ids, "no node folders found"
    # A node type may share its name with a parameter type (e.g. "code"): that is data
    # vocabulary of definitions, not a node type check.
    type_ids -= set(get_args(ParameterType))
    for path in kernel_files():
        text = _code_without_docstrings_and_comments(path)
        for type_id in type_ids:
            assert not re.search(rf"""["']{re.escape(type_id)}["']""", text), f"{path.name} names {type_id}"


def test_kernel_modules_stay_small() -> None:
    for path in kernel_files():
        assert len(path.read_text().splitlines()) <= 400, f"{path.name} is past 400 lines"
