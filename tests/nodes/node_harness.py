"""Harness for node tests: the registry, a fake FlowContext and a fake runtime.

``make_ctx(...)`` builds a real ``FlowContext`` whose ``emit`` records events on
``ctx.runtime.emitted``, whose runtime is a :class:`FakeRuntime` and whose host is built
from ``services`` (``tests.support.host_from``). A test controls
``run_subgraph`` by passing ``subgraph=<async fn(graph, run_input, label)>``; by default
nested graphs run for real through the kernel's local runner.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.kernel.local import run_graph_local
from orchestrator.kernel.protocol import (
    DataValue,
    EdgeView,
    ExecutionResult,
    FlowContext,
    NodeEvent,
    NodeView,
    SubgraphResult,
)
from orchestrator.kernel.registry import Registry
from orchestrator.service.plugins import load_registry
from orchestrator.settings import load_settings
from tests.support import host_from

SubgraphFn = Callable[[dict[str, Any], Any, str | None], Awaitable[SubgraphResult]]

_REGISTRY: Registry | None = None


def registry() -> Registry:
    """The repo's node registry, loaded once per test session."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = load_registry(load_settings())
    return _REGISTRY


class FakeRuntime:
    """The RuntimeApi with nothing but ``run_subgraph`` and a cache; records subgraph calls."""

    def __init__(self, subgraph: SubgraphFn | None = None) -> None:
        self.subgraph = subgraph
        self.calls: list[tuple[Any, str | None]] = []
        self.emitted: list[NodeEvent] = []
        self._cache: dict[tuple[str, str], Any] = {}

    def get_node(self, node_id: str) -> NodeView:
        raise KeyError(node_id)

    def incoming_edges(self, node_id: str, *, channel: str | None = None,
                       target_handle: str | None = None) -> list[EdgeView]:
        return []

    def outgoing_edges(self, node_id: str, *, channel: str | None = None,
                       source_handle: str | None = None) -> list[EdgeView]:
        return []

    async def resolve_links(self, node_id: str, target_handle: str) -> list[Any]:
        return []

    def cache_get(self, namespace: str, key: str) -> Any | None:
        return self._cache.get((namespace, key))

    def cache_set(self, namespace: str, key: str, value: Any) -> None:
        self._cache[(namespace, key)] = value

    async def run_subgraph(self, graph: dict[str, Any], run_input: Any, *,
                           label: str | None = None) -> SubgraphResult:
        self.calls.append((run_input, label))
        if self.subgraph is not None:
            return await self.subgraph(graph, run_input, label)
        done = await run_graph_local(graph, registry(), run_input)
        return done.as_subgraph_result()


def make_ctx(*, node_type: str = "node", node_name: str = "Node", run_input: Any = None,
             session_id: str | None = None, subgraph: SubgraphFn | None = None,
             services: dict[str, Any] | None = None,
             resume: dict[str, Any] | None = None) -> FlowContext:
    runtime = FakeRuntime(subgraph)
    ctx: FlowContext

    async def emit(event_type: str, data: dict[str, Any] | None) -> None:
        runtime.emitted.append(ctx.event(event_type, data))

    ctx = FlowContext(
        run_id="run-test", node_id="n1", node_type=node_type, node_name=node_name,
        runtime=runtime, emit=emit, run_input=run_input, session_id=session_id, host=host_from(services),
        resume=resume,
    )
    return ctx


async def run_node(node_type: str, data: dict[str, Any], inputs: dict[str, Any] | None = None,
                   **ctx_kw: Any) -> ExecutionResult:
    """Run one node type's executor with the declared defaults filled in, like the kernel does.

    ``inputs`` maps port -> plain JSON value (wrapped as DataValue("data", ...)).
    """
    entry = registry().get(node_type)
    resolved = {p.id: p.default for p in entry.definition.parameters}
    resolved.update(data)
    ctx = make_ctx(node_type=node_type, **ctx_kw)
    wrapped = {port: DataValue(type="data", value=v) for port, v in (inputs or {}).items()}
    out = entry.executor.execute(resolved, wrapped, ctx)  # type: ignore[attr-defined]
    if hasattr(out, "__aiter__"):
        final: ExecutionResult | None = None
        async for item in out:
            if isinstance(item, ExecutionResult):
                final = item
        assert final is not None, f"{node_type} streamed no ExecutionResult"
        return final
    if inspect.isawaitable(out):
        out = await out
    assert isinstance(out, ExecutionResult)
    return out


def values(result: ExecutionResult) -> dict[str, Any]:
    """port -> plain value of an ExecutionResult."""
    return {port: dv.value for port, dv in result.outputs.items()}
