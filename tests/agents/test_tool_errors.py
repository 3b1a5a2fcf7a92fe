"""Tool errors back to the model: the Agent node's on_tool_error / max_tool_errors policy
(executor level, offline dry-run model; nodes/_ai/tool_errors.py)."""

from __future__ import annotations

import json
import sys

import pytest

from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import NodeEvent
from tests.agents.conftest import agno_events, data_in, drain, load_executor, make_ctx

agent = load_executor("agents/agent")
toolset = load_executor("tools/toolset")

BAD_DIVIDE = {"call": "divide", "args": {"a": 1, "b": "zero"}}  # the tool raises (bad argument)


async def _links() -> dict[tuple[str, str], list[object]]:
    ctx = make_ctx("t1", name="Calc", node_type="toolset")
    return {("a1", "tools"): [await toolset.materialize({"toolkits": ["calculator"]}, "tools", ctx)]}


def _tool_errors(events: list[NodeEvent]) -> list[dict[str, object]]:
    return [e.data for e in events if (e.data or {}).get("event") == "ToolError"]  # type: ignore[misc]


async def test_a_raising_tool_is_returned_to_the_model_which_answers_anyway() -> None:
    script = [BAD_DIVIDE, {"call": "divide", "args": {"a": 1, "b": 4}},
              {"say": "retried: {tool_result}"}]
    events, result = await drain(agent.execute(
        {"model": "dryrun:x", "prompt": "go", "script": script}, data_in({}),
        make_ctx(links=await _links())))
    assert result.outputs["output"].value["response"] == "retried: 0.25"
    errors = _tool_errors(events)
    assert len(errors) == 1
    assert errors[0]["tool"] == "divide" and errors[0]["kind"] == "ValidationError"
    assert errors[0]["returned_to_model"] is True and errors[0]["agent"] == "Helper"
    first, second = [e.data for e in events if (e.data or {}).get("event") == "ToolCallCompleted"]
    assert str(first["tool"]["result"]).startswith("error (ValidationError):")
    assert first["tool"]["tool_call_error"] is True and second["tool"]["tool_call_error"] is False
    names = agno_events(events)
    assert names.index("ToolError") < names.index("RunCompleted")


async def test_the_model_sees_the_error_kind_in_its_tool_result() -> None:
    script = [BAD_DIVIDE, {"say": "the tool said: {tool_result}"}]
    _events, result = await drain(agent.execute(
        {"model": "dryrun:x", "prompt": "go", "script": script}, data_in({}),
        make_ctx(links=await _links())))
    response = result.outputs["output"].value["response"]
    assert response.startswith("the tool said: error (ValidationError):")
    assert "valid number" in response


async def test_fail_mode_fails_the_node_at_the_first_tool_error() -> None:
    script = [BAD_DIVIDE, {"say": "never reached"}]
    with pytest.raises(RuntimeError, match=r"(?s)tool 'divide' failed \(ValidationError\).*'fail'"):
        await drain(agent.execute(
            {"model": "dryrun:x", "prompt": "go", "script": script, "on_tool_error": "fail"},
            data_in({}), make_ctx(links=await _links())))


async def test_more_tool_errors_than_the_maximum_fail_the_node() -> None:
    script = [BAD_DIVIDE, BAD_DIVIDE, BAD_DIVIDE, {"say": "never reached"}]
    ctx = make_ctx(links=await _links())
    seen: list[NodeEvent] = []
    with pytest.raises(RuntimeError, match=r"(?s)3 tool errors in one run, more than max_tool_errors=2"):
        async for item in agent.execute({"model": "dryrun:x", "prompt": "go", "script": script,
                                         "max_tool_errors": 2}, data_in({}), ctx):
            assert isinstance(item, NodeEvent)
            seen.append(item)
    errors = _tool_errors(seen)
    assert [e["count"] for e in errors] == [1, 2, 3]
    assert [e["returned_to_model"] for e in errors] == [True, True, False]
    assert "never reached" not in json.dumps([e.to_json() for e in seen])


async def test_a_tool_error_event_never_carries_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-secret-value-987654"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    script = [{"call": "divide", "args": {"a": 1, "b": secret}}, {"say": "got {tool_result}"}]
    events, result = await drain(agent.execute(
        {"model": "dryrun:x", "prompt": "go", "script": script}, data_in({}),
        make_ctx(links=await _links())))
    assert _tool_errors(events)
    assert secret not in json.dumps([e.to_json() for e in events])
    assert secret not in result.outputs["output"].value["response"]  # nor what the model got


