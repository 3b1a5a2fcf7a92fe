"""A function takes at most five parameters (docs: /work/shared/STYLE.md's rule, "a function
with more than five parameters wants a typed object").

This scan (AST, every file of orchestrator/, workers/ and nodes/) counts positional-only,
ordinary and keyword-only parameters, not ``*args``/``**kwargs`` and not a method's
``self``/``cls``, and fails naming ``file:line:function`` for any function above the limit:
group the parameters that travel together into a frozen dataclass named in the domain's
words (a claim, a completion, a stream's config), not a catch-all bag.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "workers", "nodes")
LIMIT = 5

# Known exceptions, each with its reason. Keyed by "file:function" (not the line, so an edit
# above does not break the list); an entry that no longer exceeds the limit fails the test,
# so the list only shrinks.
ALLOWED: dict[str, str] = {
    # The error tree's root: one message and the context fields every error carries
    # (graph, node, edge, handle, run, parameter, path), keyword-only, each mirrored by
    # to_dict's JSON that the API and events send. A context object would wrap every one
    # of the raise sites and put a level between an error and its fields.
    "orchestrator/kernel/errors.py:OrchestratorError.__init__": "the error tree's context fields",
}


def counts(source: str) -> list[tuple[int, str, int]]:
    """(line, qualified name, parameter count) of every function in ``source``."""
    found: list[tuple[int, str, int]] = []

    def visit(node: ast.AST, scope: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{scope}{child.name}.", True)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                args = child.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                if in_class and names[:1] in (["self"], ["cls"]):
                    names = names[1:]
                found.append((child.lineno, f"{scope}{child.name}", len(names)))
                visit(child, f"{scope}{child.name}.", False)
            else:
                visit(child, scope, in_class)

    visit(ast.parse(source), "", False)
    return found


def project_excess() -> dict[str, tuple[int, int]]:
    """``file:function`` -> (line, count) of every function above the limit."""
    out: dict[str, tuple[int, int]] = {}
    for package in PACKAGES:
        for file in sorted((ROOT / package).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            for line, name, count in counts(file.read_text(encoding="utf-8")):
                if count > LIMIT:
                    out[f"{path}:{name}"] = (line, count)
    return out


def test_the_scan_counts_every_kind_of_parameter_but_self_and_cls() -> None:
    source = ("def f(a, /, b, *args, c, **kw):\n    def inner(x, y): ...\n"
              "class C:\n    def m(self, a): ...\n    @classmethod\n    def k(cls): ...\n"
              "    @staticmethod\n    def s(a, b, c): ...\n"
              "async def g(a, b, c, d, e, f): ...\n")
    assert counts(source) == [(1, "f", 3), (2, "f.inner", 2), (4, "C.m", 1), (6, "C.k", 0),
                              (8, "C.s", 3), (9, "g", 6)]


def test_no_function_takes_more_than_five_parameters() -> None:
    excess = project_excess()
    offending = [f"{key.split(':')[0]}:{line}:{key.split(':')[1]} ({count} parameters)"
                 for key, (line, count) in sorted(excess.items()) if key not in ALLOWED]
    assert offending == [], ("group the parameters that travel together into a typed object "
                             f"named in the domain's words: {offending}")


def test_the_allow_list_names_only_functions_still_above_the_limit() -> None:
    stale = sorted(set(ALLOWED) - set(project_excess()))
    assert stale == [], f"remove these from ALLOWED, they now fit the limit: {stale}"
