"""Wait: pause the run, holding no worker and no slot, until something resumes the node.

The first execution raises ``SuspendRequested`` (the node and its run become ``waiting``;
the worker is free at once). Its payload says what the node waits for::

    {"wait": {"kind": "form" | "url" | "time", "message", "schema"?, "timeout_s"?, "deadline"?,
              "duration_s"?, "until"?},
     "wake": {"after_s": s | "at": epoch_s, "input": {"via": "time" | "timeout"}}?}

``wake`` asks the store for a timer (``orchestrator/store/waits.py``: a Redis sorted set
on Redis's clock, walked by the sweeper); a form or a resume URL answers through
``orchestrator/service/waits.py``. Whichever comes first resumes the node (the store's
resume is atomic: a second answer is refused) and the executor runs again with
``ctx.resume["input"] = {"via": ..., "data": ...}``:

==========  =========================================================
via         output
==========  =========================================================
form, url   ``output``: the submitted data / the callback's JSON body
time        ``output``: the node's input, unchanged
timeout     ``timeout``: the node's input, unchanged (``timeout_s`` or ``deadline`` passed)
==========  =========================================================

``form_schema`` is checked here (an object schema; no regular-expression keywords: the
API validates submissions without the node's pattern budget); a form's data is checked
against it again on resume.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

from nodes._shared.values import input_value, result
from orchestrator.kernel.errors import ParameterError, SuspendRequested
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

KINDS = ("form", "url", "time")
MAX_SCHEMA_CHARS = 64 * 1024
_REGEX_KEYWORDS = ("pattern", "patternProperties")


def _seconds(data: dict[str, Any], name: str) -> float | None:
    raw = data.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number of seconds, got {raw!r}",
                             parameter=name) from None
    if not math.isfinite(value) or value < 0:
        raise ParameterError(f"{name} must be 0 or more seconds, got {raw!r}", parameter=name)
    return value


def _moment(raw: Any, name: str) -> float:
    try:
        moment = datetime.fromisoformat(str(raw))
    except ValueError:
        raise ParameterError(f"{name} must be an ISO 8601 date and time, got {raw!r}",
                             parameter=name) from None
    if moment.tzinfo is None:
        raise ParameterError(f"{name} needs a UTC offset (e.g. {raw}+00:00), got {raw!r}",
                             parameter=name)
    return moment.timestamp()


def _regex_keywords(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        found = [k for k in _REGEX_KEYWORDS if k in schema]
        for value in schema.values():
            found += _regex_keywords(value)
        return found
    if isinstance(schema, list):
        return [k for value in schema for k in _regex_keywords(value)]
    return []


def form_schema(data: dict[str, Any]) -> dict[str, Any]:
    """The node's form schema, checked (``ParameterError`` naming ``form_schema``)."""
    raw = data.get("form_schema")
    schema = json.loads(raw) if isinstance(raw, str) and raw.strip() else raw
    if schema in (None, ""):
        schema = {"type": "object"}
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise ParameterError("form_schema must be a JSON Schema of an object "
                             "({\"type\": \"object\", \"properties\": {...}})", parameter="form_schema")
    if len(json.dumps(schema)) > MAX_SCHEMA_CHARS:
        raise ParameterError(f"form_schema is larger than {MAX_SCHEMA_CHARS} characters",
                             parameter="form_schema")
    if found := _regex_keywords(schema):
        raise ParameterError(f"form_schema may not use {', '.join(sorted(set(found)))} "
                             "(regular expressions are not checked on forms)", parameter="form_schema")
    import jsonschema  # here, not at node discovery

    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ParameterError(f"form_schema is not a valid JSON Schema: {exc.message}",
                             parameter="form_schema") from None
    return schema


def wait_payload(data: dict[str, Any]) -> dict[str, Any] | None:
    """The suspend payload for ``data``; None when there is nothing to wait for."""
    kind = data.get("resume_on") or "form"
    if kind not in KINDS:
        raise ParameterError(f"resume_on must be one of {', '.join(KINDS)}, got {kind!r}",
                             parameter="resume_on")
    wait: dict[str, Any] = {"kind": kind, "message": str(data.get("message") or "")}
    if kind == "time":
        duration = _seconds(data, "duration_s")
        until = data.get("until")
        if (duration is None) == (until in (None, "")):
            raise ParameterError("a time wait needs exactly one of duration_s and until",
                                 parameter="duration_s")
        if duration == 0:
            return None
        if duration is not None:
            wait["duration_s"] = duration
            return {"wait": wait, "wake": {"after_s": duration, "input": {"via": "time"}}}
        at = _moment(until, "until")
        wait["until"] = str(until)
        return {"wait": wait, "wake": {"at": at, "input": {"via": "time"}}}
    if kind == "form":
        wait["schema"] = form_schema(data)
    payload: dict[str, Any] = {"wait": wait}
    timeout = _seconds(data, "timeout_s")
    deadline = data.get("deadline")
    if timeout and deadline not in (None, ""):
        raise ParameterError("set timeout_s or deadline, not both", parameter="deadline")
    if timeout:
        wait["timeout_s"] = timeout
        payload["wake"] = {"after_s": timeout, "input": {"via": "timeout"}}
    elif deadline not in (None, ""):
        wait["deadline"] = str(deadline)
        payload["wake"] = {"at": _moment(deadline, "deadline"), "input": {"via": "timeout"}}
    return payload


class Wait:
    node_type = "wait"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> ExecutionResult:
        passed = input_value(inputs)
        if ctx.resume is None:
            payload = wait_payload(data)
            if payload is None:
                return result({"output": passed})
            kind = payload["wait"]["kind"]
            raise SuspendRequested(f"waits for {'a form' if kind == 'form' else kind}",
                                   node_id=ctx.node_id, node_name=ctx.node_name,
                                   run_id=ctx.run_id, payload=payload)
        answer = ctx.resume.get("input") or {}
        via = answer.get("via")
        if via == "timeout":
            return result({"timeout": passed})
        if via == "time":
            return result({"output": passed})
        if via == "form":
            schema = (ctx.resume.get("payload") or {}).get("wait", {}).get("schema") or {}
            import jsonschema

            validator = jsonschema.validators.validator_for(schema)(schema)  # no regex keywords
            errors = list(validator.iter_errors(answer.get("data")))
            if errors:
                raise ParameterError(f"the submitted form does not match form_schema: "
                                     f"{errors[0].message}", parameter="form_schema")
        if via in ("form", "url"):
            return result({"output": answer.get("data")})
        raise ParameterError(f"the Wait node was resumed with an unknown answer {via!r}",
                             parameter="resume_on")


executor = Wait()
