"""A test node that always fails."""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class Boom:
    node_type = "boom"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        raise ValueError("boom: " + str(data.get("message")))


executor = Boom()
