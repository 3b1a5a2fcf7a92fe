"""Approvals on real workers: a tool that needs approval parks the run, holding no worker,
until a decision resumes it on whichever worker picks it up, or its deadline passes."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.store import RunStatus
from orchestrator.service.approvals import Approval, ApprovalError, submit_approval
from orchestrator.service.runs import RunRequest, start_run
from tests.integration.conftest import collect, read_until, wait_for_terminal

pytestmark = pytest.mark.integration

A, B = 10, 4  # the agent asks to divide A by B
QUOTIENT = str(A / B)


def approval_graph() -> dict[str, Any]:
    script = [{"call": "divide", "args": {"a": A, "b": B}},
              {"say": "Result: {tool_result}"}]
    return {
        "id": "agents_approval",
        "name": "Division needs approval",
        "nodes": [
            {"id": "chat", "type": "chat_start", "name": "Chat", "data": {}},
            {"id": "assistant", "type": "agent", "name": "Assistant", "data": {
                "model": "dryrun:approval", "script": script, "prompt": "{{ input.message }}"}},
            {"id": "calc", "type": "toolset", "name": "Calculator", "data": {
                "toolkits": ["calculator"], "requires_approval": ["divide"]}},
        ],
        "edges": [
            {"id": "e1", "source": "chat", "sourceHandle": "output", "target": "assistant",
             "targetHandle": "input", "data": {"channel": "flow"}},
            {"id": "e2", "source": "calc", "sourceHandle": "tools", "target": "assistant",
             "targetHandle": "tools", "data": {"channel": "link"}},
        ],
    }


def quick_graph() -> dict[str, Any]:
    return {
        "id": "agents_quick",
        "name": "One quick answer",
        "nodes": [
            {"id": "chat", "type": "chat_start", "name": "Chat", "data": {}},
            {"id": "assistant", "type": "agent", "name": "Quick", "data": {
                "model": "dryrun:quick", "history": False, "prompt": "{{ input.message }}"}},
        ],
        "edges": [{"id": "e1", "source": "chat", "sourceHandle": "output",
                   "target": "assistant", "targetHandle": "input",
                   "data": {"channel": "flow"}}],
    }


async def wait_for_event(store: Any, run_id: str, wanted: Callable[[NodeEvent], bool]
                         ) -> list[NodeEvent]:
    """The run's events up to the first one ``wanted`` accepts."""
    return [e for _, e in await read_until(store, run_id, wanted)]


def agno_events(events: list[NodeEvent], node_id: str) -> list[dict[str, Any]]:
    return [e.data or {} for e in events
            if e.node_id == node_id and e.event_type == EventType.AGENT_EVENT]


@pytest.fixture
def dispatch(celery: Any) -> Callable[[str, str], None]:
    from orchestrator.queue.dispatch import make_dispatch

    send = make_dispatch(celery)
    return lambda run_id, node_id: send(run_id, [node_id])


@pytest.fixture
def paused_run(workers: Any, store: Any, registry: Registry, celery: Any) -> Any:
    """``await paused_run(**start_run_kw)`` -> the id of a run waiting for an approval."""
    from orchestrator.queue.dispatch import make_dispatch

    async def start(**kw: Any) -> str:
        run_id = await start_run(store, registry, approval_graph(),
                                 RunRequest({"message": "divide"}, session_id=f"ap-{uuid.uuid4().hex[:8]}", **kw),
                                 dispatch=make_dispatch(celery))
        events = await wait_for_event(store, run_id,
                                      lambda e: e.event_type == EventType.RUN_WAITING)
        assert (await store.get_run(run_id)).status == RunStatus.WAITING
        asked = agno_events(events, "assistant")[-1]
        assert asked["event"] == "approval_requested"
        assert [t["tool_name"] for t in asked["tool_calls"]] == ["divide"]
        assert asked["tool_calls"][0]["tool_args"] == {"a": A, "b": B}
        return run_id

    return start


async def test_a_waiting_run_holds_no_worker_and_approval_runs_the_tool(
        paused_run: Any, run_graph: Any, store: Any, dispatch: Any) -> None:
    run_id = await paused_run()
    # While it waits, every worker process is free: other runs come and go.
    others = await asyncio.gather(*(run_graph(quick_graph(), {"message": f"other {i}"})
                                    for i in range(4)))
    assert [o.status for o in others] == ["succeeded"] * 4
    assert (await store.get_run(run_id)).status == RunStatus.WAITING

    node = await submit_approval(store, run_id, None, Approval("approve"), dispatch=dispatch)
    assert node == "assistant"
    result = await collect(store, run_id, await wait_for_terminal(store, run_id))
    assert result.status == "succeeded"
    assert QUOTIENT in result.output("assistant")["response"]
    resumed = [d for _, e in result.events for d in [e.data or {}]
               if e.node_id == "assistant" and e.event_type == EventType.STARTED
               and d.get("resumed")]
    assert resumed, "the resumed node did not say so"
    completed = [d for d in agno_events([e for _, e in result.events], "assistant")
                 if d["event"] == "ToolCallCompleted"]
    assert [d["tool"]["result"] for d in completed] == [QUOTIENT]


async def test_rejection_resumes_the_run_without_running_the_tool(
        paused_run: Any, store: Any, dispatch: Any) -> None:
    run_id = await paused_run()
    await submit_approval(store, run_id, "assistant", Approval("reject", note="no dividing today"),
                          dispatch=dispatch)
    result = await collect(store, run_id, await wait_for_terminal(store, run_id))
    assert result.status == "succeeded"
    answer = result.output("assistant")["response"]
    assert QUOTIENT not in answer and "no dividing today" in answer
    events = agno_events([e for _, e in result.events], "assistant")
    assert QUOTIENT not in json.dumps(events)


async def test_a_waiting_run_past_its_deadline_is_timed_out_by_the_sweeper(
        paused_run: Any, store: Any, dispatch: Any) -> None:
    from orchestrator.service.sweeper import Sweeper

    deadline_s = 3600.0
    run_id = await paused_run(deadline_s=deadline_s)
    sweeper = Sweeper(store, lambda rid, nodes: None, store.settings)
    early = await sweeper.sweep_once()
    assert run_id not in early.timed_out
    late = await sweeper.sweep_once(now=time.time() + 2 * deadline_s)
    assert run_id in late.timed_out
    record = await store.get_run(run_id)
    assert record.status == RunStatus.TIMED_OUT
    with pytest.raises(ApprovalError, match="not waiting"):
        await submit_approval(store, run_id, None, Approval("approve"), dispatch=dispatch)
