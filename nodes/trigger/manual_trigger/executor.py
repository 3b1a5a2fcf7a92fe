"""Manual Trigger: the run input (or ``{}``) goes out on ``output``."""

from __future__ import annotations

from typing import Any

from nodes._shared.values import result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class ManualTrigger:
    node_type = "manual_trigger"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        return result({"output": {} if ctx.run_input is None else ctx.run_input})


executor = ManualTrigger()
