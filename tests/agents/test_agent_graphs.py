"""Agent graphs run whole through the kernel (run_graph_local), offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.kernel.local import LocalRunner, run_graph_local
from orchestrator.kernel.protocol import NodeEvent
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.store import RunStatus
from orchestrator.service.approvals import Approval, ApprovalError, submit_approval
from orchestrator.service.plugins import load_registry
from orchestrator.settings import load_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry(load_settings())


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_OFFLINE_MODELS", "1")


def example(name: str) -> dict[str, Any]:
    graph: dict[str, Any] = json.loads((EXAMPLES / f"{name}.json").read_text())
    return graph


def agent_events(events: list[NodeEvent], node_id: str) -> list[str]:
    return [str((e.data or {}).get("event")) for e in events
            if e.node_id == node_id and e.event_type == "agent_event"]


async def test_chat_agent_with_tools_calls_the_calculator_and_answers(registry: Registry) -> None:
    result = await run_graph_local(example("agent_chat_tools"), registry,
                                   {"message": "use multiply on 6 and 7"}, session_id="g1")
    assert result.status == RunStatus.SUCCEEDED
    names = agent_events(result.events, "assistant")
    assert "ToolCallCompleted" in names and names[-1] == "RunCompleted"
    assert str(6.0 * 7) in result.output("assistant", "output")["response"]


@pytest.mark.parametrize(("message", "ran", "skipped"), [
    ("urgent: the server is down", "escalate", "respond"),
    ("hello there", "respond", "escalate"),
])
async def test_conditional_between_agents_runs_only_the_chosen_agent(
        registry: Registry, message: str, ran: str, skipped: str) -> None:
    result = await run_graph_local(example("agent_conditional_agents"), registry,
                                   {"message": message}, session_id="g2")
    assert result.status == RunStatus.SUCCEEDED
    assert result.node_states[ran] == "succeeded" and result.node_states[skipped] == "skipped"
    # two agents in sequence each stream their own run
    assert agent_events(result.events, "triage")[-1] == "RunCompleted"
    assert agent_events(result.events, ran)[-1] == "RunCompleted"
    assert agent_events(result.events, skipped) == []
    assert message in result.output(ran, "output")["response"]


async def test_team_graph_shows_member_events_in_the_lead_node_stream(registry: Registry) -> None:
    result = await run_graph_local(example("agent_team"), registry, {"message": "owls"},
                                   session_id="g3")
    assert result.status == RunStatus.SUCCEEDED
    members = {(e.data or {}).get("agent") for e in result.events
               if e.node_id == "lead" and (e.data or {}).get("event") == "RunCompleted"}
    assert members == {"Researcher", "Writer"}
    # members are structural: they never run as flow nodes of their own
    assert "researcher" not in result.node_states or result.node_states["researcher"] != "succeeded"


async def test_history_accumulates_over_three_turns_of_one_session(registry: Registry) -> None:
    graph = example("agent_chat_tools")
    responses = []
    for turn in ("first", "second", "third"):
        result = await run_graph_local(graph, registry, {"message": turn}, session_id="hist-1")
        responses.append(result.output("assistant", "output")["response"])
    assert [("#1" in responses[0]), ("#2" in responses[1]), ("#3" in responses[2])] == [True] * 3
    assert "history: 2 earlier turns" in responses[2]
    other = await run_graph_local(graph, registry, {"message": "x"}, session_id="hist-2")
    assert "history: 0 earlier turns" in other.output("assistant", "output")["response"]


async def _paused_run(registry: Registry, runner: LocalRunner, session: str) -> str:
    result = await runner.run(example("agent_approval"), {"message": "use divide on 10 and 4"},
                              session_id=session)
    assert result.status == RunStatus.WAITING
    assert agent_events(result.events, "assistant")[-1] == "approval_requested"
    waiting = [e for e in result.events if e.event_type == "run_waiting"]
    assert waiting and "divide" in json.dumps(waiting[-1].data)
    return result.run_id


async def test_approval_pause_then_approve_finishes_the_run_with_the_tool_result(
        registry: Registry) -> None:
    runner = LocalRunner(registry)
    run_id = await _paused_run(registry, runner, "ap-1")
    dispatched: list[tuple[str, str]] = []

    async def dispatch(rid: str, node_id: str) -> None:
        dispatched.append((rid, node_id))

    node = await submit_approval(runner.store, run_id, None, Approval("approve"), dispatch=dispatch)
    assert dispatched == [(run_id, "assistant")] and node == "assistant"
    await runner._drive(run_id, [node])
    final = await runner.result(run_id)
    assert final.status == RunStatus.SUCCEEDED
    assert str(10 / 4) in final.output("assistant", "output")["response"]


async def test_approval_reject_finishes_the_run_without_running_the_tool(
        registry: Registry) -> None:
    runner = LocalRunner(registry)
    run_id = await _paused_run(registry, runner, "ap-2")
    final = await runner.resume(run_id, "assistant",
                                {"decision": "reject", "arguments": {}, "note": "no division"})
    assert final.status == RunStatus.SUCCEEDED
    response = final.output("assistant", "output")["response"]
    assert str(10 / 4) not in response and "no division" in response


async def test_approving_a_run_that_is_not_waiting_is_an_approval_error(
        registry: Registry) -> None:
    runner = LocalRunner(registry)
    result = await runner.run(example("agent_chat_tools"), {"message": "hi"}, session_id="ap-3")

    async def dispatch(rid: str, node_id: str) -> None:
        raise AssertionError("must not dispatch")

    with pytest.raises(ApprovalError, match="not waiting"):
        await submit_approval(runner.store, result.run_id, None, Approval("approve"), dispatch=dispatch)


async def test_a_failing_model_fails_the_agent_node_and_the_run(registry: Registry) -> None:
    graph = example("agent_chat_tools")
    graph["nodes"][1]["data"]["script"] = [{"error": "rate limited"}]
    result = await run_graph_local(graph, registry, {"message": "hi"}, session_id="err-1")
    assert result.status == RunStatus.FAILED
    assert "rate limited" in json.dumps(result.error)


async def test_the_tool_error_example_answers_anyway_and_its_strict_setting_fails(
        registry: Registry) -> None:
    result = await run_graph_local(example("agent_tool_error"), registry,
                                   {"message": "divide 10 by four"}, session_id="te-1")
    assert result.status == RunStatus.SUCCEEDED
    assert result.output("assistant", "output")["response"].endswith("10 / 4 = 2.5")
    assert agent_events(result.events, "assistant").count("ToolError") == 1
    strict = example("agent_tool_error")
    strict["nodes"][1]["data"]["on_tool_error"] = "fail"
    failed = await run_graph_local(strict, registry, {"message": "divide 10 by four"},
                                   session_id="te-2")
    assert failed.status == RunStatus.FAILED
    assert "tool 'divide' failed (ValidationError)" in json.dumps(failed.error)
