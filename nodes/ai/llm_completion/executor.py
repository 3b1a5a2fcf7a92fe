"""LLM Completion: one model call without tools or history; tokens stream as progress."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext, NodeEvent


class LlmCompletionExecutor:
    node_type = "llm_completion"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> AsyncIterator[NodeEvent | ExecutionResult]:
        # Agno loads with these, at the first execution, not at node discovery (nodes/_ai).
        from nodes._ai.builder import parse_script, user_message
        from nodes._ai.models import resolve_model
        from nodes._ai.runner import complete_text

        temperature = data.get("temperature")
        model = await resolve_model(data.get("model"), ctx, script=parse_script(data.get("script")),
                                    temperature=float(temperature) if temperature is not None else None)
        text, tokens = "", 0
        async for item in complete_text(ctx, model, user_message(data, inputs),
                                        system=data.get("system") or None, name=ctx.node_name):
            if isinstance(item, NodeEvent):
                yield item
            else:
                text, tokens = item
        yield ExecutionResult(outputs={"output": DataValue("data", {
            "text": text, "usage": {"total_tokens": tokens, "by_model": ctx.usage.to_json()}})})


executor = LlmCompletionExecutor()
