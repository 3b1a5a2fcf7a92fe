"""Fair share between workspaces on the broker (real Redis broker, two worker processes):
a workspace that floods the cluster with one-node runs queues them in its own lane, and
another workspace's run is taken at once instead of after the flood, even when hashing
would have put both workspaces on one lane (lanes are assigned: orchestrator/store/lanes.py). The same check runs on
RabbitMQ in test_rabbitmq.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.queue.lanes import lane_of, new_run_id
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph
from tests.integration.conftest import collect, wait_for_terminal
from tests.integration.test_faults import NODE_PATHS

pytestmark = pytest.mark.integration

FLOOD_RUNS = 120
FLOOD_DELAY_S = 0.25  # 120 x 0.25 s on 8 node steps at once: the flood lasts >= 3.75 s
FLOODER, OTHER = "ws-a", "ws-b"  # workspaces on different lanes of 8
# Workspaces hashing would put on one lane of 8 (crc32 mod 256 mod 8): assigned lanes part them
COLLIDING_FLOODER, COLLIDING_VICTIM = "ws-3", "ws-8"


def flood_graph() -> dict[str, Any]:
    return graph([("f", "probe", "Flood", {"delay_s": FLOOD_DELAY_S})], [], id="lanes-flood")


def chain_graph() -> dict[str, Any]:
    return graph([("t", "manual_trigger", "Start"), ("a", "probe", "A"), ("b", "probe", "B")],
                 [("t", "output", "a", "input"), ("a", "output", "b", "input")], id="lanes-chain")


async def flood_then_other(store: RedisRunStore, registry: Registry, dispatch: Any, lanes: int,
                           flooder: str = FLOODER, victim: str = OTHER) -> tuple[float, float]:
    """Workspace ``flooder`` starts FLOOD_RUNS one-node runs, then ``victim`` a 3-node chain:
    (the chain's run time, the time from the chain's end to the flood's last node's end)."""
    flood: list[str] = []
    for _ in range(0, FLOOD_RUNS, 20):  # as many clients at once as the store's pool serves
        flood += await asyncio.gather(*(start_run(store, registry, flood_graph(), RunRequest(
            {}, start=["f"], meta={"workspace": flooder}), dispatch=dispatch) for _ in range(20)))
    started = time.monotonic()
    other = await start_run(store, registry, chain_graph(), RunRequest({}, meta={"workspace": victim}),
                            dispatch=dispatch)
    assert lane_of(other, lanes) not in {lane_of(run, lanes) for run in flood}, "the two share no lane"
    chain = await collect(store, other, await wait_for_terminal(store, other, 30))
    took_s = time.monotonic() - started
    assert chain.status == "succeeded"
    ends = [(await collect(store, run, await wait_for_terminal(store, run, 60))).output("f")["end"]
            for run in flood]
    return took_s, max(ends) - chain.output("b")["end"]


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as s:
        yield s


@pytest.fixture(scope="module")
def pool(server: EmbeddedRedis) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(server.url, WorkerConfig(count=2, concurrency=4, pool="threads",
                                                  env={"ORCH_NODE_PATHS": NODE_PATHS, "ORCH_LANES": "8"})) as procs:
        yield procs


@pytest.fixture
async def cluster(server: EmbeddedRedis, pool: WorkerProcesses) -> AsyncIterator[tuple[RedisRunStore, Any, Registry]]:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry

    settings = Settings(node_paths=NODE_PATHS, lanes=8)
    store = RedisRunStore.from_url(server.url, settings)
    app = make_celery(server.url, settings)
    yield store, make_dispatch(app), load_registry(settings)
    await store.close()
    app.close()


async def test_another_workspace_s_run_is_not_held_behind_a_flood_of_runs(
    cluster: tuple[RedisRunStore, Any, Registry],
) -> None:
    store, dispatch, registry = cluster
    assert lane_of(new_run_id(FLOODER), 8) != lane_of(new_run_id(OTHER), 8)
    took_s, flood_left_s = await flood_then_other(store, registry, dispatch, lanes=8)
    # one FIFO queue would run the chain after ~120 flood messages (>= 3.75 s of work)
    assert flood_left_s > 1.5, "the chain ended long before the flood"
    assert took_s < 2.0


async def test_a_workspace_hashing_put_on_a_flood_s_lane_is_given_its_own_and_not_held_behind_it(
    cluster: tuple[RedisRunStore, Any, Registry],
) -> None:
    store, dispatch, registry = cluster
    assert lane_of(new_run_id(COLLIDING_FLOODER), 8) == lane_of(new_run_id(COLLIDING_VICTIM), 8)
    took_s, flood_left_s = await flood_then_other(store, registry, dispatch, lanes=8, flooder=COLLIDING_FLOODER,
                                                  victim=COLLIDING_VICTIM)
    # on its hash lane the chain would run after the ~120 flood messages ahead of it
    assert flood_left_s > 1.5, "the chain ended long before the flood"
    assert took_s < 2.0
