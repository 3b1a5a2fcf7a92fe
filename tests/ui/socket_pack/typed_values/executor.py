"""A test node: outputs ``limit`` as an int and ``{"limit": limit}`` as json."""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class TypedValues:
    node_type = "typed_values"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        limit = int(data.get("limit") or 0)
        return ExecutionResult(outputs={"count": DataValue("int", limit),
                                        "record": DataValue("json", {"limit": limit})})


executor = TypedValues()
