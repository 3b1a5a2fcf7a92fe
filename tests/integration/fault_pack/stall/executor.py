"""A test node a test can find and kill: it announces its process id, then sleeps."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class Stall:
    node_type = "stall"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        if data.get("pid_dir"):
            (Path(data["pid_dir"]) / f"{ctx.node_id}.{os.getpid()}").touch()
        await asyncio.sleep(float(data.get("delay_s") or 0))
        received = inputs.get("input")
        return ExecutionResult(outputs={"output": DataValue(
            "data", {"value": data.get("value"), "input": received.value if received else None})})


executor = Stall()
