"""JSON Transform: the input reshaped by a JSONata expression (package jsonata-python).

Errors (syntax or evaluation) become ValueError naming the expression, the JSONata error
code and the character position. A runaway expression stops after ``TIMEOUT_MS`` or
``MAX_DEPTH`` nested evaluations.
"""

from __future__ import annotations

import asyncio
from typing import Any

import jsonata

from nodes._shared.values import input_value, result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

TIMEOUT_MS = 5000
MAX_DEPTH = 500


def transform(expression: str, value: Any) -> Any:
    """Evaluate ``expression`` against ``value``; a JSONata error is a ValueError."""
    try:
        compiled = jsonata.Jsonata(expression, timeout=TIMEOUT_MS, stack=MAX_DEPTH)
        return compiled.evaluate(value)
    except jsonata.JException as exc:
        where = f" at position {exc.location}" if exc.location and exc.location > 0 else ""
        raise ValueError(
            f"parameter 'expression': JSONata error {exc.error}{where}: {exc} "
            f"(expression {expression!r})"
        ) from exc
    except (RecursionError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise ValueError(
            f"parameter 'expression': JSONata evaluation failed: {exc} (expression {expression!r})"
        ) from exc


class JsonTransform:
    node_type = "json_transform"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        expression = data.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            raise ValueError("parameter 'expression' must be a non-empty JSONata expression")
        # JSONata is CPU work: off the event loop the worker shares with other nodes
        return result({"output": await asyncio.to_thread(transform, expression, input_value(inputs))})


executor = JsonTransform()
