"""Scheduled runs: the tasks celery beat (with redbeat) sends, and the beat's app.

``orchestrator.schedule_fire(graph_id, node_id)`` starts a run of the stored graph's
latest version from that ``schedule_trigger`` node (run input ``None``: the node outputs
``{scheduled_at}``), records it in the graph's run list and returns the run id. A graph
or node that no longer exists is logged and skipped (the next schedules sync drops its
entry). ``orchestrator.schedules_sync()`` re-reads every stored graph into beat entries.

Back-pressure applies to schedules as to every other start (``orchestrator/service/admission.py``).
While the node queue is at or above ``ORCH_MAX_QUEUED_NODES`` a fire is **skipped**, not
queued for later: a warning names the graph, the node and the limit, and
``orchestrator_schedule_skipped_total{reason="overloaded"}`` (and the admission counter)
count it in the worker's metrics. The schedule's next fire is admitted as usual. Queuing
the fire instead would add work exactly when the workers are behind, and a burst of
delayed fires would land together once they catch up; a schedule that must never be
skipped needs a bound its deployment stays under.

``celery -A workers.beat beat`` (what ``orchestrator beat`` runs) uses ``app``: the node
app with redbeat configured (``orchestrator.service.schedules.configure_beat``). Workers run these
tasks once ``workers.beat`` is in the node app's include list.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from redis.asyncio import Redis

from orchestrator.errors import GraphNotFoundError, OverloadedError
from orchestrator.kernel.errors import OrchestratorError
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.store import RunStore
from orchestrator.queue.app import DEFAULT_REDIS_URL
from orchestrator.queue.dispatch import Dispatcher, make_async_dispatch
from orchestrator.service.graph_store import GraphStore
from orchestrator.service.runs import RunRequest, StoredGraph, start_stored
from orchestrator.service.schedules import (
    FIRE_TASK,
    SCHEDULE_NODE_TYPE,
    SYNC_TASK,
    configure_beat,
    sync_schedules,
)
from orchestrator.settings import Settings, get_settings
from orchestrator.telemetry import metrics
from workers.app import celery_app
from workers.process_state import process_state

log = logging.getLogger("workers.beat")

configure_beat(celery_app, get_settings().redis_url or DEFAULT_REDIS_URL, get_settings())
app = celery_app


@dataclass(frozen=True, kw_only=True)
class ScheduleServices:
    """What :func:`start_scheduled` starts runs with (an ``orchestrator.service.runs.Starter``)."""

    redis: Redis
    settings: Settings
    run_store: RunStore
    registry: Registry
    dispatch: Dispatcher

    @cached_property
    def graphs(self) -> GraphStore:
        return GraphStore(self.redis, self.registry, self.settings)


async def start_scheduled(services: ScheduleServices, graph_id: str, node_id: str) -> str | None:
    """Start one scheduled run of ``graph_id`` from ``node_id``; None when the queue is over
    its bound (the fire is skipped, see the module docstring) or the graph or node is gone."""
    try:
        graph = await services.graphs.get(graph_id)
    except GraphNotFoundError:
        log.warning("schedule of graph %s node %s: the graph no longer exists", graph_id, node_id)
        return None
    node = next((n for n in graph.get("nodes", []) if n.get("id") == node_id), None)
    if node is None or node.get("type") != SCHEDULE_NODE_TYPE:
        log.warning("schedule of graph %s: node %s is no longer a schedule trigger", graph_id, node_id)
        return None
    try:
        run_id = await start_stored(services, StoredGraph(graph_id, version=graph.get("version")),
                                    RunRequest(None, start=[node_id], meta={"node_id": node_id}),
                                    trigger="schedule")
    except OverloadedError as exc:
        metrics.SCHEDULES_SKIPPED.labels(reason="overloaded").inc()
        log.warning("schedule of graph %s node %s skipped: %s", graph_id, node_id, exc.message)
        return None
    log.info("schedule of graph %s node %s started run %s", graph_id, node_id, run_id)
    return run_id


_dispatch: tuple[int, Dispatcher] | None = None


def _dispatcher() -> Dispatcher:
    """This process's async dispatcher (its publish threads), built once per process."""
    global _dispatch
    if _dispatch is None or _dispatch[0] != os.getpid():
        _dispatch = (os.getpid(), make_async_dispatch(celery_app))
    return _dispatch[1]


async def fire(graph_id: str, node_id: str) -> str | None:
    """:func:`start_scheduled` with this worker process's Redis, store and registry."""
    state = process_state()
    services = ScheduleServices(redis=state.redis, settings=state.settings, run_store=state.store,
                                registry=state.registry, dispatch=_dispatcher())
    return await start_scheduled(services, graph_id, node_id)


@celery_app.task(name=FIRE_TASK, ignore_result=True)
def schedule_fire(graph_id: str, node_id: str) -> str | None:
    try:
        run_id: str | None = process_state().run(fire(graph_id, node_id))
    except OrchestratorError as exc:  # an invalid graph: say which, do not retry forever
        log.error("schedule of graph %s node %s could not start a run: %s", graph_id, node_id, exc)
        return None
    return run_id


@celery_app.task(name=SYNC_TASK, ignore_result=True)
def schedules_sync() -> Any:
    state = process_state()
    graphs = GraphStore(state.redis, state.registry, state.settings)
    report = state.run(sync_schedules(celery_app, graphs))
    return {"added": report.added, "updated": report.updated, "removed": report.removed}
