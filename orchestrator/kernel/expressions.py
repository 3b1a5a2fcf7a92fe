"""Expressions: ``{{ ... }}`` templates in parameter strings, parsed, never ``eval``-ed.

Contract:

* Text outside ``{{ }}`` is literal. A string that is exactly one ``{{ expr }}``
  (surrounding whitespace allowed) is *whole*: it evaluates to the expression's JSON
  value, type kept. Otherwise each value is stringified into the text (:func:`stringify`).
* Syntax errors raise ExpressionError quoting the expression and the 1-based column (in
  the whole string) of the fault. Unknown function names are syntax errors.
* Run-time faults (type mismatch in a function or operator, division by zero, a node
  with no output, an unknown ``$name``) raise EvaluationError. Missing keys and
  indexes, and members of non-containers, yield null.

The syntax lives in ``expression_parser.py``; this module holds the function table,
templates and evaluation.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .errors import EvaluationError, ExpressionError, ExpressionLimitError
from .expression_limits import (
    DEFAULT_LIMITS,
    Budget,
    ExpressionLimits,
    Spending,
    check_source,
    predicted_chars,
)
from .expression_parser import COMPARISONS, Node, parse_expression, walk
from .sockets import json_type
from .text_cache import TextCache

__all__ = [
    "FUNCTIONS", "ExpressionLimits", "Scope", "Spending", "Template", "check_syntax", "evaluate", "find_references",
    "has_expression", "parse_template", "render", "stringify",
]


def stringify(value: Any) -> str:
    """How a value reads embedded in text: JSON for containers, "" for null, true/false."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool):
        return {None: "", True: "true", False: "false"}[value]
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


# --- the function table --------------------------------------------------------------

_NUM: tuple[type, ...] = (int, float)
_STR: tuple[type, ...] = (str,)
_LIST: tuple[type, ...] = (list, tuple)


def _typed(fn: Callable[..., Any], *kinds: tuple[type, ...]) -> Callable[..., Any]:
    """``fn`` taking only arguments of the given kinds (Python would coerce some silently).

    A boolean is not a number here: JSON keeps them apart.
    """

    def call(*args: Any) -> Any:
        for arg, kind in zip(args, kinds, strict=False):
            if not isinstance(arg, kind) or (isinstance(arg, bool) and bool not in kind):
                raise TypeError
        return fn(*args)

    return call


def _to_int(x: Any) -> int:
    if isinstance(x, str):
        return int(x) if re.fullmatch(r"\s*[+-]?\d+\s*", x) else int(float(x))
    return int(x)


def _to_bool(x: Any) -> bool:
    return x.strip().lower() not in ("", "false", "0", "no") if isinstance(x, str) else bool(x)


