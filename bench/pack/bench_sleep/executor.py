"""A bench node: ``await asyncio.sleep(delay_s)``, the shape of a node waiting on a model."""

from __future__ import annotations

import asyncio
from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class BenchSleep:
    node_type = "bench_sleep"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        await asyncio.sleep(float(data.get("delay_s") or 0))
        received = inputs.get("input")
        return ExecutionResult(outputs={"output": DataValue("data", received.value if received else None)})


executor = BenchSleep()
