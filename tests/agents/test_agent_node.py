"""The Agent node at executor level: tool loop, teams, errors, approvals, cancellation."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from orchestrator.kernel.errors import ParameterError, SuspendRequested
from orchestrator.kernel.protocol import ExecutionResult, NodeEvent
from tests.agents.conftest import agno_events, data_in, drain, load_executor, make_ctx

agent = load_executor("agents/agent")
toolset = load_executor("tools/toolset")


async def _calculator(approval: list[str] | None = None) -> list[object]:
    ctx = make_ctx("t1", name="Calc", node_type="toolset")
    return [await toolset.materialize({"toolkits": ["calculator"],
                                       "requires_approval": approval or []}, "tools", ctx)]


async def test_agent_with_a_toolset_calls_the_tool_then_answers_with_its_result() -> None:
    ctx = make_ctx(links={("a1", "tools"): await _calculator()})
    events, result = await drain(agent.execute(
        {"model": "dryrun:x", "prompt": "use multiply on 6 and 7"}, data_in({}), ctx))
    names = agno_events(events)
    assert names.index("ToolCallStarted") < names.index("ToolCallCompleted") < names.index("RunContent")
    completed = next(e.data for e in events if (e.data or {}).get("event") == "ToolCallCompleted")
    assert completed is not None and completed["tool"]["tool_name"] == "multiply"
    output = result.outputs["output"].value
    assert str(6 * 7) in output["response"]
    assert output["model"] == "dryrun:x" and output["tokens_used"] > 0


async def test_scripted_tool_call_uses_the_scripted_arguments() -> None:
    ctx = make_ctx(links={("a1", "tools"): await _calculator()})
    script = [{"call": "subtract", "args": {"a": 10, "b": 4}}, {"say": "Result is {tool_result}"}]
    _events, result = await drain(agent.execute(
        {"model": "dryrun:x", "prompt": "go", "script": script}, data_in({}), ctx))
    assert result.outputs["output"].value["response"] == f"Result is {float(10 - 4)}"


async def test_empty_content_deltas_are_not_forwarded() -> None:
    events, _ = await drain(agent.execute({"model": "dryrun:x", "prompt": "hi"}, data_in({}),
                                          make_ctx()))
    contents = [e.data for e in events if (e.data or {}).get("event") == "RunContent"]
    assert contents and all(c.get("content") for c in contents)


async def test_prompt_falls_back_to_the_input_message() -> None:
    _, result = await drain(agent.execute({"model": "dryrun:x", "prompt": ""},
                                          data_in({"message": "from the input"}), make_ctx()))
    assert "from the input" in result.outputs["output"].value["response"]


async def test_team_with_two_sub_agents_streams_member_events_in_the_parent() -> None:
    researcher = await agent.materialize(
        {"model": "dryrun:a", "name": "Researcher", "script": [{"say": "facts: {input}"}]},
        "agent", make_ctx("m1", name="Researcher"))
    writer = await agent.materialize({"model": "dryrun:b", "name": "Writer"}, "agent",
                                     make_ctx("m2", name="Writer"))
    ctx = make_ctx(links={("a1", "tools"): [researcher, writer]})
    events, result = await drain(agent.execute({"model": "dryrun:lead", "prompt": "owls"},
                                               data_in({}), ctx))
    member_agents = {e.data["agent"] for e in events
                     if (e.data or {}).get("event") == "RunCompleted"}
    assert member_agents == {"Researcher", "Writer"}
    assert agno_events(events)[-1] == "TeamRunCompleted"
    response = result.outputs["output"].value["response"]
    assert "facts: owls" in response and "Reply #1 to: owls" in response


async def test_model_error_becomes_a_node_error_naming_the_agent() -> None:
    with pytest.raises(RuntimeError, match=r"Helper.*provider exploded"):
        await drain(agent.execute({"model": "dryrun:x", "prompt": "hi",
                                   "script": [{"error": "provider exploded"}]},
                                  data_in({}), make_ctx()))


async def test_a_bad_model_spec_is_a_parameter_error() -> None:
    with pytest.raises(ParameterError, match="provider:model_id"):
        await drain(agent.execute({"model": "gpt-4o", "prompt": "hi"}, data_in({}), make_ctx()))


async def test_no_api_key_appears_in_any_event(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-secret-value-123456"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    script = [{"say": f"leaking {secret} now"}]
    events, _result = await drain(agent.execute(
        {"model": "dryrun:x", "prompt": f"my key is {secret}", "script": script},
        data_in({}), make_ctx()))
    dumped = json.dumps([e.to_json() for e in events])
    assert secret not in dumped and "***" in dumped


async def test_tool_needing_approval_suspends_then_approve_runs_the_tool() -> None:
    links = {("a1", "tools"): await _calculator(["divide"])}
    ctx = make_ctx(links=links, run_id="r-approve", session_id="s-approve")
    stream = agent.execute({"model": "dryrun:x", "prompt": "use divide on 9 and 3"},
                           data_in({}), ctx)
    seen: list[NodeEvent] = []
    with pytest.raises(SuspendRequested) as paused:
        async for item in stream:
            assert not isinstance(item, ExecutionResult)
            seen.append(item)
    assert agno_events(seen)[-1] == "approval_requested"
    payload = paused.value.payload
    assert payload["tool_calls"][0]["tool_name"] == "divide"
    json.dumps(payload)  # stored by the kernel: must be JSON
    resumed = make_ctx(links=links, run_id="r-approve", session_id="s-approve",
                       resume={"payload": payload, "input": {"decision": "approve"}})
    events, result = await drain(agent.execute({"model": "dryrun:x", "prompt": "x"},
                                               data_in({}), resumed))
    assert "RunContinued" in agno_events(events)
    assert str(9 / 3) in result.outputs["output"].value["response"]


async def test_rejected_tool_call_is_not_run_and_the_agent_gets_the_note() -> None:
    links = {("a1", "tools"): await _calculator(["divide"])}
    ctx = make_ctx(links=links, run_id="r-reject", session_id="s-reject")
    with pytest.raises(SuspendRequested) as paused:
        await drain(agent.execute({"model": "dryrun:x", "prompt": "use divide on 8 and 2"},
                                  data_in({}), ctx))
    resumed = make_ctx(links=links, run_id="r-reject", session_id="s-reject",
                       resume={"payload": paused.value.payload,
                               "input": {"decision": "reject", "note": "not today"}})
    events, result = await drain(agent.execute({"model": "dryrun:x"}, data_in({}), resumed))
    completed = [e.data for e in events if (e.data or {}).get("event") == "ToolCallCompleted"]
    assert all(str(8 / 2) != c["tool"].get("result") for c in completed)
    assert str(8 / 2) not in result.outputs["output"].value["response"]
    assert "not today" in result.outputs["output"].value["response"]


async def test_approval_with_edited_arguments_runs_the_tool_with_them() -> None:
    links = {("a1", "tools"): await _calculator(["add"])}
    ctx = make_ctx(links=links, run_id="r-edit", session_id="s-edit")
    with pytest.raises(SuspendRequested) as paused:
        await drain(agent.execute({"model": "dryrun:x", "prompt": "use add on 1 and 1"},
                                  data_in({}), ctx))
    resumed = make_ctx(links=links, run_id="r-edit", session_id="s-edit", resume={
        "payload": paused.value.payload,
        "input": {"decision": "approve", "arguments": {"b": 41}}})
    _, result = await drain(agent.execute({"model": "dryrun:x"}, data_in({}), resumed))
    assert str(1.0 + 41) in result.outputs["output"].value["response"]


async def test_cancelling_a_streaming_agent_stops_it_mid_answer() -> None:
    script = [{"say": " ".join(f"w{i}" for i in range(200)), "delay_s": 0.01}]
    tokens: list[str] = []

    async def consume() -> None:
        async for item in agent.execute({"model": "dryrun:x", "prompt": "go", "script": script},
                                        data_in({}), make_ctx(run_id="r-cancel")):
            if isinstance(item, NodeEvent) and (item.data or {}).get("event") == "RunContent":
                tokens.append(item.data["content"])

    task = asyncio.ensure_future(consume())
    while len(tokens) < 3:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 3 <= len(tokens) < 200


async def test_a_cancelled_agent_closes_its_mcp_toolkit_even_when_the_close_outlasts_the_grace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Agno closes the MCP toolkits it connected once it has ended the cancelled run; a close
    slower than the node's grace (a stdio server stopping on a loaded host) is not cut short:
    cut, Agno's own close swallows the cancel and leaves the toolkit half-closed."""
    from agno.tools.mcp import MCPTools

    from nodes._ai import runner

    monkeypatch.setattr(runner, "CANCEL_GRACE_S", 0.1)
    closes: list[str] = []

    class SlowToClose(MCPTools):
        async def connect(self, force: bool = False) -> None:
            self._initialized = True

        async def close(self) -> None:
            closes.append("started")
            await asyncio.sleep(0.3)  # three graces
            self._initialized = False
            closes.append("done")

    toolkit = SlowToClose(command=f"{sys.executable} -c pass", transport="stdio")
    script = [{"say": " ".join(f"w{i}" for i in range(200)), "delay_s": 0.01}]
    streaming = asyncio.Event()

    async def consume() -> None:
        async for item in agent.execute({"model": "dryrun:x", "prompt": "go", "script": script,
                                         "history": False}, data_in({}),
                                        make_ctx(run_id="r-slow-close", links={("a1", "tools"): [toolkit]})):
            if isinstance(item, NodeEvent) and (item.data or {}).get("event") == "RunContent":
                streaming.set()

    task = asyncio.ensure_future(consume())
    await asyncio.wait_for(streaming.wait(), 30)
    assert toolkit.initialized
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # the node's task ends once the close has: nothing is left open behind it
    assert closes == ["started", "done"] and not toolkit.initialized


async def test_materialize_offers_only_the_agent_handle() -> None:
    with pytest.raises(ParameterError, match="agent"):
        await agent.materialize({"model": "dryrun:x"}, "output", make_ctx())


async def test_offline_output_names_the_dry_run_model_that_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_OFFLINE_MODELS", "1")
    ctx = make_ctx(links={("a1", "tools"): await _calculator()})
    _events, result = await drain(agent.execute(
        {"model": "openai-chat:gpt-4o-mini", "prompt": "hello"}, data_in({}), ctx))
    assert result.outputs["output"].value["model"] == "dryrun:gpt-4o-mini"