def _spread(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    return lambda *xs: fn(xs[0] if len(xs) == 1 else list(xs))  # min(list) or min(a, b, ...)


# name -> (min args, max args, implementation): the only callables an expression reaches.
FUNCTIONS: dict[str, tuple[int, int, Callable[..., Any]]] = {
    "len": (1, 1, len),
    "str": (1, 1, stringify),
    "int": (1, 1, _to_int),
    "float": (1, 1, lambda x: float(x.strip() if isinstance(x, str) else x)),
    "bool": (1, 1, _to_bool),
    "upper": (1, 1, _typed(str.upper, _STR)),
    "lower": (1, 1, _typed(str.lower, _STR)),
    "trim": (1, 1, _typed(str.strip, _STR)),
    "json": (1, 1, lambda x: json.dumps(x, ensure_ascii=False)),
    "parse_json": (1, 1, _typed(json.loads, _STR)),
    "keys": (1, 1, lambda x: list(x.keys())),
    "values": (1, 1, lambda x: list(x.values())),
    "contains": (2, 2, lambda container, x: x in container),
    "join": (1, 2, _typed(lambda xs, sep="": sep.join(map(stringify, xs)), _LIST, _STR)),
    "split": (1, 2, _typed(lambda s, sep=None: s.split(sep), _STR, _STR)),
    "replace": (3, 3, _typed(str.replace, _STR, _STR, _STR)),
    "round": (1, 2, _typed(lambda x, n=0: round(x, n) if n else round(x), _NUM, (int,))),
    "abs": (1, 1, _typed(abs, _NUM)),
    "min": (1, 99, _spread(min)),
    "max": (1, 99, _spread(max)),
    "sum": (1, 1, _typed(lambda xs: sum(_typed(lambda *n: n, *[_NUM] * len(xs))(*xs)), _LIST)),
    "default": (2, 2, lambda x, fallback: fallback if x is None else x),
    "now": (0, 0, lambda: datetime.now(UTC).isoformat()),
    "startswith": (2, 2, _typed(str.startswith, _STR, _STR)),
    "endswith": (2, 2, _typed(str.endswith, _STR, _STR)),
}
_ARITY = {name: (low, high) for name, (low, high, _) in FUNCTIONS.items()}


# --- templates -----------------------------------------------------------------------


class Template:
    """A parsed string: literal text parts and expression parts (AST tuples)."""

    __slots__ = ("_input", "_refs", "parts", "source", "whole")

    def __init__(self, source: str, parts: tuple[str | Node, ...]) -> None:
        self.source, self.parts = source, parts
        exprs = [p for p in parts if not isinstance(p, str)]
        texts = [p for p in parts if isinstance(p, str)]
        self.whole = len(exprs) == 1 and not "".join(texts).strip()
        nodes = [n for e in exprs for n in walk(e)]
        self._refs = frozenset(n[1] for n in nodes if n[0] == "node")
        self._input = any(n[0] == "input" for n in nodes)

    def references(self) -> set[str]:
        """Node names used via ``$('Name')``."""
        return set(self._refs)

    def uses_input(self) -> bool:
        """Whether the template reads ``input`` / ``$json`` (the direct parent's value)."""
        return self._input

    def __repr__(self) -> str:
        return f"Template({self.source!r})"


def has_expression(text: str) -> bool:
    return "{{" in text


def _parse(text: str) -> Template:
    parts: list[str | Node] = []
    i = 0
    while (opened := text.find("{{", i)) >= 0:
        parts.append(text[i:opened])
        node, i = parse_expression(text, opened, _ARITY)
        parts.append(node)
    parts.append(text[i:])
    return Template(text, tuple(p for p in parts if p != ""))


# Parsed templates, remembered by their text. Bounded by size, not count: a parsed
# template takes ~35 bytes per character of its text, so the texts held (each at most
# 2,000 characters, 500,000 in all) keep this cache under ~20 MB whatever it is sent.
TEMPLATES: TextCache[Template] = TextCache(_parse, max_key_chars=2_000, max_total_chars=500_000,
                                           max_entries=4096)


def parse_template(text: str) -> Template:
    """Parse ``text``; raises ExpressionError naming the expression and column of the fault."""
    return TEMPLATES.get(text)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping | list | tuple):
        for v in value.values() if isinstance(value, Mapping) else value:
            yield from _strings(v)


def find_references(value: Any) -> set[str]:
    """Node names referenced via ``$('...')`` in any string under ``value``."""
    return {r for s in _strings(value) if has_expression(s) for r in parse_template(s).references()}


def check_syntax(value: Any, max_source_chars: int | None = None) -> None:
    """Raise ExpressionError for the first string under ``value`` that does not parse, or
    whose text is longer than ``max_source_chars``."""
    for s in _strings(value):
        if has_expression(s):
            if max_source_chars is not None and len(s) > max_source_chars:
                raise ExpressionError(
                    f"expression text is {len(s)} characters, above the limit of {max_source_chars} "
                    "(max_source_chars)")
            parse_template(s)


# --- evaluation ----------------------------------------------------------------------


@dataclass
class Scope:
    input: Any = None
    nodes: Mapping[str, Any] = field(default_factory=dict)
    run: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    limits: ExpressionLimits = DEFAULT_LIMITS
    # Shared by every evaluation in this scope (``dataclasses.replace`` keeps it): what they
    # build counts toward one ``max_total_chars``.
    spending: Spending = field(default_factory=Spending)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _member(obj: Any, key: Any) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key) if key is None or isinstance(key, str | int | float) else None
    if isinstance(obj, list | tuple | str):
        if isinstance(key, int) and not isinstance(key, bool):
            return obj[key] if -len(obj) <= key < len(obj) else None
        return len(obj) if key == "length" else None
    return None


_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "%": operator.mod,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


def _binary(op: str, a: Any, b: Any, budget: Budget | None = None) -> Any:
    if op in ("==", "!="):  # true is not 1: JSON keeps booleans apart from numbers
        return (isinstance(a, bool) == isinstance(b, bool) and a == b) == (op == "==")
    if op == "+" and (isinstance(a, str) or isinstance(b, str)):
        left, right = stringify(a), stringify(b)
        if budget is not None:
            budget.string(len(left) + len(right), "'+'")
        return left + right
    if op == "+" and isinstance(a, list) and isinstance(b, list):
        if budget is not None:
            budget.items(len(a) + len(b), "'+'")
        return a + b
    if op in COMPARISONS and isinstance(a, str) and isinstance(b, str):
        return _ARITH[op](a, b)
    if not (_is_number(a) and _is_number(b)):
        if op in COMPARISONS:
            raise EvaluationError(f"cannot compare {json_type(a)} {op} {json_type(b)}")
        raise EvaluationError(f"cannot apply {op!r} to {json_type(a)} and {json_type(b)}")
    if op in "/%" and b == 0:
        raise EvaluationError(f"division by zero ({stringify(a)} {op} 0)")
    if op == "/":  # exact integer division stays an integer, like JSON readers expect
        return a // b if isinstance(a, int) and isinstance(b, int) and a % b == 0 else a / b
    return _ARITH[op](a, b)


