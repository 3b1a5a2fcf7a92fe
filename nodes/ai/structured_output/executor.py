"""Structured Output: model JSON validated by a JSON Schema, retried with the error.

Each attempt is one model call whose prompt carries the schema (and, after the first,
the previous answer's parse or validation error). After ``max_attempts`` invalid answers
the node fails with a ``ValueError`` naming the violation.

References resolve inside the schema only (``#/$defs/...``, an ``$id`` it embeds, the
JSON Schema meta-schemas): the validator's registry has no retrieval, so a ``$ref`` to a
URL is never fetched (jsonschema's default would GET it with urllib, outside the egress
policy). Every ``$ref`` is looked up before the model is called; one that does not
resolve is a ``ParameterError`` naming ``schema``.

Validation runs in a thread (an answer can be large, a schema costly), and the schema's
regular expressions match within one time budget per node execution
(``nodes/_shared/json_schemas.py``; ``ORCH_PATTERN_TIMEOUT_S``).

jsonschema, like Agno, is imported when the node runs, not at node discovery.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from nodes._shared.patterns import PatternClock
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext, NodeEvent

if TYPE_CHECKING:
    import referencing.exceptions
    from jsonschema.protocols import Validator

SYSTEM = ("Answer with a single JSON value that validates against this JSON Schema, and "
          "nothing else (no prose, no code fences):\n{schema}")


def _parse(text: str) -> Any:
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    return json.loads(body)


REF_KEYWORDS = ("$ref", "$dynamicRef")
DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})  # values, not subschemas


def _refs(schema: Any) -> list[str]:
    """Every reference in ``schema`` (values of data keywords are not schemas)."""
    if isinstance(schema, list):
        return [ref for item in schema for ref in _refs(item)]
    if not isinstance(schema, dict):
        return []
    found = [v for k, v in schema.items() if k in REF_KEYWORDS and isinstance(v, str)]
    return found + [ref for k, v in schema.items() if k not in DATA_KEYWORDS for ref in _refs(v)]


def _unresolvable(exc: referencing.exceptions.Unresolvable) -> ParameterError:
    return ParameterError(f"parameter 'schema': $ref {exc.ref!r} does not resolve inside the schema; only "
                          "references within it ('#/$defs/...') are used, nothing is fetched",
                          parameter="schema")


def validator(schema: dict[str, Any], clock: PatternClock) -> Validator:
    """A validator for ``schema`` whose references never leave it (see the module
    docstring) and whose patterns match on ``clock``; a ParameterError names a reference
    that does not resolve."""
    import referencing.exceptions
    from jsonschema_specifications import REGISTRY as SPECIFICATIONS
    from referencing import Registry
    from referencing.jsonschema import DRAFT202012

    from nodes._shared.json_schemas import bounded_validator

    root = str(schema.get("$id") or "")
    registry = SPECIFICATIONS.with_resource(root, DRAFT202012.create_resource(schema)).crawl()
    resolver = registry.resolver(base_uri=root)
    for ref in _refs(schema):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable as exc:
            raise _unresolvable(exc) from None
    return bounded_validator(schema, clock, registry=Registry())


def _check(text: str, checker: Validator) -> tuple[Any, str | None]:
    """(value, None) when valid, else (None, a description of what is wrong)."""
    import jsonschema
    import referencing.exceptions

    try:
        value = _parse(text)
    except json.JSONDecodeError as exc:
        return None, f"the answer is not JSON ({exc.msg} at position {exc.pos})"
    try:
        error = jsonschema.exceptions.best_match(checker.iter_errors(value))
    except referencing.exceptions.Unresolvable as exc:  # a reference under a nested $id
        raise _unresolvable(exc) from None
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return None, f"schema violation at {where}: {error.message}"
    return value, None


class StructuredOutputExecutor:
    node_type = "structured_output"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> AsyncIterator[NodeEvent | ExecutionResult]:
        # Agno and jsonschema load here, at the first execution, not at node discovery.
        import jsonschema

        from nodes._ai.builder import parse_script, user_message
        from nodes._ai.models import resolve_model
        from nodes._ai.runner import complete_text
        from nodes._shared.json_schemas import check_patterns

        schema = data.get("schema")
        if isinstance(schema, str):
            schema = json.loads(schema)
        if not isinstance(schema, dict):
            raise ParameterError("schema must be a JSON Schema object", node_id=ctx.node_id,
                                 node_name=ctx.node_name, parameter="schema")
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
            check_patterns(schema)
        except jsonschema.SchemaError as exc:
            raise ParameterError(f"schema is not a valid JSON Schema: {exc.message}",
                                 node_id=ctx.node_id, node_name=ctx.node_name,
                                 parameter="schema") from None
        except ValueError as exc:
            raise ParameterError(f"schema: {exc}", node_id=ctx.node_id, node_name=ctx.node_name,
                                 parameter="schema") from None
        checker = validator(schema, PatternClock(node_host(ctx).settings.pattern_timeout_s))
        attempts = max(1, int(data.get("max_attempts") or 2))
        script = parse_script(data.get("script")) or []
        prompt = user_message(data, inputs)
        system = SYSTEM.format(schema=json.dumps(schema))
        problem: str | None = None
        for attempt in range(attempts):
            model = await resolve_model(data.get("model"), ctx, script=script[attempt:] or None)
            message = prompt if problem is None else (
                f"{prompt}\n\nYour previous answer was invalid: {problem}. Answer again.")
            text = ""
            async for item in complete_text(ctx, model, message, system=system,
                                            name=ctx.node_name):
                if isinstance(item, NodeEvent):
                    yield item
                else:
                    text = item[0]
            value, problem = await asyncio.to_thread(_check, text, checker)
            if problem is None:
                yield ExecutionResult(outputs={"output": DataValue("data", {"data": value})})
                return
            yield ctx.event("progress", {"attempt": attempt + 1, "invalid": problem})
        raise ValueError(f"structured output from {ctx.node_name!r} still invalid after "
                         f"{attempts} attempts: {problem}")


executor = StructuredOutputExecutor()
