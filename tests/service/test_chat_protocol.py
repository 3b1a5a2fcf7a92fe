"""Node events map to the chat events a front end renders."""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.protocol import NodeEvent
from orchestrator.service.chat_protocol import to_chat_events


def ev(event_type: str, data: dict[str, Any] | None = None, node_id: str = "a1") -> NodeEvent:
    return NodeEvent(run_id="r1", node_id=node_id, node_type="agent", event_type=event_type,
                     data=data, node_name="Helper")


def types(event: NodeEvent) -> list[str]:
    return [c["type"] for c in to_chat_events(event)]


def test_content_deltas_become_content_events() -> None:
    chat = to_chat_events(ev("agent_event", {"event": "RunContent", "content": "Hi", "agent": "A"}))
    assert chat[0]["type"] == "content" and chat[0]["delta"] == "Hi" and chat[0]["node_id"] == "a1"
    assert types(ev("agent_event", {"event": "TeamRunContent", "content": "x"})) == ["content"]
    assert types(ev("progress", {"token": "tok"})) == ["content"]


def test_reasoning_deltas_become_reasoning_events() -> None:
    assert types(ev("agent_event", {"event": "RunContent", "reasoning_content": "hmm"})) == [
        "reasoning"]
    assert types(ev("agent_event", {"event": "ReasoningContentDelta",
                                    "reasoning_content": "so"})) == ["reasoning"]


def test_tool_calls_carry_name_args_and_result() -> None:
    tool = {"tool_name": "add", "tool_args": {"a": 1}, "result": "2"}
    started = to_chat_events(ev("agent_event", {"event": "ToolCallStarted", "tool": tool}))[0]
    done = to_chat_events(ev("agent_event", {"event": "TeamToolCallCompleted", "tool": tool}))[0]
    assert (started["type"], started["name"], started["args"]) == ("tool_call_started", "add",
                                                                  {"a": 1})
    assert (done["type"], done["result"], done["error"]) == ("tool_call_completed", "2", False)


def test_member_runs_are_reported_as_member_events() -> None:
    data = {"event": "RunStarted", "agent": "Writer", "parent_run_id": "r1:a1"}
    assert to_chat_events(ev("agent_event", data))[0] == {
        "type": "member_run_started", "member": "Writer", "run_id": "r1", "node_id": "a1",
        "node_name": "Helper"}
    assert types(ev("agent_event", {**data, "event": "RunCompleted"})) == ["member_run_completed"]
    assert types(ev("agent_event", {"event": "RunStarted", "agent": "Top"})) == []


def test_flow_and_run_level_events() -> None:
    assert to_chat_events(ev("started"))[0]["status"] == "started"
    assert to_chat_events(ev("completed"))[0]["status"] == "completed"
    assert types(ev("run_completed", node_id="")) == ["run_completed"]
    assert types(ev("run_failed", {"error": {"message": "x"}}, node_id="")) == ["run_error"]
    assert types(ev("agent_event", {"event": "RunError", "content": "boom"})) == ["run_error"]
    assert types(ev("agent_event", {"event": "approval_requested", "requirements": []})) == [
        "approval_requested"]
    assert types(ev("agent_event", {"event": "ModelRequestStarted"})) == []


def test_a_wait_for_a_form_asks_the_chat_for_it_with_where_to_answer() -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    waiting = ev("run_waiting", {"node_id": "w", "payload": {"wait": {
        "kind": "form", "message": "Ship it?", "schema": schema}}}, node_id="")
    form, run_waiting = to_chat_events(waiting)
    assert form == {"type": "form_requested", "node_id": "w", "message": "Ship it?",
                    "schema": schema, "answer_url": "/runs/r1/waits/w/form", "run_id": "r1",
                    "node_name": "Helper"}
    assert run_waiting["type"] == "run_waiting"
    url_wait = ev("run_waiting", {"node_id": "w", "payload": {"wait": {"kind": "url", "message": ""}}},
                  node_id="")
    assert types(url_wait) == ["wait_requested", "run_waiting"]
    timer = ev("run_waiting", {"node_id": "w", "payload": {"wait": {"kind": "time"}}}, node_id="")
    assert types(timer) == ["run_waiting"]


def test_a_tool_error_becomes_a_tool_error_chat_event() -> None:
    chat = to_chat_events(ev("agent_event", {
        "event": "ToolError", "agent": "Helper", "tool": "divide", "kind": "ValueError",
        "message": "no", "count": 1, "returned_to_model": True}))
    assert chat[0]["type"] == "tool_error" and chat[0]["name"] == "divide"
    assert chat[0]["kind"] == "ValueError" and chat[0]["returned_to_model"] is True