@pytest.mark.parametrize(("data", "parameter"), [
    ({"on_tool_error": "ignore"}, "on_tool_error"),
    ({"max_tool_errors": -1}, "max_tool_errors"),
    ({"max_tool_errors": "many"}, "max_tool_errors"),
])
async def test_a_bad_policy_is_a_parameter_error(data: dict[str, object], parameter: str) -> None:
    with pytest.raises(ParameterError) as err:
        await drain(agent.execute({"model": "dryrun:x", "prompt": "go", **data}, data_in({}),
                                  make_ctx()))
    assert err.value.parameter == parameter


def lookup(city: str) -> str:
    """Look a city up in the registry."""
    raise LookupError(f"no such city: {city}")


async def test_over_an_openai_compatible_server_the_error_reaches_the_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.settings import Settings
    from tests.agents.openai_stub import StubServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub-secret-abcdef123456")
    with StubServer() as server:
        services = {"settings": Settings(openai_base_url=server.base_url, retention_s=60,
                                         key_prefix="orc")}
        events, result = await drain(agent.execute(
            {"model": "openai-like:stub-model", "prompt": "where is x", "history": False},
            data_in({}), make_ctx(links={("a1", "tools"): [lookup]}, services=services)))
        sent = [m for m in server.requests[-1]["body"]["messages"] if m.get("role") == "tool"]
        fail_stub_requests = len(server.requests)
        with pytest.raises(RuntimeError, match=r"tool 'lookup' failed \(LookupError\)"):
            await drain(agent.execute(
                {"model": "openai-like:stub-model", "prompt": "where is x", "history": False,
                 "on_tool_error": "fail"},
                data_in({}), make_ctx(links={("a1", "tools"): [lookup]}, services=services)))
        after_fail = len(server.requests) - fail_stub_requests
    assert sent and sent[0]["content"] == "error (LookupError): no such city: x"
    assert result.outputs["output"].value["response"].strip() == (
        "Stub says: error (LookupError): no such city: x")
    assert [e["kind"] for e in _tool_errors(events)] == ["LookupError"]
    assert after_fail == 1  # the model was never asked again once the tool failed


async def test_an_mcp_tool_error_is_returned_to_the_model_with_its_kind(allow_python: None) -> None:
    from pathlib import Path

    mcp_server = load_executor("tools/mcp_server")
    server = Path(__file__).with_name("mcp_echo_server.py")
    tools = await mcp_server.materialize(
        {"transport": "stdio", "command": f"{sys.executable} {server}", "timeout_s": 30},
        "tools", make_ctx("m1", node_type="mcp_server"))
    script = [{"call": "refuse", "args": {"reason": "closed"}}, {"say": "told: {tool_result}"}]
    events, result = await drain(agent.execute(
        {"model": "dryrun:x", "prompt": "go", "script": script}, data_in({}),
        make_ctx(links={("a1", "tools"): [tools]}, session_id="mcp-err")))
    errors = _tool_errors(events)
    assert [(e["tool"], e["kind"]) for e in errors] == [("refuse", "MCPToolError")]
    assert "refused: closed" in str(errors[0]["message"])
    response = result.outputs["output"].value["response"]
    assert response.startswith("told: error (MCPToolError):") and "refused: closed" in response


async def test_a_team_members_tool_error_is_returned_to_it_and_shown_in_the_leaders_stream() -> None:
    calc = (await _links())[("a1", "tools")]
    researcher = await agent.materialize(
        {"model": "dryrun:m", "name": "Researcher", "max_tool_errors": 1,
         "script": [BAD_DIVIDE, {"say": "member saw: {tool_result}"}]},
        "agent", make_ctx("m1", name="Researcher", links={("m1", "tools"): calc}))
    events, result = await drain(agent.execute(
        {"model": "dryrun:lead", "prompt": "divide please"}, data_in({}),
        make_ctx(links={("a1", "tools"): [researcher]})))
    errors = _tool_errors(events)
    assert [(e["agent"], e["tool"], e["returned_to_model"]) for e in errors] == [("Researcher", "divide", True)]
    assert "member saw: error (ValidationError)" in result.outputs["output"].value["response"]


async def test_a_run_signal_from_a_tool_ends_the_node_and_never_reaches_the_model() -> None:
    from orchestrator.kernel.errors import RunCancelled

    def child_graph(topic: str) -> str:
        """Run the child graph on a topic."""
        raise RunCancelled("the child run was cancelled", run_id="child")

    script = [{"call": "child_graph", "args": {"topic": "x"}}, {"say": "never: {tool_result}"}]
    with pytest.raises(RunCancelled, match="child run was cancelled"):
        await drain(agent.execute({"model": "dryrun:x", "prompt": "go", "script": script}, data_in({}),
                                  make_ctx(links={("a1", "tools"): [child_graph]})))
