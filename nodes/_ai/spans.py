"""OpenTelemetry spans of one Agno run, from its event stream (GenAI semantic conventions).

:class:`AgnoSpans` turns the events :class:`~nodes._ai.runner.AgnoStream` sees into spans
under the node's span (the current span when the stream starts):

======================================  ==========================================================
span                                    from / attributes
======================================  ==========================================================
``invoke_agent {name}``                 an agent's or team's run (members nest under the
                                        leader's delegating tool call): ``gen_ai.operation.name``,
                                        ``gen_ai.agent.name``, ``gen_ai.agent.id``
``chat {model}``                        ModelRequestStarted .. Completed: ``gen_ai.request.model``,
                                        ``gen_ai.provider.name``, ``gen_ai.usage.input_tokens``,
                                        ``gen_ai.usage.output_tokens``,
                                        ``gen_ai.usage.cache_read.input_tokens``,
                                        ``gen_ai.usage.reasoning.output_tokens``
``execute_tool {tool}``                 ToolCallStarted .. Completed/Error: ``gen_ai.tool.name``,
                                        ``gen_ai.tool.call.id``
======================================  ==========================================================

Tool arguments, tool results and answers are attributes only with
``ORCH_TRACE_CONTENT=true`` (``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``,
``gen_ai.output.text``), and redacted. With no tracer provider configured every call
here is the OpenTelemetry API's no-op.

Agno's OpenInference instrumentation is not used: it writes OpenInference attributes
(``llm.model_name``, ``llm.token_count.*``), not the GenAI ones, and records inputs and
outputs unless told otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

TRACER = "orchestrator.nodes.ai"
SEMCONV_USAGE = {  # our usage number -> its GenAI attribute
    "input_tokens": "gen_ai.usage.input_tokens", "output_tokens": "gen_ai.usage.output_tokens",
    "cached_tokens": "gen_ai.usage.cache_read.input_tokens",
    "reasoning_tokens": "gen_ai.usage.reasoning.output_tokens",
}
CONTENT_CHARS = 4000  # content attributes are cut here


def _text(value: Any, redact: Callable[[Any], Any]) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return str(redact(text))[:CONTENT_CHARS]


def usage_numbers(ev: Any) -> dict[str, int]:
    """The token counts a ModelRequestCompleted event carries (our usage number names)."""
    names = {"input_tokens": "input_tokens", "output_tokens": "output_tokens", "total_tokens": "total_tokens",
             "cache_read_tokens": "cached_tokens", "reasoning_tokens": "reasoning_tokens"}
    out = {ours: int(getattr(ev, theirs, 0) or 0) for theirs, ours in names.items()}
    out = {k: v for k, v in out.items() if v}
    out["calls"] = 1
    return out


def usage_key(ev: Any) -> str:
    model = str(getattr(ev, "model", None) or "unknown")
    provider = str(getattr(ev, "model_provider", None) or "").lower()
    return f"{provider}:{model}" if provider else model


class AgnoSpans:
    """Spans of one Agno run and the member runs inside it, keyed by Agno run id."""

    def __init__(self, name: str, *, redact: Callable[[Any], Any], content: bool = False,
                 spans_from: trace.Tracer | None = None) -> None:
        """``redact``: the host's (``NodeHost.redact``), applied to content attributes."""
        self.tracer = spans_from or trace.get_tracer(TRACER)
        self.name = name
        self.content = content
        self.redact = redact
        self.enabled = spans_from is not None or _has_provider()
        self._root = otel_context.get_current()
        self._agents: dict[str, Span] = {}
        self._models: dict[str, Span] = {}
        self._tools: dict[str, Span] = {}  # by tool call id

    def observe(self, ev: Any, kind: str) -> None:
        """Record ``ev`` (``kind``: its event name without the Team prefix)."""
        if not self.enabled:
            return
        run_id = str(getattr(ev, "run_id", "") or "")
        if kind == "RunStarted" or run_id not in self._agents:
            self._agent(ev, run_id)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, ev, run_id)

    def _agent(self, ev: Any, run_id: str) -> Span:
        if run_id in self._agents:
            return self._agents[run_id]
        parent_run = str(getattr(ev, "parent_run_id", "") or "")
        parent = self._open_tool(parent_run) or self._agents.get(parent_run)
        ctx = trace.set_span_in_context(parent) if parent is not None else self._root
        name = getattr(ev, "agent_name", None) or getattr(ev, "team_name", None) or self.name
        agent_id = getattr(ev, "agent_id", None) or getattr(ev, "team_id", None)
        span = self.tracer.start_span(f"invoke_agent {name}", context=ctx, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": str(name),
            **({"gen_ai.agent.id": str(agent_id)} if agent_id else {})})
        self._agents[run_id] = span
        return span

    def _open_tool(self, run_id: str) -> Span | None:
        """The latest open tool span of ``run_id`` (a delegation running a member)."""
        open_tools = [s for key, s in self._tools.items() if key.startswith(run_id + "/")]
        return open_tools[-1] if open_tools else None

    def _under(self, run_id: str) -> Any:
        return trace.set_span_in_context(self._agents[run_id])

    def model_started(self, ev: Any, run_id: str) -> None:
        model = str(getattr(ev, "model", None) or "unknown")
        provider = str(getattr(ev, "model_provider", None) or "")
        self._end(self._models.pop(run_id, None))
        self._models[run_id] = self.tracer.start_span(f"chat {model}", context=self._under(run_id), attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
            "gen_ai.provider.name": provider.lower(), "gen_ai.system": provider.lower()})

    def model_completed(self, ev: Any, run_id: str) -> None:
        span = self._models.pop(run_id, None)
        if span is None:
            self.model_started(ev, run_id)
            span = self._models.pop(run_id)
        numbers = usage_numbers(ev)
        for ours, attribute in SEMCONV_USAGE.items():
            if ours in numbers:
                span.set_attribute(attribute, numbers[ours])
        if getattr(ev, "model", None):
            span.set_attribute("gen_ai.response.model", str(ev.model))
        span.end()

    def tool_started(self, ev: Any, run_id: str) -> None:
        tool = getattr(ev, "tool", None)
        name = str(getattr(tool, "tool_name", None) or "tool")
        call_id = str(getattr(tool, "tool_call_id", None) or name)
        span = self.tracer.start_span(f"execute_tool {name}", context=self._under(run_id), attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id})
        args = getattr(tool, "tool_args", None)
        if self.content and args is not None:
            span.set_attribute("gen_ai.tool.call.arguments", _text(args, self.redact))
        self._tools[f"{run_id}/{call_id}"] = span

    def tool_ended(self, ev: Any, run_id: str) -> None:
        tool = getattr(ev, "tool", None)
        call_id = str(getattr(tool, "tool_call_id", None) or getattr(tool, "tool_name", None) or "tool")
        span = self._tools.pop(f"{run_id}/{call_id}", None)
        if span is None:
            return
        if getattr(tool, "tool_call_error", False) or str(getattr(ev, "event", "")).endswith("Error"):
            span.set_status(Status(StatusCode.ERROR, "tool call failed"))
            span.set_attribute("error.type", "tool_error")
        elif self.content and getattr(tool, "result", None) is not None:
            span.set_attribute("gen_ai.tool.call.result", _text(getattr(tool, "result", None), self.redact))
        span.end()

    def run_ended(self, ev: Any, run_id: str) -> None:
        span = self._agents.get(run_id)
        if span is None:
            return
        kind = str(getattr(ev, "event", "")).removeprefix("Team")
        if kind == "RunError":
            span.set_status(Status(StatusCode.ERROR, "agent run failed"))
            span.set_attribute("error.type", str(getattr(ev, "error_type", None) or "agent_error"))
        elif self.content and getattr(ev, "content", None) is not None:
            span.set_attribute("gen_ai.output.text", _text(ev.content, self.redact))
        metrics = getattr(ev, "metrics", None)
        for ours in ("input_tokens", "output_tokens"):
            value = getattr(metrics, ours, None)
            if value:
                span.set_attribute(f"gen_ai.usage.{ours}", int(value))
        self._end(self._agents.pop(run_id, None))

    def close(self, error: BaseException | None = None) -> None:
        """End every span still open (the stream ended, failed or was cancelled)."""
        for spans in (self._tools, self._models, self._agents):
            for span in reversed(list(spans.values())):
                if error is not None:
                    span.set_status(Status(StatusCode.ERROR, type(error).__name__))
                span.end()
            spans.clear()

    @staticmethod
    def _end(span: Span | None) -> None:
        if span is not None:
            span.end()


def _has_provider() -> bool:
    """A real SDK provider is installed (the API's default is a proxy to a no-op)."""
    provider = trace.get_tracer_provider()
    return type(provider).__name__ not in ("ProxyTracerProvider", "NoOpTracerProvider")


_HANDLERS = {
    "ModelRequestStarted": AgnoSpans.model_started,
    "ModelRequestCompleted": AgnoSpans.model_completed,
    "ToolCallStarted": AgnoSpans.tool_started,
    "ToolCallCompleted": AgnoSpans.tool_ended,
    "ToolCallError": AgnoSpans.tool_ended,
    "RunCompleted": AgnoSpans.run_ended,
    "RunError": AgnoSpans.run_ended,
    "RunCancelled": AgnoSpans.run_ended,
}
