"""Socket types: the typed, coloured side sockets and the coercion table between them.

``SOCKET_TYPES``: every socket type id -> :class:`SocketType` (label, hex colour, shape):
the seeds' set plus ``data`` (the generic JSON spine) and ``any`` (wildcard).

``can_connect(source, target)``: a wire is allowed between the same id, a pair in the
coercion table, or ``data``/``any`` on either end; anything else is refused (the
validator raises ``SocketTypeError``).

``coerce(value, source, target)``: performs the conversion the table promises. Into
``data``/``any`` a value passes untouched; out of them it is converted to ``target`` when
it can be (``"3"`` -> int ``3``), else CoercionError names both types and the value's
JSON type. ``coerce_parameter`` does the same for a declared ``ParameterType``.

The type set and the structural pairs whose coercion is the identity are data
(``socket_types.json``), so no code here names or branches on a particular socket id.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import CoercionError

__all__ = [
    "COERCIONS", "GENERIC_SOCKETS", "SOCKET_TYPES", "SocketType", "can_connect", "coerce",
    "coerce_parameter", "convert_to", "json_type", "socket_catalogue",
]


@dataclass(frozen=True)
class SocketType:
    id: str
    label: str
    color: str
    shape: str
    description: str = ""


_TABLE = json.loads(Path(__file__).with_name("socket_types.json").read_text())

SOCKET_TYPES: dict[str, SocketType] = {
    # Labels derive from ids so a type's name is written once, as its id.
    t["id"]: SocketType(t["id"], t["id"].capitalize(), t["color"], t["shape"], t["description"])
    for t in _TABLE["types"]
}

# Sockets that connect to and from every type (values converted at run time).
GENERIC_SOCKETS: frozenset[str] = frozenset({"data", "any"})


# --- value helpers ---------------------------------------------------------------------


def json_type(value: Any) -> str:
    """The JSON name of a value's type (``object``, ``array``, ...), else its Python name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


