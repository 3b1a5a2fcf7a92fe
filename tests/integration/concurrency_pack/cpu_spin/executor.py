"""A CPU-bound test node with a synchronous ``execute``: the kernel must run it off the loop."""

from __future__ import annotations

import time
from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class CpuSpin:
    node_type = "cpu_spin"

    def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                ctx: FlowContext) -> ExecutionResult:
        until = time.monotonic() + float(data.get("spin_s") or 0)
        count = 0
        while time.monotonic() < until:
            count += sum(i * i for i in range(200))
        received = inputs.get("input")
        return ExecutionResult(outputs={"output": DataValue("data", received.value if received else count)})


executor = CpuSpin()
