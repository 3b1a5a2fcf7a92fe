"""Loop Input: the start of a Loop body; the current item (the body's run input) goes out."""

from __future__ import annotations

from typing import Any

from nodes._shared.values import result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class LoopInput:
    node_type = "loop_input"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        # None is a legitimate item (a list may hold nulls), so it is passed through as is.
        return result({"output": ctx.run_input})


executor = LoopInput()
