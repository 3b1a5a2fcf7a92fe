"""Structured Output: model JSON validated by a JSON Schema, retried with the error.

Each attempt is one model call whose prompt carries the schema (and, after the first,
the previous answer's parse or validation error). After ``max_attempts`` invalid answers
the node fails with a ``ValueError`` naming the violation.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import jsonschema

from nodes._ai.builder import parse_script, user_message
from nodes._ai.models import resolve_model
from nodes._ai.runner import complete_text
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext, NodeEvent

SYSTEM = ("Answer with a single JSON value that validates against this JSON Schema, and "
          "nothing else (no prose, no code fences):\n{schema}")


def _parse(text: str) -> Any:
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    return json.loads(body)


def _check(text: str, schema: dict[str, Any]) -> tuple[Any, str | None]:
    """(value, None) when valid, else (None, a description of what is wrong)."""
    try:
        value = _parse(text)
    except json.JSONDecodeError as exc:
        return None, f"the answer is not JSON ({exc.msg} at position {exc.pos})"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return None, f"schema violation at {where}: {exc.message}"
    return value, None


class StructuredOutputExecutor:
    node_type = "structured_output"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> AsyncIterator[NodeEvent | ExecutionResult]:
        schema = data.get("schema")
        if isinstance(schema, str):
            schema = json.loads(schema)
        if not isinstance(schema, dict):
            raise ParameterError("schema must be a JSON Schema object", node_id=ctx.node_id,
                                 node_name=ctx.node_name, parameter="schema")
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ParameterError(f"schema is not a valid JSON Schema: {exc.message}",
                                 node_id=ctx.node_id, node_name=ctx.node_name,
                                 parameter="schema") from None
        attempts = max(1, int(data.get("max_attempts") or 2))
        script = parse_script(data.get("script")) or []
        prompt = user_message(data, inputs)
        system = SYSTEM.format(schema=json.dumps(schema))
        problem: str | None = None
        for attempt in range(attempts):
            model = resolve_model(data.get("model"), settings=ctx.services.get("settings"),
                                  script=script[attempt:] or None)
            message = prompt if problem is None else (
                f"{prompt}\n\nYour previous answer was invalid: {problem}. Answer again.")
            text = ""
            async for item in complete_text(ctx, model, message, system=system,
                                            name=ctx.node_name):
                if isinstance(item, NodeEvent):
                    yield item
                else:
                    text = item[0]
            value, problem = _check(text, schema)
            if problem is None:
                yield ExecutionResult(outputs={"output": DataValue("data", {"data": value})})
                return
            yield ctx.event("progress", {"attempt": attempt + 1, "invalid": problem})
        raise ValueError(f"structured output from {ctx.node_name!r} still invalid after "
                         f"{attempts} attempts: {problem}")


executor = StructuredOutputExecutor()
