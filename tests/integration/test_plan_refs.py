"""Real worker processes run stored graphs' runs by plan reference: a version's plan is
read from Redis once per worker process, however many runs of it they take, including
the fan-out branches a worker takes through drains (``orchestrator/store/plan_refs.py``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis

from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerProcesses
from orchestrator.queue.dispatch import make_dispatch
from orchestrator.service.graph_store import GraphStore
from orchestrator.service.runs import RunRequest, StoredGraph, start_stored
from orchestrator.settings import Settings
from tests.fake_nodes import graph
from tests.integration.conftest import WORKER_COUNT, collect, wait_for_terminal

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WIDTH = 8
RUNS = 6


@dataclass(frozen=True)
class Starter:
    """What ``start_stored`` needs, as the API holds it."""

    redis: Any
    settings: Settings
    registry: Registry
    graphs: GraphStore
    run_store: Any
    dispatch: Any


def fan_out(graph_id: str) -> dict[str, Any]:
    branches = [f"p{i}" for i in range(WIDTH)]
    return graph(
        [("t", "manual_trigger", "Start"),
         *[(b, "probe", f"Branch {i}", {"delay_s": 0.3, "value": i}) for i, b in enumerate(branches)],
         ("join", "probe", "Join")],
        [*[("t", "output", b, "input") for b in branches], *[(b, "output", "join", "input") for b in branches]],
        id=graph_id)


async def test_runs_of_one_version_read_its_plan_once_per_worker_process(
        workers: WorkerProcesses, redis_server: EmbeddedRedis, store: Any, registry: Registry, celery: Any) -> None:
    starter = Starter(store.redis, Settings(), registry, GraphStore(store.redis, registry, Settings()), store,
                      make_dispatch(celery))
    await starter.graphs.create(fan_out("plan-refs-fan"), "plan-refs-fan")
    plan_reads: list[str] = []
    watcher = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    async with watcher.monitor() as monitor:
        async def listen() -> None:
            async for line in monitor.listen():
                command = str(line.get("command", ""))
                if line.get("client_type") != "lua" and command.startswith("GET ") and command.endswith(":plan"):
                    plan_reads.append(command)

        listener = asyncio.ensure_future(listen())
        await asyncio.sleep(0.2)
        try:
            run_ids = [await start_stored(starter, StoredGraph("plan-refs-fan"), RunRequest({"n": i}),
                                          trigger="test") for i in range(RUNS)]
            results = [await collect(store, r, await wait_for_terminal(store, r)) for r in run_ids]
        finally:
            listener.cancel()
            await watcher.aclose()
    assert [r.status for r in results] == ["succeeded"] * RUNS
    pids = {r.output(f"p{i}")["pid"] for r in results for i in range(WIDTH)}
    assert len(pids) >= 2  # both processes took branches (the second through drains)
    assert len(plan_reads) <= WORKER_COUNT, plan_reads  # not one per run and process
