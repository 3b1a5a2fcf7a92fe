"""Webhook Trigger: the HTTP request the API received goes out on ``output``.

The API matches ``path`` and ``method`` and starts the run with run input
``{"body", "headers", "query", "method", "path"}``; ``response_mode`` and
``wait_timeout_s`` tell the API whether to answer at once or wait for the run's output.
The executor checks the parameters so a bad combination fails loudly in a manual run.
"""

from __future__ import annotations

from typing import Any

from nodes._shared.values import result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


class WebhookTrigger:
    node_type = "webhook_trigger"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        return self.at_start(data, ctx.run_input, ctx.session_id)

    def at_start(self, data: dict[str, Any], run_input: Any, session_id: str | None) -> ExecutionResult:
        """The run's start computes it (no step); a bad parameter raises, and the step then
        reports it as the node's error."""
        path = data.get("path")
        if not isinstance(path, str) or not path.strip("/"):
            raise ValueError("parameter 'path' must be a non-empty URL path such as 'orders/new'")
        method = str(data.get("method") or "POST").upper()
        if method not in METHODS:
            raise ValueError(
                f"parameter 'method' must be one of {', '.join(METHODS)}; got {method!r}"
            )
        payload = run_input
        if payload is None:
            # A manual run of a webhook graph: an empty request of the declared shape.
            payload = {"body": None, "headers": {}, "query": {}, "method": method, "path": path}
        return result({"output": payload})


executor = WebhookTrigger()
