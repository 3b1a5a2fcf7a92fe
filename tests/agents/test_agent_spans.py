"""Spans inside agent nodes (GenAI conventions), with an SDK tracer that is not the
global one: a tool loop, a team whose members nest under the leader's delegation, and
content attributes only when asked for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import nodes._ai.runner as runner
from nodes._ai.spans import AgnoSpans
from tests.agents.conftest import data_in, drain, load_executor, make_ctx

agent = load_executor("agents/agent")
toolset = load_executor("tools/toolset")


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    made = provider.get_tracer("test")

    def spans(name: str, **kw: Any) -> AgnoSpans:
        return AgnoSpans(name, spans_from=made, **kw)

    monkeypatch.setattr(runner, "AgnoSpans", spans)
    yield exporter


def by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent else None


async def test_a_tool_loop_is_invoke_agent_over_two_chats_and_one_tool(exported: InMemorySpanExporter) -> None:
    tools = [await toolset.materialize({"toolkits": ["calculator"]}, "tools", make_ctx("t1", node_type="toolset"))]
    ctx = make_ctx(links={("a1", "tools"): tools})
    await drain(agent.execute({"model": "dryrun:gpt-4o-mini", "prompt": "use multiply on 6 and 7"}, data_in({}), ctx))
    spans = by_name(exported)
    [invoke] = spans["invoke_agent Helper"]
    chats, [tool] = spans["chat gpt-4o-mini"], spans["execute_tool multiply"]
    assert len(chats) == 2
    assert {parent_of(s) for s in [*chats, tool]} == {invoke.context.span_id}
    usage = ctx.usage.by_key["dryrun:gpt-4o-mini"]
    assert sum(int((s.attributes or {})["gen_ai.usage.input_tokens"]) for s in chats) == usage["input_tokens"]
    assert (tool.attributes or {})["gen_ai.tool.name"] == "multiply"
    assert not any(k.startswith("gen_ai.tool.call.arguments") for k in (tool.attributes or {}))


async def test_team_members_nest_under_the_leaders_delegation(exported: InMemorySpanExporter) -> None:
    researcher = await agent.materialize(
        {"model": "dryrun:a", "name": "Researcher", "script": [{"say": "facts: {input}"}]},
        "agent", make_ctx("m1", name="Researcher"))
    writer = await agent.materialize({"model": "dryrun:b", "name": "Writer"}, "agent", make_ctx("m2", name="Writer"))
    ctx = make_ctx(links={("a1", "tools"): [researcher, writer]})
    await drain(agent.execute({"model": "dryrun:lead", "prompt": "owls"}, data_in({}), ctx))
    spans = by_name(exported)
    delegations = spans["execute_tool delegate_task_to_member"]
    for member in ("Researcher", "Writer"):
        [span] = spans[f"invoke_agent {member}"]
        assert parent_of(span) in {d.context.span_id for d in delegations}
    assert set(ctx.usage.by_key) == {"dryrun:lead", "dryrun:a", "dryrun:b"}


async def test_content_attributes_only_with_the_setting(exported: InMemorySpanExporter,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_TRACE_CONTENT", "true")
    from orchestrator.settings import Settings

    tools = [await toolset.materialize({"toolkits": ["calculator"]}, "tools", make_ctx("t1", node_type="toolset"))]
    ctx = make_ctx(links={("a1", "tools"): tools}, services={"settings": Settings()})
    await drain(agent.execute({"model": "dryrun:x", "prompt": "use multiply on 6 and 7"}, data_in({}), ctx))
    [tool] = by_name(exported)["execute_tool multiply"]
    assert "6" in str((tool.attributes or {})["gen_ai.tool.call.arguments"])
    assert "42" in str((tool.attributes or {})["gen_ai.tool.call.result"])


async def test_a_tool_error_returned_to_the_model_is_an_error_span(exported: InMemorySpanExporter) -> None:
    from opentelemetry.trace import StatusCode

    tools = [await toolset.materialize({"toolkits": ["calculator"]}, "tools", make_ctx("t1", node_type="toolset"))]
    script = [{"call": "divide", "args": {"a": 1, "b": "zero"}}, {"call": "divide", "args": {"a": 1, "b": 2}},
              {"say": "{tool_result}"}]
    await drain(agent.execute({"model": "dryrun:x", "prompt": "go", "script": script}, data_in({}),
                              make_ctx(links={("a1", "tools"): tools})))
    failed, ok = sorted(by_name(exported)["execute_tool divide"], key=lambda s: s.start_time or 0)
    assert failed.status.status_code == StatusCode.ERROR
    assert ok.status.status_code != StatusCode.ERROR
