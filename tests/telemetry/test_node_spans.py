"""Node spans from the step observer, with an SDK tracer that is not the global one."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from orchestrator.kernel.local import LocalRunner
from orchestrator.kernel.step import StepOptions
from orchestrator.telemetry.tracing import NodeSpans, context_of, trace_id_of
from tests.fake_nodes import graph, make_registry

SECRET_IN_MESSAGE = "password=hunter2-secret"


async def test_each_execution_is_a_span_with_its_node_and_a_failure_without_its_message() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    g = graph([("a", "emit", "A"), ("b", "boom", "Breaks", {"message": SECRET_IN_MESSAGE})],
              [("a", "out", "b", "in")])
    runner = LocalRunner(make_registry(), options=StepOptions(observer=NodeSpans(provider.get_tracer("t"))))
    result = await runner.run(g, 1)
    assert result.status == "failed"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"node A", "node Breaks"}
    ok, bad = spans["node A"], spans["node Breaks"]
    assert ok.attributes is not None and bad.attributes is not None
    assert ok.attributes["orchestrator.node.id"] == "a" and ok.attributes["orchestrator.node.status"] == "succeeded"
    assert ok.attributes["orchestrator.node.attempt"] == 1 and ok.attributes["orchestrator.worker.id"]
    assert bad.status.status_code == StatusCode.ERROR
    assert bad.attributes["orchestrator.node.status"] == "failed" and bad.attributes["error.type"]
    for span in (ok, bad):
        assert SECRET_IN_MESSAGE not in repr(dict(span.attributes or {})) + str(span.status.description)


def test_a_runs_trace_context_travels_as_its_traceparent_label() -> None:
    labels = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    assert trace_id_of(labels) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert context_of(labels) is not None
    assert context_of({}) is None and trace_id_of({}) is None
