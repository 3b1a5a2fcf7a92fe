"""Prompt Template: ``template`` rendered against the input -> ``{"prompt": text}``.

One syntax, the kernel's ``{{ }}`` expressions: ``{{ input.x }}`` (or ``$json.x``) is the
input, ``{{ $vars.x }}`` a key of the ``variables`` object, ``{{ $run.input }}`` the run
input. Objects and lists embedded in text render as JSON.

``execute`` is synchronous, so the kernel renders off the event loop (a template may take
up to the expression budgets' steps).
"""

from __future__ import annotations

import json
from typing import Any

from nodes._shared.conditions import make_scope, render_text
from nodes._shared.values import input_value, result
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext


class PromptTemplate:
    node_type = "prompt_template"

    def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        template = data.get("template")
        if not isinstance(template, str):
            raise ValueError("parameter 'template' must be text")
        variables = data.get("variables") or {}
        if not isinstance(variables, dict):
            raise ValueError(
                f"parameter 'variables' must be an object; got {type(variables).__name__}"
            )
        scope = make_scope(ctx, input_value(inputs), {"$vars": variables})
        rendered = render_text(template, scope, parameter="template")
        text = rendered if isinstance(rendered, str) else _json_text(rendered)
        return result({"output": {"prompt": text}})


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


executor = PromptTemplate()