class _Refused(Exception):
    """Internal: a converter cannot handle this value (turned into a CoercionError)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _to_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if _is_number(value):
        return str(value)
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, ensure_ascii=False, default=str)
    raise _Refused


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise _Refused
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            number = _to_float(text)
            if number.is_integer():
                return int(number)
    raise _Refused


def _to_float(value: Any) -> float:
    if _is_number(value):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise _Refused from None
        if math.isfinite(number):
            return number
    raise _Refused


_TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
_FALSE_WORDS = frozenset({"false", "no", "off", "0", ""})


def _to_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if _is_number(value) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    raise _Refused


def _parse_json_text(value: str, kinds: tuple[type, ...]) -> Any:
    try:
        parsed = json.loads(value)
    except ValueError:
        raise _Refused from None
    if not isinstance(parsed, kinds):
        raise _Refused
    return parsed


def _to_json(value: Any) -> Any:
    if isinstance(value, dict | list):
        return value
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, str):
        return _parse_json_text(value, (dict, list))
    raise _Refused


def _to_array(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, str):
        parsed: list[Any] = _parse_json_text(value, (list,))
        return parsed
    raise _Refused


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and "role" in value and "content" in value


def _to_message(value: Any) -> dict[str, Any]:
    if _is_message(value):
        return dict(value)
    if isinstance(value, str):
        return {"role": "user", "content": value}
    raise _Refused


def _to_messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list | tuple) and all(_is_message(m) for m in value):
        return [dict(m) for m in value]
    return [_to_message(value)]


def _to_document(value: Any) -> dict[str, Any]:
    if isinstance(value, dict) and "text" in value:
        return {"metadata": {}, **value}
    if isinstance(value, str):
        return {"text": value, "metadata": {}}
    raise _Refused


def _to_vector(value: Any) -> list[float]:
    if isinstance(value, list | tuple) and all(_is_number(x) for x in value):
        return [float(x) for x in value]
    raise _Refused


def _to_binary(value: Any) -> Any:
    # A pointer: a BinaryRef (has .ref) or its JSON form {"ref": ...}.
    if isinstance(value, dict) and isinstance(value.get("ref"), str):
        return value
    if isinstance(getattr(value, "ref", None), str):
        return value
    raise _Refused


_COLOR = re.compile(r"^#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$")


def _to_color(value: Any) -> str:
    if isinstance(value, str) and _COLOR.match(value.strip()):
        return value.strip()
    raise _Refused


def _identity(value: Any) -> Any:
    return value


# Runtime conversion of a generic value into each target type. Types absent here
# (structural ones) take the value untouched: the kernel never looks inside them.
_CONVERT_TO: dict[str, Callable[[Any], Any]] = {
    "string": _to_string,
    "text": _to_string,
    "int": _to_int,
    "float": _to_float,
    "boolean": _to_boolean,
    "json": _to_json,
    "array": _to_array,
    "messages": _to_messages,
    "message": _to_message,
    "document": _to_document,
    "vector": _to_vector,
    "binary": _to_binary,
    "color": _to_color,
    "trigger": lambda _value: None,  # a signal carries no data
}


# --- the coercion table ----------------------------------------------------------------


def _scalar_to_string(value: Any) -> str:
    if isinstance(value, bool) or _is_number(value):
        return _to_string(value)
    raise _Refused


def _last_content(value: Any) -> Any:
    messages = _to_messages(value)
    if not messages:
        raise _Refused
    return _to_string(messages[-1]["content"])


def _content(value: Any) -> str:
    return _to_string(_to_message(value)["content"])


def _document_text(value: Any) -> str:
    return _to_string(_to_document(value)["text"])


# (source, target) -> conversion. Union of seed 000 "Coercion" and seed 001 "Type Coercion".
COERCIONS: dict[tuple[str, str], Callable[[Any], Any]] = {
    ("int", "float"): _to_float,
    ("int", "string"): _scalar_to_string,
    ("float", "string"): _scalar_to_string,
    ("boolean", "string"): _scalar_to_string,
    ("string", "text"): _to_string,
    ("text", "string"): _to_string,
    ("json", "string"): functools.partial(json.dumps, ensure_ascii=False, default=str),
    ("json", "text"): functools.partial(json.dumps, ensure_ascii=False, indent=2, default=str),
    ("string", "messages"): _to_messages,
    ("messages", "string"): _last_content,
    ("string", "message"): _to_message,
    ("message", "string"): _content,
    ("message", "text"): _content,
    ("document", "text"): _document_text,
    ("document", "json"): _to_document,
    # structural pass-through pairs (socket_types.json): the value is handed over as it is
    **{(source, target): _identity for source, target in _TABLE["identity_pairs"]},
}


def can_connect(source: str, target: str) -> bool:
    """Whether a ``source`` socket may wire into a ``target`` socket (see module docs)."""
    if source == target:
        return True
    if source in GENERIC_SOCKETS or target in GENERIC_SOCKETS:
        return True
    return (source, target) in COERCIONS


def coerce(value: Any, source: str, target: str) -> Any:
    """Convert ``value`` from socket type ``source`` to ``target``; raises CoercionError."""
    if source == target or target in GENERIC_SOCKETS:
        return value
    convert = COERCIONS.get((source, target))
    if convert is None and source in GENERIC_SOCKETS:
        convert = _CONVERT_TO.get(target, _identity)
    if convert is None:
        raise CoercionError(
            f"socket type {source!r} cannot connect to {target!r}: "
            "no coercion exists between them"
        )
    try:
        return convert(value)
    except (_Refused, TypeError, ValueError, KeyError, OverflowError):
        raise CoercionError(
            f"cannot coerce a value of socket type {source!r} to {target!r} "
            f"(got a JSON {json_type(value)})"
        ) from None


# ParameterType -> socket type whose runtime conversion applies. Parameter types not
# listed (enum, and the structural ones) receive the value untouched.
_PARAMETER_SOCKETS: dict[str, str] = {
    "string": "string",
    "text": "text",
    "code": "string",
    "expression": "string",
    "secret": "string",
    "int": "int",
    "float": "float",
    "boolean": "boolean",
    "json": "json",
    "array": "array",
    "messages": "messages",
}


def coerce_parameter(value: Any, param_type: str) -> Any:
    """Convert a wired value into a parameter declared with ``param_type``.

    Raises CoercionError naming the parameter type and the value's JSON type.
    A ``graph`` parameter must receive a JSON object.
    """
    if param_type == "graph":
        if isinstance(value, dict):
            return value
        raise CoercionError(
            f"cannot use a JSON {json_type(value)} as a parameter of type 'graph' "
            "(expected a JSON object)"
        )
    socket = _PARAMETER_SOCKETS.get(param_type)
    if socket is None:
        return value
    try:
        return _CONVERT_TO[socket](value)
    except (_Refused, TypeError, ValueError, OverflowError):
        raise CoercionError(
            f"cannot use a JSON {json_type(value)} as a parameter of type {param_type!r}"
        ) from None


def convert_to(value: Any, target: str) -> Any:
    """A generic value converted to socket type ``target`` by the table's rule (what a wire
    from ``data`` does); ValueError when the rule refuses it."""
    try:
        return _CONVERT_TO.get(target, _identity)(value)
    except (_Refused, TypeError, ValueError, KeyError, OverflowError):
        raise ValueError(f"a JSON {json_type(value)} does not convert to {target}") from None


def socket_catalogue() -> list[dict[str, str]]:
    """Every socket type as JSON for a palette: id, label, color, shape, description."""
    return [asdict(s) for s in SOCKET_TYPES.values()]
