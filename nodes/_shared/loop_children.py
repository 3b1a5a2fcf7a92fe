"""A Loop's iterations (``nodes/flow/loop``) as child runs: each body runs as distributed tasks on any worker.

On a worker (a host that runs child runs) every iteration of a Loop is a child run of
the inline ``body`` (``NodeHost.start_child``; ``orchestrator/service/children.py``), and
the Loop node suspends between them, holding no slot and no worker. Each time one of
its children ends the node is resumed: it collects every child that has ended since
(their node events are copied into the Loop's stream, labelled ``<Loop name>[i]`` as an
in-process body's are), starts the next items while fewer than ``concurrency`` run, and
suspends again. Progress lives in the suspend payload (``loop``: results so far, the
children running, the next item), so a lost worker re-runs only the body node it held
(the sweeper's lease recovery inside that child run), and a Loop re-run after a lost
worker finds the children it started (their run ids derive from run, node, attempt,
item).

for_each  results in item order; the first failed iteration cancels the running ones and
          fails the Loop naming its index (as in process).
until     one child at a time; each result feeds the next iteration; ``condition`` is
          evaluated after each as in process.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nodes._shared.conditions import evaluate_condition, make_scope
from orchestrator.host.children import CHILD_RUNS, ChildResult, ChildSpec, budget_error
from orchestrator.host.node_host import NodeHost, node_host
from orchestrator.kernel.errors import SuspendRequested
from orchestrator.kernel.protocol import FlowContext

SUCCEEDED = "succeeded"
STATE = "loop"  # the suspend payload's key for the loop's progress


def runs_children(ctx: FlowContext) -> bool:
    """Does this node's host run child runs (a worker), so iterations are distributed?"""
    return isinstance(ctx.host, NodeHost) and ctx.host.children is not None


def sink_value(result: ChildResult) -> Any:
    """An iteration's value as in process: its single sink's value, a list for several."""
    if not result.sinks:
        return None
    return result.sinks[0] if len(result.sinks) == 1 else result.sinks


class Progress:
    """What a distributed Loop knows between its executions (the suspend payload's ``loop``)."""

    def __init__(self, ctx: FlowContext) -> None:
        payload = (ctx.resume or {}).get("payload") or {}
        raw = payload.get(STATE) or {}
        if raw.get("attempt") != ctx.attempt:  # a retry starts over (the last attempt's resume stays stored)
            raw = {}
        self.done: dict[str, Any] = dict(raw.get("done") or {})
        self.running: dict[str, str] = dict(raw.get("running") or {})  # item index -> child run
        self.next: int = int(raw.get("next") or 0)
        self.current: Any = raw.get("current")  # until: the value the next iteration gets

    def suspend(self, ctx: FlowContext) -> SuspendRequested:
        waiting = ", ".join(f"{ctx.node_name}[{i}]" for i in sorted(self.running, key=int))
        return SuspendRequested(f"waiting for iterations {waiting}", payload={
            STATE: {"done": self.done, "running": self.running, "next": self.next, "current": self.current,
                    "attempt": ctx.attempt},
            CHILD_RUNS: list(self.running.values())})


class Iterations:
    """Starts and collects the child runs of one Loop node execution."""

    def __init__(self, body: dict[str, Any], ctx: FlowContext) -> None:
        self.body = body
        self.ctx = ctx
        self.host: NodeHost = node_host(ctx)
        self.progress = Progress(ctx)

    def label(self, index: int) -> str:
        return f"{self.ctx.node_name}[{index}]"

    async def start(self, index: int, value: Any) -> None:
        ctx = self.ctx
        child = await self.host.start_child(ChildSpec(
            parent_run=ctx.run_id, parent_node=ctx.node_id, graph_id=str(self.body.get("id") or "loop-body"),
            graph=self.body, run_input=value, attempt=ctx.attempt, key=str(index), label=self.label(index)))
        self.progress.running[str(index)] = child

    async def collect(self) -> list[tuple[int, ChildResult]]:
        """The iterations that ended since the last execution (their events copied here), by index."""
        running = self.progress.running
        ended = await self.host.collect_children(list(running.values()))
        index_of = {child: int(i) for i, child in running.items()}
        finished = sorted((index_of[child], result) for child, result in ended.items())
        for index, result in finished:
            del running[str(index)]
            await self._forward(index, result.run_id)
        return finished

    async def fail(self, index: int, result: ChildResult) -> Exception:
        """The error of a failed iteration (a budget's error as it is); the iterations still
        running are cancelled."""
        await self.host.cancel_children(list(self.progress.running.values()),
                                        f"iteration {index} of loop {self.ctx.node_name!r} failed")
        self.progress.running.clear()
        over = budget_error(result)
        if over is not None:
            return over
        detail = (result.error or {}).get("message") or result.error or result.status
        return RuntimeError(f"loop iteration {index} failed: {detail}")

    async def _forward(self, index: int, child: str) -> None:
        for event in await self.host.child_events(child):
            data = dict(event.data or {})
            data.update({"subgraph": self.label(index), "inner_node_id": event.node_id,
                         "inner_node_name": event.node_name, "inner_node_type": event.node_type,
                         "child_run": child})
            await self.ctx.emit(event.event_type, data)


async def for_each(body: dict[str, Any], items: list[Any], concurrency: int, ctx: FlowContext) -> list[Any]:
    """The results of every item, in item order, once all have run; until then this
    raises ``SuspendRequested`` (the node waits for its running iterations)."""
    loop = Iterations(body, ctx)
    progress = loop.progress
    for index, result in await loop.collect():
        if result.status != SUCCEEDED:
            raise await loop.fail(index, result)
        progress.done[str(index)] = sink_value(result)
    starting = range(progress.next, min(len(items), progress.next + concurrency - len(progress.running)))
    await asyncio.gather(*(loop.start(i, items[i]) for i in starting))  # each start is a few round trips
    progress.next = max(progress.next, starting.stop)
    if progress.running:
        raise progress.suspend(ctx)
    return [progress.done[str(i)] for i in range(len(items))]


async def until(body: dict[str, Any], start: Any, condition: Any, max_iterations: int,
                ctx: FlowContext) -> tuple[Any, int]:
    """(the last result, iterations run) once ``condition`` holds; until then this raises
    ``SuspendRequested``. Reaching ``max_iterations`` first is a ValueError."""
    loop = Iterations(body, ctx)
    progress = loop.progress
    for index, result in await loop.collect():
        if result.status != SUCCEEDED:
            raise await loop.fail(index, result)
        progress.current = sink_value(result)
        scope = make_scope(ctx, progress.current, {"$index": index})
        # Off the loop: a condition may take up to the expression budgets' steps.
        if await asyncio.to_thread(evaluate_condition, condition, scope, parameter="condition",
                                   where=f"iteration {index}"):
            return progress.current, index + 1
    if progress.running:
        raise progress.suspend(ctx)
    if progress.next >= max_iterations:
        raise ValueError(f"loop reached parameter 'max_iterations' ({max_iterations}) before its condition was true")
    await loop.start(progress.next, start if progress.next == 0 else progress.current)
    progress.next += 1
    raise progress.suspend(ctx)
