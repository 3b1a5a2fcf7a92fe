"""Run a whole graph in this process through the real step function.

Used by tests, by ``RuntimeApi.run_subgraph`` (container nodes) and anywhere a graph
must run without workers. Ready nodes run concurrently as asyncio tasks; scheduling,
skips and events are exactly those of a distributed run (same step, same transition).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from .compile import compile_run
from .environment import ArtifactCache, Nested, StepEnvironment, StepOptions
from .memory import MemoryStore
from .protocol import DataValue, NodeEvent, SubgraphResult
from .registry import Registry
from .step import main_output, run_step
from .store import NodeStatus, RunRecord, RunStatus
from .validation import validate_graph


@dataclass
class LocalRunResult:
    run_id: str
    status: str
    outputs: dict[str, dict[str, DataValue]]
    node_states: dict[str, str]
    events: list[NodeEvent] = field(default_factory=list)
    error: dict[str, Any] | None = None
    sinks: list[DataValue] = field(default_factory=list)  # main outputs of nodes with no flow successor

    def output(self, node_id: str, port: str | None = None) -> Any:
        """A node's value on ``port`` (default: its only/first port)."""
        ports = self.outputs.get(node_id, {})
        if port is None:
            return next(iter(ports.values())).value if ports else None
        value = ports.get(port)
        return value.value if value is not None else None

    def as_subgraph_result(self) -> SubgraphResult:
        status = "succeeded" if self.status == RunStatus.SUCCEEDED else "failed"
        return SubgraphResult(status=status, outputs=self.outputs, sink_outputs=self.sinks, error=self.error)


class LocalRunner:
    def __init__(
        self,
        registry: Registry,
        *,
        store: MemoryStore | None = None,
        host: object = None,
        artifacts: ArtifactCache | None = None,
        options: StepOptions | None = None,
    ) -> None:
        """``store`` defaults to a new ``MemoryStore()`` (give ``MemoryStore(on_event=...)``
        to see every run's events); ``host`` is what executors get as ``ctx.host``."""
        self.registry = registry
        self.store = store or MemoryStore()
        self.host = host
        self.env = StepEnvironment(store=self.store, registry=registry, worker_id="local",
                                   options=options or StepOptions(), artifacts=artifacts or ArtifactCache(),
                                   host_for=None if host is None else self._host, subgraphs=run_nested)
        self._graphs: dict[str, Any] = {}

    def _host(self, run_id: str, workspace: str | None) -> object:
        return self.host

    async def run(
        self,
        graph: dict[str, Any],
        run_input: Any = None,
        *,
        run_id: str | None = None,
        start: list[str] | None = None,
        session_id: str | None = None,
    ) -> LocalRunResult:
        """Validate, plan and run ``graph`` to its end; its events go to the store's
        callbacks (``MemoryStore(on_event=...)``, or ``store.subscribe`` for one run)."""
        vg = validate_graph(graph, self.registry, self.env.options.graph_limits)
        run_id = run_id or uuid.uuid4().hex
        plan = compile_run(vg, run_id, start)
        self._graphs[run_id] = vg
        await self.store.create_run(plan, RunRecord(run_id=run_id, status=RunStatus.QUEUED, graph_id=vg.graph.id,
                                                    graph_version=vg.graph.version, run_input=run_input,
                                                    session_id=session_id))
        await self.store.mark_dispatched(run_id, plan.start)
        await self._drive(run_id, plan.start)
        return await self.result(run_id)

    async def resume(self, run_id: str, node_id: str, resume_input: Any) -> LocalRunResult:
        """Resume a waiting node (e.g. after an approval) and run the rest."""
        if await self.store.resume_node(run_id, node_id, resume_input):
            await self.store.mark_dispatched(run_id, [node_id])
            await self._drive(run_id, [node_id])
        return await self.result(run_id)

    async def _drive(self, run_id: str, first: list[str]) -> None:
        tasks: set[asyncio.Task[list[str]]] = set()

        def launch(node_ids: list[str]) -> None:
            for node_id in node_ids:
                tasks.add(asyncio.ensure_future(self._step(run_id, node_id)))

        launch(first)
        while tasks:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                tasks.discard(task)
                ready = task.result()
                if ready:
                    await self.store.mark_dispatched(run_id, ready)
                    launch(ready)

    async def _step(self, run_id: str, node_id: str) -> list[str]:
        while True:
            outcome = await run_step(self.env, run_id, node_id)
            if outcome.retry_in_s is None:
                return outcome.ready
            # A scheduled retry: in process there is no slot to free, only this task to pause.
            await asyncio.sleep(outcome.retry_in_s)

    async def result(self, run_id: str) -> LocalRunResult:
        record = await self.store.get_run(run_id)
        outputs = self.store.outputs(run_id)
        states = await self.store.node_states(run_id)
        vg = self._graphs[run_id]
        sinks = []
        for node in vg.graph.nodes:
            if states.get(node.id) not in (NodeStatus.SUCCEEDED, NodeStatus.FAILED) or node.id not in outputs:
                continue
            ran = (NodeStatus.SUCCEEDED, NodeStatus.FAILED)
            if any(states.get(e.target) in ran for e in vg.graph.outgoing(node.id, "flow")):
                continue
            sinks.append(DataValue("data", main_output(vg.definitions[node.id], outputs[node.id])))
        return LocalRunResult(run_id=run_id, status=record.status, outputs=outputs, node_states=states,
                              events=self.store.events(run_id), error=record.error, sinks=sinks)


async def run_graph_local(graph: dict[str, Any], registry: Registry, run_input: Any = None, *,
                          run_id: str | None = None, session_id: str | None = None) -> LocalRunResult:
    """Validate, plan and run ``graph`` in this process from its trigger; return its final
    state. For a host, an event callback, other start nodes or several runs, use a
    :class:`LocalRunner`."""
    runner = LocalRunner(registry)
    return await runner.run(graph, run_input, run_id=run_id, session_id=session_id)


async def run_nested(env: StepEnvironment, nested: Nested) -> SubgraphResult:
    """Run a nested graph (a container node's) in this process, with the outer run's
    registry, options, artifact cache and host: the ``SubgraphRunner`` of workers and of
    ``LocalRunner``."""
    runner = LocalRunner(env.registry, host=nested.host, artifacts=env.artifacts, options=env.options)
    runner.store.subscribe(nested.run_id, nested.on_event)
    result = await runner.run(nested.graph, nested.run_input, run_id=nested.run_id, session_id=nested.session_id)
    return result.as_subgraph_result()
