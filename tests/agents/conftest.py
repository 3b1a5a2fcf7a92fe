"""Fixtures for the agent and AI node tests: a fake FlowContext and node loading."""

from __future__ import annotations

import importlib.util
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext, NodeEvent
from orchestrator.settings import get_settings
from tests.support import host_from

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def load_executor(rel: str) -> Any:
    """Import ``nodes/<rel>/executor.py`` by file path, as the plugin loader does."""
    path = ROOT / "nodes" / rel / "executor.py"
    spec = importlib.util.spec_from_file_location(f"test_nodes_{rel.replace('/', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.executor


class FakeRuntime:
    """resolve_links returns what a test put under (node_id, handle); empty otherwise."""

    def __init__(self, links: dict[tuple[str, str], list[Any]] | None = None) -> None:
        self.links = links or {}

    async def resolve_links(self, node_id: str, target_handle: str) -> list[Any]:
        value = self.links.get((node_id, target_handle), [])
        if callable(value):
            return list(await value())
        return list(value)


def make_ctx(node_id: str = "a1", *, name: str = "Helper", node_type: str = "agent",
             links: dict[tuple[str, str], Any] | None = None, session_id: str | None = "s1",
             run_id: str = "r1", services: dict[str, Any] | None = None,
             resume: dict[str, Any] | None = None) -> FlowContext:
    emitted: list[NodeEvent] = []

    async def emit(event_type: str, data: dict[str, Any] | None) -> None:
        emitted.append(ctx.event(event_type, data))

    ctx = FlowContext(run_id=run_id, node_id=node_id, node_type=node_type, node_name=name,
                      runtime=FakeRuntime(links),  # type: ignore[arg-type]
                      emit=emit, session_id=session_id, host=host_from(services), resume=resume)
    return ctx


async def drain(gen: AsyncIterator[NodeEvent | ExecutionResult] | Any
                ) -> tuple[list[NodeEvent], ExecutionResult]:
    """Run a streaming execute to its end: (events, result)."""
    events: list[NodeEvent] = []
    result: ExecutionResult | None = None
    if isinstance(gen, ExecutionResult):
        return events, gen
    async for item in gen:
        if isinstance(item, ExecutionResult):
            result = item
        else:
            events.append(item)
    assert result is not None, "execute ended without an ExecutionResult"
    return events, result


def agno_events(events: list[NodeEvent]) -> list[str]:
    return [str((e.data or {}).get("event")) for e in events if e.event_type == "agent_event"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def data_in(value: Any) -> dict[str, DataValue]:
    return {"input": DataValue("data", value)}


@pytest.fixture
def executors() -> Callable[[str], Any]:
    return load_executor


@pytest.fixture
def allow_python(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The operator allows this interpreter as a stdio MCP command, and arguments naming
    files in this folder (the test servers) are shown to it."""
    monkeypatch.setenv("ORCH_MCP_STDIO_COMMANDS", sys.executable)
    monkeypatch.setenv("ORCH_MCP_STDIO_ARG_ROOTS", str(HERE))
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


async def call_tool(tools: Any, name: str, args: dict[str, Any]) -> str:
    """Run an agent (dry-run model, a session of its own) whose tools are ``tools`` and
    that calls tool ``name`` once with ``args``; the tool's result, as the agent answered it."""
    agent = load_executor("agents/agent")
    ctx = make_ctx(links={("a1", "tools"): [tools]}, session_id=f"mcp-{uuid.uuid4().hex}")
    script = [{"call": name, "args": args}, {"say": "{tool_result}"}]
    _events, result = await drain(agent.execute(
        {"model": "dryrun:x", "prompt": f"call {name}", "script": script}, data_in({}), ctx))
    return str(result.outputs["output"].value["response"])
