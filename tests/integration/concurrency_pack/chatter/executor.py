"""A test node that streams ``count`` progress events back to back, as a fast model does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext, NodeEvent


class Chatter:
    node_type = "chatter"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue],
                      ctx: FlowContext) -> AsyncIterator[NodeEvent | ExecutionResult]:
        count = int(data.get("count") or 0)
        for i in range(count):
            yield ctx.event("progress", {"i": i})
        yield ExecutionResult(outputs={"output": DataValue("data", {"count": count})})


executor = Chatter()
