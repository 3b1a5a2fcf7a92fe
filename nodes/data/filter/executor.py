"""Filter: a list splits into ``pass`` (condition true) and ``reject`` (condition false).

The input is a list or ``{"items": list}``. ``condition`` is evaluated per item with
``$item``/``input`` = the item and ``$index`` = its position. A side with no items gets
no value, so nodes after it are skipped as a dead branch.

``execute`` is synchronous: the kernel runs it in its bounded offload pool, off the event
loop, because items x condition steps is real CPU work (bounded in all by the node
execution's ``max_total_steps``, ``ORCH_EXPRESSION_MAX_TOTAL_STEPS``). When the node times
out, its ``timeout_s`` fires on the loop and the evaluation left in the thread stops at
its next step.
"""

from __future__ import annotations

from typing import Any

from nodes._shared.conditions import evaluate_condition, make_scope
from nodes._shared.values import input_value, result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


def items_of(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and isinstance(value.get("items"), list):
        return list(value["items"])
    raise ValueError(
        f'filter needs a list (or {{"items": [...]}}) on its input; got {type(value).__name__}'
    )


class Filter:
    node_type = "filter"

    def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        condition = data.get("condition")
        passed: list[Any] = []
        rejected: list[Any] = []
        for i, item in enumerate(items_of(input_value(inputs))):
            scope = make_scope(ctx, item, {"$item": item, "$index": i})
            keep = evaluate_condition(condition, scope, parameter="condition", where=f"item {i}")
            (passed if keep else rejected).append(item)
        ports: dict[str, Any] = {}
        if passed:
            ports["pass"] = passed
        if rejected:
            ports["reject"] = rejected
        return result(ports)


executor = Filter()
