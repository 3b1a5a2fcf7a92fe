"""Chat Start: ``{"message": ..., "session_id": ...}`` from a chat turn's run input.

The run input is ``{"message": str, ...}``; extra keys (attachments, user metadata) are
passed through. A bare string run input is taken as the message.
"""

from __future__ import annotations

from typing import Any

from nodes._shared.values import result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class ChatStart:
    node_type = "chat_start"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        return self.at_start(data, ctx.run_input, ctx.session_id)

    def at_start(self, data: dict[str, Any], run_input: Any, session_id: str | None) -> ExecutionResult:
        """The run's start computes it (no step); a run input without a message raises, and
        the step then reports it as the node's error."""
        payload = run_input
        if isinstance(payload, str):
            payload = {"message": payload}
        if not isinstance(payload, dict) or not isinstance(payload.get("message"), str):
            raise ValueError(
                'chat_start needs a run input {"message": <text>}; got '
                f"{type(payload).__name__}"
            )
        out = dict(payload)
        out["session_id"] = session_id
        return result({"output": out})


executor = ChatStart()
