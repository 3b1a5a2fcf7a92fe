"""An I/O-bound test node: awaits ``delay_s`` and reports how late the loop woke it."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class Late:
    node_type = "late"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        delay_s = float(data.get("delay_s") or 0)
        began = time.monotonic()
        await asyncio.sleep(delay_s)
        lateness_s = time.monotonic() - began - delay_s
        return ExecutionResult(outputs={"output": DataValue(
            "data", {"lateness_s": lateness_s, "pid": os.getpid(), "start": time.time() - delay_s})})


executor = Late()
