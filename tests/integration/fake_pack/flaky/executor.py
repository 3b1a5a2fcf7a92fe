"""A test node that fails its first ``fail_times`` attempts."""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class Flaky:
    node_type = "flaky"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        if ctx.attempt <= int(data.get("fail_times") or 0):
            raise ConnectionError(f"flaky: attempt {ctx.attempt} fails")
        received = inputs.get("input")
        value = {"input": received.value if received else None, "attempt": ctx.attempt}
        return ExecutionResult(outputs={"output": DataValue("data", value)})


executor = Flaky()
