"""The n8n-style comparison operations of the Conditional node (value OP compare_to).

``matches_regex`` matches through :mod:`nodes._shared.patterns` (time-bounded, GIL
released): callers run it off the event loop (see :data:`OFF_LOOP`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodes._shared.conditions import truthy
from nodes._shared.patterns import PatternClock


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _equals(a: Any, b: Any) -> bool:
    if a == b:
        return True
    na, nb = _number(a), _number(b)
    # "5" equals 5: values from forms and query strings arrive as text.
    return na is not None and nb is not None and na == nb


def _order(a: Any, b: Any, op: str) -> bool:
    na, nb = _number(a), _number(b)
    left: Any
    right: Any
    if na is not None and nb is not None:
        left, right = na, nb
    elif isinstance(a, str) and isinstance(b, str):
        left, right = a, b
    else:
        raise ValueError(
            f"operation {op!r} compares numbers or strings; got {type(a).__name__} "
            f"(parameter 'value') and {type(b).__name__} (parameter 'compare_to')"
        )
    if op == "gt":
        return bool(left > right)
    if op == "gte":
        return bool(left >= right)
    if op == "lt":
        return bool(left < right)
    return bool(left <= right)


def _contains(a: Any, b: Any) -> bool:
    if isinstance(a, str):
        return str(b) in a
    if isinstance(a, list):
        return any(_equals(item, b) for item in a)
    if isinstance(a, dict):
        return str(b) in a
    return False


def _is_empty(a: Any) -> bool:
    return a is None or (isinstance(a, (str, list, dict)) and len(a) == 0)


def _matches(a: Any, b: Any) -> bool:
    return PatternClock().search(str(b), "" if a is None else str(a), what="parameter 'compare_to'")


OPERATIONS: dict[str, Callable[[Any, Any], bool]] = {
    "equals": _equals,
    "not_equals": lambda a, b: not _equals(a, b),
    "gt": lambda a, b: _order(a, b, "gt"),
    "gte": lambda a, b: _order(a, b, "gte"),
    "lt": lambda a, b: _order(a, b, "lt"),
    "lte": lambda a, b: _order(a, b, "lte"),
    "contains": _contains,
    "not_contains": lambda a, b: not _contains(a, b),
    "starts_with": lambda a, b: str("" if a is None else a).startswith(str(b)),
    "ends_with": lambda a, b: str("" if a is None else a).endswith(str(b)),
    "matches_regex": _matches,
    "is_empty": lambda a, _b: _is_empty(a),
    "is_not_empty": lambda a, _b: not _is_empty(a),
    "exists": lambda a, _b: a is not None,
    "is_true": lambda a, _b: truthy(a),
    "is_false": lambda a, _b: not truthy(a),
}

# Operations whose cost depends on the graph's values (a pattern's backtracking): run them
# in a thread, not on the event loop.
OFF_LOOP = frozenset({"matches_regex"})


def compare(value: Any, operation: str, compare_to: Any) -> bool:
    """Apply ``operation``; an unknown one is a ValueError naming parameter 'operation'."""
    op = OPERATIONS.get(operation)
    if op is None:
        raise ValueError(
            f"parameter 'operation' must be one of {', '.join(OPERATIONS)}; got {operation!r}"
        )
    return op(value, compare_to)
