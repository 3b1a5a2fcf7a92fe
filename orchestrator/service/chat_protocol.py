"""Node events -> chat events: what a chat front end renders.

:func:`to_chat_events` is pure: one :class:`NodeEvent` in, zero or more chat events out
(plain JSON dicts, each with ``type``; the braces below list its other keys). Every chat
event also carries ``run_id``, ``node_id`` and ``node_name`` so a client can group them.

==============================================  =========================================
node event                                      chat event(s)
==============================================  =========================================
``started`` / ``completed`` / ``skipped`` /     ``flow_step`` {status}
``cancelled`` (running when its run ended)
``error``                                       ``flow_step`` {status: "error", error}
``progress`` with ``token``                     ``content`` {delta}
``progress`` with ``reasoning``                 ``reasoning`` {delta}
agent_event (Team)RunContent                    ``content`` {delta, agent, member}, and
                                                ``reasoning`` {delta} for reasoning_content
agent_event Reasoning* deltas / steps           ``reasoning`` {delta, agent}
agent_event (Team)ToolCallStarted               ``tool_call_started`` {name, args, agent}
agent_event (Team)ToolCallCompleted             ``tool_call_completed`` {name, args, result,
                                                error, agent}
agent_event RunStarted / RunCompleted of a      ``member_run_started`` /
member run (``parent_run_id`` set)              ``member_run_completed`` {member}
agent_event approval_requested                  ``approval_requested`` {requirements,
                                                tool_calls, agent}
agent_event ToolError (the tool-error policy)   ``tool_error`` {name, kind, message, count,
                                                returned_to_model, agent}
agent_event (Team)RunError                      ``run_error`` {error, agent}
``run_waiting``                                 ``run_waiting`` {payload}; for a Wait node
                                                waiting for a form, first ``form_requested``
                                                {message, schema, answer_url} (POST the data
                                                there), and for a resume URL ``wait_requested``
                                                {kind, message}
``run_completed``                               ``run_completed``
``run_failed`` / ``run_timed_out``              ``run_error`` {error, status}
``run_cancelled``                               ``run_cancelled``
anything else                                   nothing
==============================================  =========================================

Content from a member run is rendered as the member's (``agent`` = the member name), so a
client may show it nested or hide it.
"""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.protocol import EventType, NodeEvent

ChatEvent = dict[str, Any]

_FLOW_STATUS = {
    EventType.STARTED: "started",
    EventType.COMPLETED: "completed",
    EventType.SKIPPED: "skipped",
    EventType.CANCELLED: "cancelled",
    EventType.ERROR: "error",
}
_REASONING = frozenset({"ReasoningContentDelta", "ReasoningStep", "ReasoningDelta"})


def _agent_events(event: NodeEvent, data: dict[str, Any]) -> list[ChatEvent]:
    name = str(data.get("event", ""))
    kind = name.removeprefix("Team")
    agent = data.get("agent")
    member = bool(data.get("parent_run_id"))
    raw_tool = data.get("tool")
    tool: dict[str, Any] = raw_tool if isinstance(raw_tool, dict) else {}
    if kind == "RunContent":
        out: list[ChatEvent] = []
        if data.get("reasoning_content"):
            out.append({"type": "reasoning", "delta": data["reasoning_content"], "agent": agent})
        if data.get("content"):
            out.append({"type": "content", "delta": data["content"], "agent": agent,
                        "member": member})
        return out
    if kind in _REASONING:
        delta = data.get("reasoning_content") or data.get("content") or ""
        return [{"type": "reasoning", "delta": delta, "agent": agent}] if delta else []
    if kind == "ToolCallStarted":
        return [{"type": "tool_call_started", "name": tool.get("tool_name"),
                 "args": tool.get("tool_args"), "agent": agent}]
    if kind == "ToolCallCompleted":
        return [{"type": "tool_call_completed", "name": tool.get("tool_name"),
                 "args": tool.get("tool_args"), "result": tool.get("result"),
                 "error": bool(tool.get("tool_call_error")), "agent": agent}]
    if kind in ("RunStarted", "RunCompleted") and member and not name.startswith("Team"):
        status = "started" if kind == "RunStarted" else "completed"
        return [{"type": f"member_run_{status}", "member": agent}]
    if name == "approval_requested":
        return [{"type": "approval_requested", "requirements": data.get("requirements", []),
                 "tool_calls": data.get("tool_calls", []), "agent": agent}]
    if name == "ToolError":
        return [{"type": "tool_error", "name": data.get("tool"), "kind": data.get("kind"),
                 "message": data.get("message"), "count": data.get("count"),
                 "returned_to_model": data.get("returned_to_model"), "agent": agent}]
    if kind == "RunError":
        return [{"type": "run_error", "error": data.get("content") or data.get("error"),
                 "agent": agent}]
    return []


def _wait_events(event: NodeEvent, data: dict[str, Any]) -> list[ChatEvent]:
    """What a Wait node asks for (``nodes/flow/wait``: its suspend payload's ``wait``)."""
    payload = data.get("payload")
    wait = payload.get("wait") if isinstance(payload, dict) else None
    node_id = str(data.get("node_id") or "")
    if not isinstance(wait, dict) or not node_id or wait.get("kind") == "time":
        return []
    if wait.get("kind") == "form":
        return [{"type": "form_requested", "node_id": node_id, "message": wait.get("message"),
                 "schema": wait.get("schema"),
                 "answer_url": f"/runs/{event.run_id}/waits/{node_id}/form"}]
    return [{"type": "wait_requested", "node_id": node_id, "kind": wait.get("kind"),
             "message": wait.get("message")}]


def to_chat_events(event: NodeEvent) -> list[ChatEvent]:
    """The chat events one node event renders as (see the module table)."""
    data = event.data or {}
    kind = event.event_type
    out: list[ChatEvent]
    if kind in _FLOW_STATUS:
        out = [{"type": "flow_step", "status": _FLOW_STATUS[kind]}]
        if kind == EventType.ERROR:
            out[0]["error"] = data.get("error", data)
    elif kind == EventType.PROGRESS:
        out = []
        if data.get("reasoning"):
            out.append({"type": "reasoning", "delta": data["reasoning"]})
        if data.get("token"):
            out.append({"type": "content", "delta": data["token"]})
    elif kind == EventType.AGENT_EVENT:
        out = _agent_events(event, data)
    elif kind == EventType.RUN_WAITING:
        out = [*_wait_events(event, data), {"type": "run_waiting", "payload": data}]
    elif kind == EventType.RUN_COMPLETED:
        out = [{"type": "run_completed"}]
    elif kind in (EventType.RUN_FAILED, EventType.RUN_TIMED_OUT):
        out = [{"type": "run_error", "error": data.get("error", data), "status": kind}]
    elif kind == EventType.RUN_CANCELLED:
        out = [{"type": "run_cancelled"}]
    else:
        out = []
    for chat in out:
        chat.setdefault("run_id", event.run_id)
        chat.setdefault("node_id", event.node_id)
        chat.setdefault("node_name", event.node_name)
    return out
