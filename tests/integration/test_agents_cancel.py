"""Cancelling a streaming agent: on real workers through the run's status, and in one
process where the node's task is cancelled (what the kernel does once the run ended)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.store import NodeStatus, RunStatus
from orchestrator.service.runs import RunRequest, start_run
from tests.agents.conftest import data_in, load_executor, make_ctx
from tests.integration.conftest import RUN_TIMEOUT_S, read_until

WORDS = 200
DELAY_S = 0.05  # per streamed word: the whole answer would take WORDS * DELAY_S
LATE_S = 1.0  # the agent must be stopped this long after the cancel
LONG_ANSWER = " ".join(f"w{i}" for i in range(WORDS))
ECHO_SERVER = Path(__file__).resolve().parents[1] / "agents" / "mcp_echo_server.py"
AGENT = load_executor("agents/agent")


def slow_agent_graph() -> dict[str, Any]:
    return {
        "id": "agents_cancel",
        "name": "A long streamed answer",
        "nodes": [
            {"id": "chat", "type": "chat_start", "name": "Chat", "data": {}},
            {"id": "talker", "type": "agent", "name": "Talker", "data": {
                "model": "dryrun:slow", "history": False, "prompt": "{{ input.message }}",
                "script": [{"say": LONG_ANSWER, "delay_s": DELAY_S}]}},
        ],
        "edges": [{"id": "e1", "source": "chat", "sourceHandle": "output", "target": "talker",
                   "targetHandle": "input", "data": {"channel": "flow"}}],
    }


def is_content(event: NodeEvent) -> bool:
    data = event.data or {}
    return event.event_type == EventType.AGENT_EVENT and data.get("event") == "RunContent" \
        and bool(data.get("content"))


async def events_until(store: Any, run_id: str, done: Any) -> list[NodeEvent]:
    """Read the run's events until ``done(event)``; every event read, in order."""
    return [e for _, e in await read_until(store, run_id, done)]


@pytest.mark.integration
async def test_a_cancelled_run_stops_its_streaming_agent_within_a_second(
        workers: Any, store: Any, registry: Registry, celery: Any,
        sync_redis: redis.Redis) -> None:
    from orchestrator.queue.dispatch import make_dispatch

    run_id = await start_run(store, registry, slow_agent_graph(),
                             RunRequest({"message": "talk"}, session_id=f"cancel-{uuid.uuid4().hex[:8]}"),
                             dispatch=make_dispatch(celery))
    await events_until(store, run_id, is_content)
    assert await store.finish_run(run_id, RunStatus.CANCELLED)
    # the node ends with the run, at once, with its event
    assert (await store.node_states(run_id))["talker"] == NodeStatus.CANCELLED
    events = await events_until(
        store, run_id, lambda e: e.event_type == EventType.RUN_CANCELLED and not e.node_id)
    ended = [e.data for e in events if e.node_id == "talker" and e.event_type == EventType.CANCELLED]
    assert ended == [{"reason": "cancelled"}]
    # the worker notices and stops the agent: Agno's stored run (the session history) says
    # cancelled, within a poll and a second
    key = f"orc:agno:runs:{run_id}:talker"
    stored: dict[str, Any] = {}
    deadline = asyncio.get_running_loop().time() + LATE_S + 1.0
    while asyncio.get_running_loop().time() < deadline:
        raw = sync_redis.get(key)
        stored = json.loads(raw) if raw else {}
        if str(stored.get("status", "")).lower() == "cancelled":
            break
        await asyncio.sleep(0.05)
    assert str(stored.get("status", "")).lower() == "cancelled", stored
    content = [e for e in events if is_content(e)]
    streamed = "".join(str((e.data or {})["content"]) for e in content)
    assert 0 < len(streamed) < len(LONG_ANSWER)
    # nothing of the node lands after its end: no second terminal event, no late content
    after = [e for _, e in await store.read_events(run_id)][len(events):]
    assert after == []
    assert (await store.get_run(run_id)).status == RunStatus.CANCELLED
    assert (await store.node_states(run_id))["talker"] == NodeStatus.CANCELLED


def server_pids(script: Path) -> list[int]:
    """Live child processes of this process running ``script``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and str(script) in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def told(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run ids Agno was asked to cancel (the real cancel still happens)."""
    from agno.agent import Agent

    calls: list[str] = []
    real_cancel = Agent.acancel_run

    async def spy(run_id: str) -> bool:
        calls.append(run_id)
        return await real_cancel(run_id)

    monkeypatch.setattr(Agent, "acancel_run", staticmethod(spy))
    return calls


async def until(check: Any, attempts: int = 50) -> bool:
    for _ in range(attempts):
        if check():
            return True
        await asyncio.sleep(0.1)
    return bool(check())


async def test_cancelling_the_agent_task_tells_agno_and_closes_its_mcp_server(
        told: list[str]) -> None:
    from agno.run.cancel import get_active_runs
    from agno.tools.mcp import MCPTools

    mcp = MCPTools(command=f"{sys.executable} {ECHO_SERVER}", transport="stdio",
                   timeout_seconds=30)
    run_id = f"local-{uuid.uuid4().hex[:8]}"
    ctx = make_ctx(run_id=run_id, session_id=run_id, links={("a1", "tools"): [mcp]})
    script = [{"call": "echo", "args": {"text": "ping"}},
              {"say": LONG_ANSWER, "delay_s": DELAY_S}]
    seen: list[NodeEvent] = []
    streaming = asyncio.Event()

    async def consume() -> None:
        async for item in AGENT.execute({"model": "dryrun:x", "script": script,
                                         "history": False}, data_in({"message": "hi"}), ctx):
            if isinstance(item, NodeEvent):
                seen.append(item)
                if is_content(item):
                    streaming.set()

    task = asyncio.ensure_future(consume())
    await asyncio.wait_for(streaming.wait(), RUN_TIMEOUT_S)
    assert server_pids(ECHO_SERVER), "the MCP server is not running while the agent streams"
    assert any((e.data or {}).get("event") == "ToolCallCompleted" for e in seen)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task  # ends once Agno has ended the run and closed what it opened
    assert told == [f"{run_id}:a1"]
    assert not mcp.initialized and mcp.session is None, "the MCP toolkit is still open"
    assert await until(lambda: not server_pids(ECHO_SERVER)), "the MCP server still runs"
    assert f"{run_id}:a1" not in get_active_runs()  # Agno's cancel record was cleaned up


async def test_an_agent_whose_task_dies_while_handling_an_event_is_still_cancelled(
        told: list[str]) -> None:
    from agno.run.cancel import get_active_runs

    run_id = f"local-{uuid.uuid4().hex[:8]}"
    ctx = make_ctx(run_id=run_id, session_id=run_id)
    agno_run = f"{run_id}:a1"
    stream = AGENT.execute({"model": "dryrun:x", "history": False,
                            "script": [{"say": LONG_ANSWER, "delay_s": DELAY_S}]},
                           data_in({"message": "hi"}), ctx)
    streaming = asyncio.Event()

    async def consume() -> None:
        async for item in stream:
            if isinstance(item, NodeEvent) and is_content(item):
                streaming.set()
                await asyncio.sleep(RUN_TIMEOUT_S)  # a slow event sink: cancelled here

    task = asyncio.ensure_future(consume())
    await asyncio.wait_for(streaming.wait(), RUN_TIMEOUT_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The stream was never closed (it is still referenced), yet its Agno run stops.
    assert await until(lambda: told == [agno_run] and agno_run not in get_active_runs())
    await stream.aclose()
    assert told == [agno_run]  # closing it later does not cancel again
