"""How deep a JSON-like value nests: one measure for output values and graph documents."""

from __future__ import annotations

from typing import Any

_NESTS = (dict, list, tuple)  # a tuple of types: faster to check than a union, per value


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists/tuples/dicts more than ``limit`` levels (a scalar is
    0 levels, ``[]`` one); iterative, so any depth is safe to measure."""
    if not isinstance(value, _NESTS):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, _NESTS))
    return False