def _contained(a: Any, b: Any) -> bool:
    if isinstance(b, str) and isinstance(a, str):
        return a in b
    if isinstance(b, list | tuple):
        return any(_binary("==", a, x) for x in b)
    if isinstance(b, Mapping):
        return isinstance(a, str) and a in b
    raise EvaluationError(f"cannot test {json_type(a)} in {json_type(b)}")


def _call(name: str, args: list[Any], budget: Budget) -> Any:
    predicted = predicted_chars(name, args)
    if predicted is not None:
        budget.string(predicted, f"{name}()")
    try:
        result = FUNCTIONS[name][2](*args)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError):
        types = ", ".join(json_type(a) for a in args)
        raise EvaluationError(f"{name}() cannot take ({types})") from None
    if predicted is not None:  # replace(), join(): counted before they built
        return result
    if isinstance(result, str):
        budget.string(len(result), f"{name}()")
    elif isinstance(result, list):
        budget.items(len(result), f"{name}()")
    return result


def _variable(scope: Scope, name: str) -> Any:
    for key in ("$" + name, name):
        if key in scope.extra:
            return scope.extra[key]
    raise EvaluationError(f"unknown variable ${name}")


def _node_output(scope: Scope, name: str) -> Any:
    if name not in scope.nodes:
        raise EvaluationError(f"node {name!r} has no output (it did not run)")
    return scope.nodes[name]


def _eval(node: Node, scope: Scope, budget: Budget) -> Any:
    budget.step()
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "input":
        return scope.input
    if kind == "run":
        return dict(scope.run)
    if kind == "var":
        return _variable(scope, node[1])
    if kind == "node":
        return _node_output(scope, node[1])
    if kind == "item":
        return _member(_eval(node[1], scope, budget), _eval(node[2], scope, budget))
    if kind == "list":
        budget.items(len(node[1]), "a list literal")
        return [_eval(n, scope, budget) for n in node[1]]
    if kind == "call":
        return _call(node[1], [_eval(n, scope, budget) for n in node[2]], budget)
    if kind == "not":
        return not _eval(node[1], scope, budget)
    if kind == "in":
        return _contained(_eval(node[1], scope, budget), _eval(node[2], scope, budget))
    if kind == "cond":
        return _eval(node[1] if _eval(node[2], scope, budget) else node[3], scope, budget)
    if kind == "neg":
        value = _eval(node[1], scope, budget)
        if not _is_number(value):
            raise EvaluationError(f"cannot negate a {json_type(value)}")
        return -value
    op, left = node[1], _eval(node[2], scope, budget)
    if op in ("and", "or"):  # short-circuit; the deciding operand is the result, as in Python
        return _eval(node[3], scope, budget) if bool(left) == (op == "and") else left
    return _binary(op, left, _eval(node[3], scope, budget), budget)


def evaluate(template: Template, scope: Scope) -> Any:
    """The template's value: the JSON value if ``whole``, else the rendered string."""
    budget = Budget(scope.limits, scope.spending)
    try:
        values = [p if isinstance(p, str) else _eval(p, scope, budget) for p in template.parts]
        if template.whole:
            pairs = zip(values, template.parts, strict=True)
            value = next(v for v, p in pairs if not isinstance(p, str))
        else:
            texts = [stringify(v) for v in values]
            budget.string(sum(map(len, texts)), "the template")
            value = "".join(texts)
        budget.result(value)
        return value
    except ExpressionLimitError as exc:
        raise ExpressionLimitError(f"{exc.message} in expression {template.source[:200]!r}") from None
    except EvaluationError as exc:
        raise EvaluationError(f"{exc.message} in expression {template.source!r}") from None
    except (RecursionError, ValueError) as exc:  # a very deep tree; an int past str()'s limit
        raise EvaluationError(f"cannot evaluate {template.source[:200]!r}: {exc}") from None


def render(value: Any, scope: Scope) -> Any:
    """Evaluate every template under ``value`` (str/list/dict); other values are kept.

    Raises ExpressionError for a string that does not parse, EvaluationError at run time.
    """
    if isinstance(value, str):
        if not has_expression(value):
            return value
        check_source(value, scope.limits)
        return evaluate(parse_template(value), scope)
    if isinstance(value, Mapping):
        return {k: render(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, scope) for v in value]
    return value
