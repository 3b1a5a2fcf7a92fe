"""Redis closes every client connection while a run's nodes are in flight on a worker
(the shipped threads pool, whose store streams its commands on one held connection:
``orchestrator/store/batching.py``): the run still ends succeeded, each node completed
once. The commands awaiting replies on the lost connection fail, the step's task is
retried, and what was leased to it is taken again once the lease lapses."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.service.sweeper import Sweeper
from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph
from tests.integration.conftest import collect, wait_for_terminal

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
NODE_PATHS = os.pathsep.join([str(HERE / "fault_pack"), str(HERE / "fake_pack")])
LEASE_S = 2.0
SWEEP_PERIOD_S = 0.5
SETTINGS = Settings(node_lease_s=LEASE_S, node_paths=NODE_PATHS)
WIDTH = 12


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as s:
        yield s


@pytest.fixture(scope="module")
def pool(server: EmbeddedRedis) -> Iterator[WorkerProcesses]:
    env = {"ORCH_NODE_PATHS": NODE_PATHS, "ORCH_NODE_LEASE_S": str(LEASE_S)}
    with WorkerProcesses(server.url, WorkerConfig(count=1, env=env)) as procs:
        yield procs


@pytest.fixture
async def store(server: EmbeddedRedis) -> AsyncIterator[RedisRunStore]:
    s = RedisRunStore.from_url(server.url, SETTINGS)
    yield s
    await s.close()


async def _terminal(store: RedisRunStore, run_id: str) -> list[Any]:
    """The run's events to its end, read as a client would: this process's own pooled
    connections were closed too, and a read on one of them fails once."""
    for attempt in range(3):
        try:
            return await wait_for_terminal(store, run_id, 60)
        except RedisConnectionError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def test_a_run_survives_redis_closing_every_connection_mid_fan_out(
    pool: WorkerProcesses, server: EmbeddedRedis, store: RedisRunStore, tmp_path: Path,
) -> None:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry

    registry: Registry = load_registry(SETTINGS)
    celery: Any = make_celery(server.url, SETTINGS)
    branches = [(f"s{i}", "stall", f"Stall {i}", {"pid_dir": str(tmp_path), "delay_s": 1, "value": i})
                for i in range(WIDTH)]
    g = graph([("t", "manual_trigger", "Start"), *branches, ("p", "probe", "After")],
              [e for b in branches for e in (("t", "output", b[0], "input"), (b[0], "output", "p", "input"))])
    sweeper = Sweeper(store, make_dispatch(celery), SETTINGS)
    sweeping = asyncio.create_task(sweeper.run_forever(SWEEP_PERIOD_S))
    killer = Redis.from_url(server.url)
    try:
        run_id = await start_run(store, registry, g, RunRequest({"x": 1}), dispatch=make_dispatch(celery))
        deadline = time.monotonic() + 20
        while len(list(tmp_path.iterdir())) < WIDTH // 2:  # branches in flight on the worker
            assert time.monotonic() < deadline, "the branches never started"
            await asyncio.sleep(0.05)
        killed = await killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert killed >= 1
        result = await collect(store, run_id, await _terminal(store, run_id))
    finally:
        sweeping.cancel()
        await asyncio.gather(sweeping, return_exceptions=True)
        await killer.aclose()
        celery.close()
    assert result.status == "succeeded", result.record.error
    assert sorted(v["value"] for v in result.output("p")["input"]) == list(range(WIDTH))
    completed = Counter(e.node_id for _, e in result.events if e.node_id and e.event_type == "completed")
    assert completed == Counter({n: 1 for n in ["t", "p", *(b[0] for b in branches)]})
