"""A workspace's ceiling of nodes in flight across several worker processes (real Redis,
three Celery worker processes, a sweeper): a capped workspace never runs more nodes at once
than its ceiling, the nodes over it wait as ``throttled`` holding no slot while another
workspace runs unhindered, and a worker SIGKILLed while its nodes hold units gives them back
(their leases lapse): the run completes, and no unit is lost or counted twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.service.sweeper import Sweeper
from orchestrator.settings import Settings
from orchestrator.store.keys import Keys
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph
from tests.integration.conftest import collect, wait_for_terminal

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
NODE_PATHS = os.pathsep.join([str(HERE / "fault_pack"), str(HERE / "fake_pack")])
LEASE_S = 2.0
CEILING = 2
LIMITS = json.dumps({"capped": {"max_in_flight": CEILING}})
SETTINGS = Settings(node_lease_s=LEASE_S, node_paths=NODE_PATHS, workspace_limits=LIMITS, undispatched_grace_s=2.0)


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as s:
        yield s


@pytest.fixture(scope="module")
def pool(server: EmbeddedRedis) -> Iterator[WorkerProcesses]:
    env = {"ORCH_NODE_PATHS": NODE_PATHS, "ORCH_NODE_LEASE_S": str(LEASE_S), "ORCH_WORKSPACE_LIMITS": LIMITS}
    with WorkerProcesses(server.url, WorkerConfig(count=3, concurrency=4, pool="threads", env=env)) as procs:
        yield procs


@pytest.fixture(scope="module")
def registry() -> Registry:
    from orchestrator.service.plugins import load_registry

    return load_registry(SETTINGS)


@pytest.fixture
async def cluster(server: EmbeddedRedis, pool: WorkerProcesses) -> AsyncIterator[tuple[RedisRunStore, Any]]:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch

    store = RedisRunStore.from_url(server.url, SETTINGS)
    app = make_celery(server.url, SETTINGS)
    dispatch = make_dispatch(app)
    sweeping = asyncio.create_task(Sweeper(store, dispatch, SETTINGS).run_forever(0.5))
    yield store, dispatch
    sweeping.cancel()
    await asyncio.gather(sweeping, return_exceptions=True)
    await store.close()
    app.close()


def fan_out(node_type: str, width: int, **data: Any) -> dict[str, Any]:
    return graph([("t", "manual_trigger", "Start")]
                 + [(f"n{i}", node_type, f"N{i}", {**data, "value": i}) for i in range(width)],
                 [("t", "output", f"n{i}", "input") for i in range(width)], id=f"ceiling-{time.time_ns()}")


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _, step in edges:
        now += step
        best = max(best, now)
    return best


async def in_flight(store: RedisRunStore, workspace: str) -> int:
    return int(await store.redis.zcard(Keys(SETTINGS.key_prefix).inflight(workspace)))


async def test_a_capped_workspace_runs_at_most_its_ceiling_while_another_runs_freely(
    cluster: tuple[RedisRunStore, Any], registry: Registry,
) -> None:
    store, dispatch = cluster
    capped = await start_run(store, registry, fan_out("probe", 6, delay_s=0.4),
                             RunRequest({}, meta={"workspace": "capped"}), dispatch=dispatch)
    free = await start_run(store, registry, fan_out("probe", 6, delay_s=0.4),
                           RunRequest({}, meta={"workspace": "free"}), dispatch=dispatch)
    results = [await collect(store, run, await wait_for_terminal(store, run, 30)) for run in (capped, free)]
    assert [r.status for r in results] == ["succeeded", "succeeded"]
    spans = [[(r.output(f"n{i}")["start"], r.output(f"n{i}")["end"]) for i in range(6)] for r in results]
    assert most_at_once(spans[0]) <= CEILING
    assert most_at_once(spans[1]) > CEILING, "no ceiling for the other workspace"
    waits = [e for i in range(6) for e in results[0].of(f"n{i}", "throttled")]
    assert waits and {e.data["source"] for e in waits} == {"workspace_ceiling"}
    assert waits[0].data["limit"] == "workspace:capped:in_flight" and waits[0].data["delay_s"] > 0
    assert not any(results[1].of(f"n{i}", "throttled") for i in range(6))
    assert await in_flight(store, "capped") == 0, "every unit given back"


async def test_units_of_a_sigkilled_worker_come_back_and_the_run_completes_once_each(
    cluster: tuple[RedisRunStore, Any], registry: Registry, pool: WorkerProcesses, tmp_path: Path,
) -> None:
    store, dispatch = cluster
    run = await start_run(store, registry, fan_out("stall", 4, pid_dir=str(tmp_path), delay_s=1.5),
                          RunRequest({}, meta={"workspace": "capped"}), dispatch=dispatch)
    victim = await _first_stall_pid(tmp_path)
    assert victim in pool.pids
    assert await in_flight(store, "capped") >= 1
    os.kill(victim, signal.SIGKILL)  # its nodes' units are held by a process that is gone
    result = await collect(store, run, await wait_for_terminal(store, run, 40))
    assert result.status == "succeeded"
    assert sorted(result.output(f"n{i}")["value"] for i in range(4)) == [0, 1, 2, 3]
    assert any(len(result.of(f"n{i}", "started")) >= 2 for i in range(4)), "a killed node ran again"
    assert all(len(result.of(f"n{i}", "completed")) == 1 for i in range(4))
    assert await in_flight(store, "capped") == 0, "the dead worker's units came back, none counted twice"


async def _first_stall_pid(pid_dir: Path, timeout_s: float = 20.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(pid_dir.glob("n*.*"))
        if found:
            return int(found[0].name.split(".")[1])
        await asyncio.sleep(0.05)
    raise AssertionError("no stall node started")
