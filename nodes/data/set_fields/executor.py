"""Set Fields: sets fields (dotted names create nested objects) and removes others.

``fields`` values arrive already resolved by the kernel (expressions evaluated against
the input). With ``keep_input`` the fields are set on a copy of the input object;
without it the output holds only the set fields. ``remove`` paths are deleted last.
"""

from __future__ import annotations

from typing import Any

from nodes._shared.paths import copy_json, delete_path, set_path
from nodes._shared.values import input_value, result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class SetFields:
    node_type = "set_fields"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        fields = data.get("fields") or {}
        remove = data.get("remove") or []
        if not isinstance(fields, dict):
            raise ValueError(
                "parameter 'fields' must be an object of name -> value; "
                f"got {type(fields).__name__}"
            )
        if not isinstance(remove, list) or not all(isinstance(p, str) for p in remove):
            raise ValueError("parameter 'remove' must be a list of dotted paths (strings)")
        value = input_value(inputs)
        keep = data.get("keep_input", True) is not False
        if keep and value is not None and not isinstance(value, dict):
            raise ValueError(
                "parameter 'keep_input' needs an object input to add fields to; "
                f"got {type(value).__name__}"
            )
        out: dict[str, Any] = copy_json(value) if keep and isinstance(value, dict) else {}
        for name, new in fields.items():
            try:
                set_path(out, str(name), new)
            except ValueError as exc:
                raise ValueError(f"parameter 'fields': {exc}") from exc
        for path in remove:
            try:
                delete_path(out, path)
            except ValueError as exc:
                raise ValueError(f"parameter 'remove': {exc}") from exc
        return result({"output": out})


executor = SetFields()
