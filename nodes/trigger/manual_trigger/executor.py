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
        return self.at_start(data, ctx.run_input, ctx.session_id)

    def at_start(self, data: dict[str, Any], run_input: Any, session_id: str | None) -> ExecutionResult:
        """The run's start computes it (no step): it depends on the run input alone."""
        return result({"output": {} if run_input is None else run_input})


executor = ManualTrigger()
