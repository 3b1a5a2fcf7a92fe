"""OpenTelemetry traces: one trace per run, across the API, the broker and every worker.

Off by default, and then nothing here costs anything: no provider, no exporter, no
span; ``enabled()`` is False and the step observer is not installed. On when
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (and
``OTEL_SDK_DISABLED`` is not ``true``): :func:`configure` installs the SDK with a batch
OTLP/HTTP (protobuf) exporter, which reads the standard ``OTEL_EXPORTER_OTLP_*``
variables (endpoint, headers, timeout), and names the service ``OTEL_SERVICE_NAME``
(default: the process's role, ``orchestrator-api`` / ``orchestrator-worker``).

How one run stays one trace: :func:`run_span` opens the run's root span ``run
{graph}`` where the run starts (inside the API request's span, when there is one) and
returns its W3C ``traceparent``, which the run's plan keeps (``RunPlan.labels``). Every
node execution, on any worker, whenever (a retry, a resumed approval, a node the
sweeper sent again), is a span ``node {name}`` whose parent is that root
(:class:`NodeSpans`, the kernel's step observer); Celery's publish/consume spans
(opentelemetry-instrumentation-celery) carry the context in the task message headers,
and messages that workers send are published inside the run's context.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from orchestrator.kernel.observer import ObservedEnd, ObservedNode

TRACER = "orchestrator"
TRACEPARENT = "traceparent"
ERROR_CHARS = 300
_PROPAGATOR = TraceContextTextMapPropagator()
_configured: dict[str, Any] = {"pid": None, "enabled": False, "provider": None}


def requested(env: dict[str, str] | None = None) -> bool:
    """Do the standard variables ask for traces?"""
    env = dict(os.environ) if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def enabled() -> bool:
    return bool(_configured["enabled"]) and _configured["pid"] == os.getpid()


def configure(service_name: str) -> bool:
    """Install the SDK in this process when traces are requested (once per process;
    again in a forked child). Returns whether traces are on."""
    if _configured["pid"] == os.getpid():
        return bool(_configured["enabled"])
    _configured.update(pid=os.getpid(), enabled=False)
    if not requested():
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = _configured["provider"]
    if provider is None:  # a forked child keeps its parent's provider (the SDK re-arms its thread)
        name = os.environ.get("OTEL_SERVICE_NAME") or service_name
        provider = TracerProvider(resource=Resource.create({"service.name": name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _configured["provider"] = provider
    _configured["enabled"] = True
    return True


def flush(timeout_ms: int = 5000) -> None:
    """Export what is buffered (a process about to exit)."""
    provider = _configured["provider"]
    if provider is not None:
        provider.force_flush(timeout_ms)


def tracer() -> trace.Tracer:
    return trace.get_tracer(TRACER)


def instrument_celery() -> None:
    """Celery publish/consume spans, trace context in the message headers."""
    if enabled():
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        instrumentor = CeleryInstrumentor()  # type: ignore[no-untyped-call]
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument()


def instrument_httpx() -> None:
    """A span per outgoing HTTP request (model providers, HTTP nodes): URL, status."""
    if enabled():
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        instrumentor = HTTPXClientInstrumentor()
        if not instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.instrument()


def instrument_app(app: Any) -> None:
    """Server spans for the API's requests (health and metrics scrapes left out)."""
    if enabled():
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(app, excluded_urls="/health,/metrics,/ui/")


def context_of(labels: dict[str, str]) -> otel_context.Context | None:
    """The run's root context from its plan labels (None: the run has none)."""
    carrier = {TRACEPARENT: labels[TRACEPARENT]} if labels.get(TRACEPARENT) else None
    return _PROPAGATOR.extract(carrier) if carrier else None


def trace_id_of(labels: dict[str, str]) -> str | None:
    """The 32-hex trace id of a run (from its ``traceparent`` label)."""
    parts = labels.get(TRACEPARENT, "").split("-")
    return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


def trace_of(labels: dict[str, str], link_template: str) -> dict[str, str | None]:
    """``{"trace_id", "trace_url"}`` of a run (None when it has no trace; the URL from
    ``Settings.trace_link_template`` with ``{trace_id}`` replaced)."""
    trace_id = trace_id_of(labels)
    url = link_template.replace("{trace_id}", trace_id) if trace_id and link_template else None
    return {"trace_id": trace_id, "trace_url": url}


@contextmanager
def run_span(run_id: str, graph_id: str, **attributes: str) -> Iterator[dict[str, str]]:
    """The run's root span, current inside the block; yields the labels that carry it
    (``{"traceparent": ...}``; ``{}`` with traces off)."""
    if not enabled():
        yield {}
        return
    with tracer().start_as_current_span(f"run {graph_id}", kind=SpanKind.INTERNAL, attributes={
            "orchestrator.run.id": run_id, "orchestrator.graph.id": graph_id,
            **{f"orchestrator.run.{k}": v for k, v in attributes.items() if v}}) as span:
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        yield {TRACEPARENT: carrier[TRACEPARENT]} if TRACEPARENT in carrier else {}


@contextmanager
def run_context(labels: dict[str, str]) -> Iterator[None]:
    """Make the run's root context current (a message a worker publishes for the run)."""
    parent = context_of(labels) if enabled() else None
    if parent is None:
        yield
        return
    token = otel_context.attach(parent)
    try:
        yield
    finally:
        otel_context.detach(token)


class _NodeSpan:
    def __init__(self, span: Span) -> None:
        self.span = span

    def end(self, ended: ObservedEnd) -> None:
        span = self.span
        span.set_attribute("orchestrator.node.status", ended.status)
        tokens: dict[str, float] = {}
        for numbers in ended.usage.values():
            for name in ("input_tokens", "output_tokens"):
                tokens[name] = tokens.get(name, 0) + float(numbers.get(name, 0))
        for name, value in tokens.items():
            span.set_attribute(f"gen_ai.usage.{name}", int(value))
        if ended.error and ended.status in ("failed", "retrying"):
            # The type and code only: an executor's message may quote anything it saw
            # (the run's events have it, for those allowed to read the run).
            kind, code = str(ended.error.get("type") or "error"), str(ended.error.get("code") or "node_failed")
            span.set_attribute("error.type", kind)
            span.set_attribute("orchestrator.error.code", code)
            span.set_status(Status(StatusCode.ERROR, f"{kind} ({code})"[:ERROR_CHARS]))


class NodeSpans:
    """The kernel's step observer: a span per node execution, child of the run's root."""

    def __init__(self, spans_from: trace.Tracer | None = None) -> None:
        self.tracer = spans_from  # None: the global provider's, looked up per span

    @contextmanager
    def node(self, seen: ObservedNode) -> Iterator[_NodeSpan]:
        parent = context_of(seen.plan.labels) or otel_context.get_current()
        spans = self.tracer or tracer()
        span = spans.start_span(f"node {seen.node_name}", context=parent, kind=SpanKind.INTERNAL, attributes={
            "orchestrator.run.id": seen.plan.run_id,
            "orchestrator.graph.id": str(seen.plan.graph.get("id") or ""),
            "orchestrator.node.id": seen.node_id, "orchestrator.node.type": seen.node_type,
            "orchestrator.node.name": seen.node_name, "orchestrator.node.attempt": seen.attempt,
            "orchestrator.worker.id": seen.worker_id})
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            yield _NodeSpan(span)
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise
        finally:
            otel_context.detach(token)
            span.end()
