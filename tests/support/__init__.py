"""Shared test helpers: a real Redis per module, hand-built plans, a barrier driver.

``redis_server()``   an EmbeddedRedis on a free TCP port (started; call ``.stop()``).
``make_plan()``      a RunPlan from short edge tuples, through ``scheduling.plan_run``.
``Driver``           claims and completes nodes of one run against any RunStore and
                     records what a user would notice: ready lists, statuses, events.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.host.node_host import NodeHost
from orchestrator.kernel.protocol import DataValue, EventType, NodeEvent
from orchestrator.kernel.scheduling import FlowGraph, PlanInput, RunPlan, plan_run
from orchestrator.kernel.store import Claim, ClaimRequest, NodeCompletion, RunRecord, RunStore
from orchestrator.local.embedded_redis import EmbeddedRedis

_run_ids = itertools.count(1)


def redis_server() -> EmbeddedRedis:
    return EmbeddedRedis(unix_socket=False).start()


def new_run_id(label: str = "run") -> str:
    return f"{label}-{next(_run_ids)}"


# An edge: (source, source_handle, target, target_handle).
Edge = tuple[str, str, str, str]


def make_plan(
    nodes: Iterable[str],
    edges: Iterable[Edge],
    *,
    start: list[str] | None = None,
    required: Mapping[str, set[str]] | None = None,
    run_id: str | None = None,
) -> RunPlan:
    """Plan over ``nodes`` (type "fake", name = id); start defaults to the first node."""
    node_ids = list(nodes)
    edge_list = list(edges)
    required = required or {}
    inputs = [PlanInput(n, "fake", n, set(required.get(n, set()))) for n in node_ids]
    flow = [(f"e{i}", s, sh, t, th) for i, (s, sh, t, th) in enumerate(edge_list)]
    return plan_run(run_id or new_run_id(), {"id": "g"}, FlowGraph(inputs, flow), start or node_ids[:1])


def record_for(plan: RunPlan) -> RunRecord:
    return RunRecord(run_id=plan.run_id, status="queued", graph_id="g", run_input={"x": 1})


def started_event(run_id: str, node_id: str) -> NodeEvent:
    return NodeEvent(run_id=run_id, node_id=node_id, node_type="fake", node_name=node_id,
                     event_type=EventType.STARTED)


def completed(run_id: str, node_id: str, ports: Iterable[str], *, status: str = "succeeded",
              stop_run: bool = False, error: dict[str, Any] | None = None) -> NodeCompletion:
    """A completion with value ``"<node>.<port>"`` on each live port and one event."""
    ports = list(ports)
    kind = EventType.COMPLETED if status == "succeeded" else EventType.ERROR
    return NodeCompletion(
        status=status,
        outputs={p: DataValue("data", f"{node_id}.{p}") for p in ports},
        events=[NodeEvent(run_id=run_id, node_id=node_id, node_type="fake", node_name=node_id,
                          event_type=kind, data={"ports": ports})],
        error=error,
        stop_run=stop_run,
    )


async def claim(store: RunStore, run_id: str, node_id: str, *, worker_id: str = "w1",
                lease_s: float = 30) -> Claim:
    return await store.claim_node(run_id, ClaimRequest(node_id, lease_s=lease_s,
                                                       started=started_event(run_id, node_id)),
                                  worker_id=worker_id)


async def events_of(store: RunStore, run_id: str) -> list[NodeEvent]:
    """Every event of the run, in order (the ``RunQuery`` side of either store)."""
    return [e for _, e in await store.read_events(run_id, count=1_000_000)]


async def node_states(store: RunStore, run_id: str) -> dict[str, str]:
    return await store.node_states(run_id)


async def stale_refusals(store: RunStore, run_id: str) -> int:
    """How many completions, renewals and appends the store refused as stale (either store)."""
    count = store.stale_refusals(run_id)  # type: ignore[attr-defined]
    if inspect.isawaitable(count):
        count = await count
    return int(count)


@dataclass
class Driver:
    """Runs one plan to the end: FIFO over ready nodes, each claimed then completed.

    ``live`` maps a node to the output ports it produces (missing: ``{"out"}``).
    """

    store: RunStore
    plan: RunPlan
    live: Mapping[str, set[str]] = field(default_factory=dict)
    worker_id: str = "w1"
    ready_lists: list[tuple[str, list[str]]] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)

    async def start(self) -> list[str]:
        await self.store.create_run(self.plan, record_for(self.plan))
        await self.store.mark_dispatched(self.plan.run_id, self.plan.start)
        return list(self.plan.start)

    async def step(self, node_id: str) -> list[str]:
        run_id = self.plan.run_id
        claim = await self.store.claim_node(run_id, ClaimRequest(node_id, lease_s=30,
                                                                 started=started_event(run_id, node_id)),
                                            worker_id=self.worker_id)
        assert claim.kind == "run", (node_id, claim)
        self.ran.append(node_id)
        ready = (await self.store.complete_node(
            run_id, node_id, completed(run_id, node_id, self.live.get(node_id, {"out"})))).nodes
        self.ready_lists.append((node_id, ready))
        await self.store.mark_dispatched(run_id, ready)
        return ready

    async def run(self) -> None:
        queue = await self.start()
        while queue:
            queue.extend(await self.step(queue.pop(0)))


def host_from(services: Mapping[str, Any] | None) -> NodeHost | None:
    """The ``NodeHost`` that tests describe as ``{"settings", "redis_url", "workspace", "limiter"}``
    (each optional: the process settings, their Redis URL, workspace ``default``); None
    for no host at all."""
    if services is None:
        return None
    from orchestrator.settings import get_settings

    settings = services.get("settings") or get_settings()
    return NodeHost(settings=settings, redis_url=services.get("redis_url") or settings.redis_url,
                    workspace=services.get("workspace") or "default", limiter=services.get("limiter"))
