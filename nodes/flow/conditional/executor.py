"""Conditional: the input goes out on ``true`` or ``false``, never both.

Two forms, exactly one set: ``condition`` (a boolean, usually an expression the kernel
has already evaluated) or ``value`` + ``operation`` + ``compare_to``.

Deciding is cheap except ``matches_regex``: that one runs in a thread (the pattern has a
time budget, ``ORCH_PATTERN_TIMEOUT_S``), so a slow pattern neither stalls the event loop
nor outlives the node's ``timeout_s`` there.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nodes._shared.conditions import truthy
from nodes._shared.operations import OFF_LOOP, compare
from nodes._shared.values import input_value, result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


def decide(data: dict[str, Any]) -> bool:
    condition = data.get("condition")
    operation = data.get("operation")
    has_condition = condition is not None and condition != ""
    has_operation = operation is not None and operation != ""
    if has_condition and has_operation:
        raise ValueError("set either parameter 'condition' or 'operation' (with 'value'), not both")
    if not has_condition and not has_operation:
        raise ValueError("set parameter 'condition', or 'value' + 'operation' + 'compare_to'")
    if has_condition:
        return truthy(condition)
    return compare(data.get("value"), str(operation), data.get("compare_to"))


class Conditional:
    node_type = "conditional"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        if data.get("operation") in OFF_LOOP:
            port = "true" if await asyncio.to_thread(decide, data) else "false"
        else:
            port = "true" if decide(data) else "false"
        return result({port: input_value(inputs)})


executor = Conditional()
