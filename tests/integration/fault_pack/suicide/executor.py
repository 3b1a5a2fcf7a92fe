"""A poison node: the worker process running it dies, every time."""

from __future__ import annotations

import os
import signal
from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class Suicide:
    node_type = "suicide"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> ExecutionResult:
        os.kill(os.getpid(), signal.SIGKILL)
        return ExecutionResult()  # not reached


executor = Suicide()
