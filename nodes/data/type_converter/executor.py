"""Type Converter: converts the input, or the value at ``field``, to ``to`` explicitly.

The conversion is the kernel's (``orchestrator/kernel/conversion.py``): the socket
table's rule for each target, the one a wire applies too (``kernel/sockets.py``), widened
where an explicit ask may accept what a wire refuses (booleans to numbers, any number to
boolean, null to []). A value that does not convert is a ValueError naming the value and
the target type.
"""

from __future__ import annotations

import json
from typing import Any

from nodes._shared.paths import copy_json, get_path, has_path, set_path
from nodes._shared.values import input_value, result
from orchestrator.kernel.conversion import TARGETS
from orchestrator.kernel.conversion import convert as explicit
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


def convert(value: Any, to: str) -> Any:
    if to not in TARGETS:
        raise ValueError(f"parameter 'to' must be one of {', '.join(TARGETS)}; got {to!r}")
    try:
        return explicit(value, to)
    except (ValueError, TypeError, OverflowError):
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
