"""Inline parameter values: the type checks a value typed into a node gets before a run.

``check_inline_value(param, value)`` returns a sentence describing what is wrong (the
caller adds where), or None. Values holding ``{{ }}`` expressions are checked only for
syntax by the validator: their type is known at run time, when ``sockets`` coerces them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .definition import Parameter
from .expressions import has_expression


def contains_expression(value: Any) -> bool:
    """True when a string anywhere in ``value`` (walking lists and dicts) has ``{{ }}``."""
    if isinstance(value, str):
        return has_expression(value)
    if isinstance(value, list):
        return any(contains_expression(v) for v in value)
    if isinstance(value, dict):
        return any(contains_expression(v) for v in value.values())
    return False


def is_json(value: Any) -> bool:
    """True for the values JSON can carry (dict keys must be strings)."""
    if value is None or isinstance(value, str | bool | int | float):
        return True
    if isinstance(value, list):
        return all(is_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_json(v) for k, v in value.items())
    return False


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer()
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# Parameter type -> (accepts the value?, what it expects). Types not listed take any JSON.
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "text": (lambda v: isinstance(v, str), "a string"),
    "code": (lambda v: isinstance(v, str), "a string"),
    "expression": (lambda v: isinstance(v, str), "a string"),
    "secret": (lambda v: isinstance(v, str), "a string"),
    "int": (_is_int, "an integer"),
    "float": (_is_number, "a number"),
    "boolean": (lambda v: isinstance(v, bool), "true or false"),
    "array": (lambda v: isinstance(v, list), "a list"),
}


def check_inline_value(param: Parameter, value: Any) -> str | None:
    """What is wrong with ``value`` for ``param`` (type, enum, min/max, JSON), or None."""
    if not is_json(value):
        return f"value of type {type(value).__name__} is not JSON"
    check = _CHECKS.get(param.type)
    if check is not None and not check[0](value):
        return f"expected {check[1]} for a {param.type} parameter, got {value!r}"
    if param.type == "enum" and param.values is not None and value not in param.values:
        allowed = ", ".join(repr(v) for v in param.values)
        return f"{value!r} is not one of {allowed}"
    if _is_number(value) and param.type in ("int", "float"):
        if param.min is not None and value < param.min:
            return f"{value!r} is below the minimum {param.min:g}"
        if param.max is not None and value > param.max:
            return f"{value!r} is above the maximum {param.max:g}"
    return None
