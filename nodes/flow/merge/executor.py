"""Merge: joins the values that arrived, in a stable order.

Branches come in on ``inputs`` (any number of flow edges) and/or on the numbered slots
``input_1``..``input_4``. The kernel fires Merge once every input that can still arrive has
arrived (inputs on dead branches never do), so only live values are joined.

Order: the numbered slots first, in slot order; then the ``inputs`` edges in the order
they appear in the graph's ``edges`` list (the kernel gathers a multiple port's values in
that order), whatever order the branches finished in.

``append``   one list: each arrived value, lists flattened one level.
``combine``  arrived objects deep-merged in order (later keys win; nested objects merge).
``by_input`` an object: ``{"input_1": v, ...}`` for the slots, and the source node's name
             for each ``inputs`` edge.
"""

from __future__ import annotations

import copy
from typing import Any

from nodes._shared.values import result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

SLOTS = ("input_1", "input_2", "input_3", "input_4")
MANY = "inputs"  # the multiple port: any number of edges


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class Merge:
    node_type = "merge"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        arrived = [(port, inputs[port].value) for port in SLOTS if port in inputs]
        if MANY in inputs:
            values = inputs[MANY].value if isinstance(inputs[MANY].value, list) else [inputs[MANY].value]
            names = ctx.input_sources.get(MANY) or []
            arrived += [(names[i] if i < len(names) else f"{MANY}[{i}]", v) for i, v in enumerate(values)]
        mode = data.get("mode") or "append"
        if mode == "append":
            merged: list[Any] = []
            for _, value in arrived:
                merged.extend(value if isinstance(value, list) else [value])
            return result({"output": merged})
        if mode == "combine":
            combined: dict[str, Any] = {}
            for port, value in arrived:
                if not isinstance(value, dict):
                    raise ValueError(
                        f"merge mode 'combine' needs objects; {port} carried {type(value).__name__}"
                    )
                combined = deep_merge(combined, value)
            return result({"output": combined})
        if mode == "by_input":
            return result({"output": dict(arrived)})
        raise ValueError(f"parameter 'mode' must be append, combine or by_input; got {mode!r}")


executor = Merge()
