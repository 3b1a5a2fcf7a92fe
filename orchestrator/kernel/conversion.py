"""Explicit conversion (the Type Converter node): the socket table's rule for each target
(``sockets.convert_to``, the one rule a wire applies too), widened only where a graph asks
for a conversion explicitly and may accept what a wire must refuse:

=========  ==================================  =======================================
target     the table's rule (a wire's too)     widened, explicit only
=========  ==================================  =======================================
string     text as is, null -> "", numbers     (none)
           and booleans spelled as JSON,
           objects/lists as compact JSON
text       like string                         objects/lists as indented JSON
int        integers, whole floats, numeric     booleans (true -> 1)
           strings ("42", "4.0")
float      finite numbers, numeric strings     booleans; "nan", "inf"
boolean    booleans, 0/1, true/false/yes/no/   any number (non-zero -> true), "y"/"n"
           on/off/1/0 words
json       objects, lists, JSON text of one    any other value unchanged; JSON text of
                                               a scalar ("5" -> 5)
array      lists, JSON text of a list          null -> []; anything else wrapped
=========  ==================================  =======================================

Where the table converts, the explicit conversion gives the same value; a value neither
converts is a ValueError.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .sockets import convert_to

TARGETS = ("string", "text", "int", "float", "boolean", "json", "array")
_TRUE, _FALSE = frozenset({"y"}), frozenset({"n"})


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    raise ValueError


def _float(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return float(value.strip())
    raise ValueError


def _boolean(value: Any) -> bool:
    if _number(value):
        return bool(value != 0)
    word = value.strip().lower() if isinstance(value, str) else None
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _array(value: Any) -> list[Any]:
    return [] if value is None else [value]


_WIDENED: dict[str, Callable[[Any], Any]] = {
    "int": _int, "float": _float, "boolean": _boolean, "json": _json, "array": _array,
}


def convert(value: Any, target: str) -> Any:
    """``value`` converted to ``target`` (one of :data:`TARGETS`) as the table above says;
    ValueError when it does not convert."""
    if target not in TARGETS:
        raise ValueError(f"no explicit conversion to {target!r}; one of {', '.join(TARGETS)}")
    if target == "text" and isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, indent=2)
    try:
        return convert_to(value, target)
    except ValueError:
        widen = _WIDENED.get(target)
        if widen is None:
            raise
    return widen(value)
