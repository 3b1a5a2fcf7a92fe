"""Type Converter: converts the input, or the value at ``field``, to ``to`` explicitly.

string  text as is; numbers/booleans in JSON spelling; objects/lists as compact JSON
text    like string, but objects/lists as indented JSON
int     integers, whole floats, numeric strings ("42", "4.0"); not 3.5
float   numbers and numeric strings ("3.5")
boolean true/false, "true"/"false"/"yes"/"no"/"on"/"off"/"1"/"0", numbers (non-zero)
json    a JSON string parsed; other values unchanged
array   a list unchanged; a JSON array string parsed; null -> []; anything else wrapped

A value that does not convert is a ValueError naming the value and the target type.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from nodes._shared.paths import copy_json, get_path, has_path, set_path
from nodes._shared.values import input_value, result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

_TRUE = frozenset({"true", "yes", "on", "1", "y"})
_FALSE = frozenset({"false", "no", "off", "0", "n", ""})


class _Unconvertible(Exception):
    pass


def _to_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _to_text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, indent=2)
    return _to_string(value)


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise _Unconvertible from None
    raise _Unconvertible


def _to_int(value: Any) -> int:
    if isinstance(value, int):  # bool included: True -> 1
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    number = _to_float(value)
    if not math.isfinite(number) or not number.is_integer():
        raise _Unconvertible
    return int(number)


def _to_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise _Unconvertible


def _to_json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise _Unconvertible from None


def _to_array(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if value is None:
        return []
    if isinstance(value, str) and value.lstrip().startswith("["):
        parsed = _to_json(value)
        if isinstance(parsed, list):
            return parsed
    return [value]


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "string": _to_string,
    "text": _to_text,
    "int": _to_int,
    "float": _to_float,
    "boolean": _to_boolean,
    "json": _to_json,
    "array": _to_array,
}


def convert(value: Any, to: str) -> Any:
    converter = CONVERTERS.get(to)
    if converter is None:
        raise ValueError(f"parameter 'to' must be one of {', '.join(CONVERTERS)}; got {to!r}")
    try:
        return converter(value)
    except _Unconvertible:
        shown = json.dumps(value)[:200] if not isinstance(value, str) else repr(value[:200])
        raise ValueError(f"cannot convert {shown} to {to}") from None


class TypeConverter:
    node_type = "type_converter"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        to = str(data.get("to") or "string")
        field = data.get("field")
        value = input_value(inputs)
        if not field:
            return result({"output": convert(value, to)})
        if not isinstance(value, dict) or not has_path(value, str(field)):
            raise ValueError(f"parameter 'field': nothing at {field!r} in the input")
        out = copy_json(value)
        try:
            set_path(out, str(field), convert(get_path(value, str(field)), to))
        except ValueError as exc:
            raise ValueError(f"{exc} (field {field!r})") from exc
        return result({"output": out})


executor = TypeConverter()
