"""Code: runs a Python function body ``def main(input, items):`` in a sandboxed subprocess.

``items`` is the input when it is a list, else ``[input]``. The return value (JSON) goes
out on ``output``; what the code printed comes back as a ``progress`` event
``{"logs": ...}`` (also emitted when the code fails). Errors are RuntimeErrors: the
user's traceback last line, "timed out after Xs", or the memory limit. The sandbox and
its limits are described in SANDBOX.md beside this file.
"""

from __future__ import annotations

from typing import Any

from nodes._shared.values import input_value, result
from orchestrator.host.node_host import node_host
from orchestrator.host.sandbox.python import SandboxError
from orchestrator.kernel.protocol import DataValue, EventType, ExecutionResult, FlowContext

MAX_TIMEOUT_S = 60.0
MIN_MEMORY_MB = 32
MAX_MEMORY_MB = 4096  # as definition.json declares; the kernel enforces it too, after expressions


def _limits(data: dict[str, Any]) -> tuple[float, int]:
    try:
        raw_timeout = data.get("timeout_s")
        raw_memory = data.get("memory_mb")
        timeout_s = 5.0 if raw_timeout is None else float(raw_timeout)
        memory_mb = 256 if raw_memory is None else int(raw_memory)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"parameters 'timeout_s' and 'memory_mb' must be numbers: {exc}") from exc
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(
            f"parameter 'timeout_s' must be in (0, {MAX_TIMEOUT_S:g}]; got {timeout_s:g}"
        )
    if not MIN_MEMORY_MB <= memory_mb <= MAX_MEMORY_MB:
        raise ValueError(
            f"parameter 'memory_mb' must be between {MIN_MEMORY_MB} and {MAX_MEMORY_MB}; got {memory_mb}")
    return timeout_s, memory_mb


class Code:
    node_type = "code"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        code = data.get("code")
        if not isinstance(code, str):
            raise ValueError("parameter 'code' must be Python source text")
        timeout_s, memory_mb = _limits(data)
        try:
            ran = await node_host(ctx).run_python(code, input_value(inputs), timeout_s=timeout_s,
                                                  memory_mb=memory_mb)
        except SandboxError as exc:
            if exc.logs:
                await ctx.emit(EventType.PROGRESS, {"logs": exc.logs})
            raise
        events = [ctx.event(EventType.PROGRESS, {"logs": ran.logs})] if ran.logs else []
        return result({"output": ran.value}, events)


executor = Code()
