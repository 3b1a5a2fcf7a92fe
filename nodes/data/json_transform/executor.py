"""JSON Transform: the input reshaped by a JSONata expression (package jsonata-python).

Errors (syntax or evaluation) become ValueError naming the expression, the JSONata error
code and the character position. A runaway expression stops after ``TIMEOUT_MS`` or
``MAX_DEPTH`` nested evaluations; and since one JSONata step can build gigabytes
(``$pad``, ``$join``, ranges) before that check, evaluation happens in a child process
limited to ``ORCH_TRANSFORM_MEMORY_MB`` and killed ``GRACE_S`` past the timeout
(``orchestrator/host/evaluator.py``), never in the worker.
"""

from __future__ import annotations

from typing import Any

from nodes._shared.values import input_value, result
from orchestrator.host.node_host import node_host
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

TIMEOUT_MS = 5000
MAX_DEPTH = 500


class JsonTransform:
    node_type = "json_transform"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        expression = data.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            raise ValueError("parameter 'expression' must be a non-empty JSONata expression")
        value = await node_host(ctx).evaluate_jsonata(expression, input_value(inputs), timeout_ms=TIMEOUT_MS,
                                                      max_depth=MAX_DEPTH)
        return result({"output": value})


executor = JsonTransform()
