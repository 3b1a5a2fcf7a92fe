"""Switch: the input goes to the first matching case (``mode`` first) or to every
matching case (``mode`` all); with no match it goes to ``default``.

``cases`` is a list of ``{"id": ..., "when": "<condition>"}`` (raw strings: the node
evaluates each with input = the input value). Case ``i`` goes out on port ``case_<i>``;
the definition declares ``case_0``..``case_7``, so at most eight cases.

``execute`` is synchronous, so the kernel runs it off the event loop: eight conditions
may each take up to the expression step budget.
"""

from __future__ import annotations

import json
from typing import Any

from nodes._shared.conditions import evaluate_condition, make_scope
from nodes._shared.values import input_value, result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

MAX_CASES = 8


def parse_cases(raw: Any) -> list[dict[str, Any]]:
    """Check the shape of ``cases``; errors name the parameter and the case."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"parameter 'cases' is not valid JSON: {exc}") from exc
    if not isinstance(raw, list) or not raw:
        raise ValueError("parameter 'cases' must be a non-empty list of {\"id\", \"when\"} objects")
    if len(raw) > MAX_CASES:
        raise ValueError(
            f"parameter 'cases' has {len(raw)} cases; a Switch routes at most {MAX_CASES}"
        )
    for i, case in enumerate(raw):
        if not isinstance(case, dict) or "when" not in case:
            raise ValueError(f"parameter 'cases': case {i} needs a 'when' condition")
    return raw


class Switch:
    node_type = "switch"

    def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        cases = parse_cases(data.get("cases"))
        mode = data.get("mode") or "first"
        if mode not in ("first", "all"):
            raise ValueError(f"parameter 'mode' must be 'first' or 'all'; got {mode!r}")
        value = input_value(inputs)
        scope = make_scope(ctx, value)
        ports: dict[str, Any] = {}
        for i, case in enumerate(cases):
            where = f"case {i} ({case.get('id', '')!s})"
            if evaluate_condition(case["when"], scope, parameter="cases", where=where):
                ports[f"case_{i}"] = value
                if mode == "first":
                    break
        if not ports:
            ports["default"] = value
        return result(ports)


executor = Switch()
