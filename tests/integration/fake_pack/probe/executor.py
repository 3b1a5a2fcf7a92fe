"""A test node: sleeps, then outputs {value, input, pid, start, end}."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class Probe:
    node_type = "probe"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        start = time.time()
        delay_s = float(data.get("delay_s") or 0)
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        received = inputs.get("input")
        record = {"value": data.get("value"), "input": received.value if received else None,
                  "pid": os.getpid(), "start": start, "end": time.time()}
        return ExecutionResult(outputs={"output": DataValue("data", record)})


executor = Probe()
