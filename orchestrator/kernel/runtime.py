"""The runtime API executors see (``ctx.runtime``): graph navigation, link resolution
with a per-run artifact cache and cycle guard, a per-run key/value cache, and nested
sub-graph runs for container nodes."""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass
from typing import Any

from .environment import EventSink, Nested, StepEnvironment
from .errors import LinkCycleError, LinkResolutionError, OrchestratorError
from .expressions import Scope
from .graph import Edge, Graph
from .parameters import resolve_parameters_off_loop
from .protocol import EdgeView, FlowContext, NodeEvent, NodeView, SubgraphResult

# The chain of (node id, handle) being materialized in this task: a repeat is a cycle.
_LINK_PATH: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "link_path", default=()
)


def _edge_view(edge: Edge) -> EdgeView:
    return EdgeView(edge.id, edge.source, edge.source_handle, edge.target, edge.target_handle, edge.channel)


@dataclass(frozen=True, kw_only=True)
class RunFrame:
    """What is fixed for one run while its nodes execute: the graph, the run's input and
    session, and the host object its executors get (``FlowContext.host``)."""

    graph: Graph
    run_id: str
    run_input: Any = None
    session_id: str | None = None
    host: object = None


class GraphRuntime:
    """Implements ``protocol.RuntimeApi`` over one graph and one run."""

    def __init__(self, env: StepEnvironment, run: RunFrame, *, node_id: str, scope: Scope,
                 sink: EventSink) -> None:
        self.env = env
        self.run = run
        self.graph = run.graph
        self.registry = env.registry
        self.run_id = run.run_id
        self.node_id = node_id  # the node whose step owns this runtime
        self.artifacts = env.artifacts
        self.scope = scope
        self.sink = sink

    # -- navigation -------------------------------------------------------------------

    def get_node(self, node_id: str) -> NodeView:
        node = self.graph.node_by_id[node_id]
        return NodeView(node.id, node.type, node.name, dict(node.data))

    def incoming_edges(
        self, node_id: str, *, channel: str | None = None, target_handle: str | None = None
    ) -> list[EdgeView]:
        return [
            _edge_view(e) for e in self.graph.incoming(node_id, channel)
            if target_handle is None or e.target_handle == target_handle
        ]

    def outgoing_edges(
        self, node_id: str, *, channel: str | None = None, source_handle: str | None = None
    ) -> list[EdgeView]:
        return [
            _edge_view(e) for e in self.graph.outgoing(node_id, channel)
            if source_handle is None or e.source_handle == source_handle
        ]

    # -- contexts ---------------------------------------------------------------------

    def context_for(self, node_id: str, *, attempt: int = 1, **extra: Any) -> FlowContext:
        node = self.graph.node_by_id[node_id]

        async def emit(event_type: str, data: dict[str, Any] | None = None) -> None:
            await self.sink(NodeEvent(
                run_id=self.run_id, node_id=node.id, node_type=node.type, node_name=node.name,
                event_type=event_type, data=data, attempt=attempt,
            ))

        return FlowContext(
            run_id=self.run_id, node_id=node.id, node_type=node.type, node_name=node.name,
            runtime=self, emit=emit, run_input=self.run.run_input, session_id=self.run.session_id,
            attempt=attempt, host=self.run.host, settings=self.graph.settings_data(node.id),
            expression_limits=self.scope.limits, expression_spending=self.scope.spending,
            usage_check=self.env.options.usage_check, **extra,
        )

    # -- links --------------------------------------------------------------------------

    async def resolve_links(self, node_id: str, target_handle: str) -> list[Any]:
        edges = [e for e in self.graph.incoming(node_id, "link") if e.target_handle == target_handle]
        return [await self._materialize(e.source, e.source_handle) for e in edges]

    async def _materialize(self, source_id: str, handle: str) -> Any:
        key = (source_id, handle)
        path = _LINK_PATH.get()
        if key in path:
            names = [self.graph.node_by_id[n].name for n, _ in (*path[path.index(key):], key)]
            raise LinkCycleError(
                "link cycle: " + " -> ".join(names), graph_id=self.graph.id, node_id=source_id,
                run_id=self.run_id, handle=handle, path=names,
            )
        cache = self.artifacts.for_run(self.run_id)
        cache_key = ("link", source_id, handle)
        if cache_key in cache:
            fut: asyncio.Future[Any] = cache[cache_key]
            return await asyncio.shield(fut)
        fut = asyncio.get_running_loop().create_future()
        cache[cache_key] = fut
        token = _LINK_PATH.set((*path, key))
        try:
            value = await self._materialize_uncached(source_id, handle)
        except BaseException as exc:
            cache.pop(cache_key, None)
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: waiters re-raise their own copy
            raise
        finally:
            _LINK_PATH.reset(token)
        fut.set_result(value)
        return value

    async def _materialize_uncached(self, source_id: str, handle: str) -> Any:
        node = self.graph.node_by_id[source_id]
        node_type = self.registry.get(node.type, graph_id=self.graph.id, node_id=node.id)
        materialize = getattr(node_type.executor, "materialize", None)
        if materialize is None:
            raise LinkResolutionError(
                f"node {node.name!r} of type {node.type!r} cannot be linked: it has no materialize",
                graph_id=self.graph.id, node_id=node.id, node_name=node.name, run_id=self.run_id, handle=handle,
            )
        wires: dict[str, tuple[Any, str]] = {}
        for param in node_type.definition.parameters:
            if param.socket is not None and param.socket.channel == "link":
                values = await self.resolve_links(node.id, param.id)
                source_socket = self.source_socket(node.id, param.id)
                if values:
                    wires[param.id] = (values[0], source_socket)
        data = await resolve_parameters_off_loop(node, node_type.definition, wires, self.scope)
        ctx = self.context_for(node.id)
        try:
            return await materialize(data, handle, ctx)
        except OrchestratorError:
            raise
        except Exception as exc:
            raise LinkResolutionError(
                f"materialize of node {node.name!r} ({node.type}) failed: {type(exc).__name__}: {exc}",
                graph_id=self.graph.id, node_id=node.id, node_name=node.name, run_id=self.run_id, handle=handle,
            ) from exc

    def source_socket(self, node_id: str, handle: str) -> str:
        for edge in self.graph.incoming(node_id):
            if edge.target_handle == handle:
                source = self.graph.node_by_id[edge.source]
                port = self.registry.get(source.type).definition.output_port(edge.source_handle)
                return port.socket if port else "any"
        return "any"

    # -- caches -----------------------------------------------------------------------

    def cache_get(self, namespace: str, key: str) -> Any | None:
        return self.artifacts.for_run(self.run_id).get(("kv", namespace, key))

    def cache_set(self, namespace: str, key: str, value: Any) -> None:
        self.artifacts.for_run(self.run_id)[("kv", namespace, key)] = value

    # -- nested graphs ------------------------------------------------------------------

    async def run_subgraph(self, graph: dict[str, Any], run_input: Any, *, label: str | None = None) -> SubgraphResult:
        label = label or "subgraph"
        outer_sink = self.sink
        outer = self.graph.node_by_id[self.node_id]

        async def forward(event: NodeEvent) -> None:
            if not event.node_id:
                return  # the nested run's own run-level events stay inside
            data = dict(event.data or {})
            data.update({
                "subgraph": label, "inner_node_id": event.node_id,
                "inner_node_name": event.node_name, "inner_node_type": event.node_type,
            })
            await outer_sink(NodeEvent(
                run_id=self.run_id, node_id=outer.id, node_type=outer.type, node_name=outer.name,
                event_type=event.event_type, data=data, attempt=event.attempt,
            ))

        if self.env.subgraphs is None:
            raise OrchestratorError(f"node {outer.name!r}: this host runs no nested graphs", run_id=self.run_id,
                                    node_id=outer.id, node_name=outer.name)
        return await self.env.subgraphs(self.env, Nested(
            graph=graph, run_input=run_input, run_id=f"{self.run_id}/{label}", session_id=self.run.session_id,
            host=self.run.host, on_event=forward))
