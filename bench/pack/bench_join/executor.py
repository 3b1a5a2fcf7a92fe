"""A bench node: the merge of a fan-out (a multiple input), outputs the branch count."""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class BenchJoin:
    node_type = "bench_join"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        received = inputs.get("input")
        return ExecutionResult(outputs={"output": DataValue("data", len(received.value) if received else 0)})


executor = BenchJoin()
