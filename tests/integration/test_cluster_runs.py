"""Run state on a Redis Cluster, the broker on a plain Redis of its own, real processes.

The module starts a 3-primary Redis Cluster (tests/support/redis_cluster.py), a plain
redis-server as the Celery broker (``ORCH_BROKER_URL``) and two Celery worker processes whose
``REDIS_URL`` is the cluster's ``redis+cluster://`` URL; a sweeper runs in the test's loop
(as in test_rabbitmq), and one test serves the API on the cluster. Each test is a behaviour a
deployment on a cluster relies on: a fan-out spreads over both workers and every primary
and completes each node once, a node whose message was lost is sent again by the sweeper, a
killed worker's node runs again and completes once, a run suspended on a form waits and
resumes through the API, and the Celery app refuses a cluster as its broker.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.kernel.errors import OrchestratorError
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.service.sweeper import Sweeper
from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph
from tests.integration.conftest import collect, completions, sweeping_every, wait_for_terminal
from tests.integration.conftest import run_through as run
from tests.support import redis_cluster
from tests.support.servers import serve_in_thread

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not redis_cluster.available(),
                       reason="redis-server / redis-cli are not installed (apt-get install redis-server redis-tools)"),
]

HERE = Path(__file__).parent
NODE_PATHS = os.pathsep.join([str(HERE / "fault_pack"), str(HERE / "fake_pack")])
LEASE_S = 2.0
SWEEP_PERIOD_S = 0.3
GRACE_S = 1.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[redis_cluster.Cluster]:
    with redis_cluster.redis_cluster(primaries=3) as c:
        yield c


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as s:
        yield s


@pytest.fixture(scope="module")
def settings(cluster: redis_cluster.Cluster, broker: EmbeddedRedis) -> Settings:
    return Settings(redis_url=cluster.url, broker_url=broker.url, node_lease_s=LEASE_S, node_paths=NODE_PATHS,
                    undispatched_grace_s=GRACE_S, resume_url_secret="cluster-test-resume-secret-0123456789")


@pytest.fixture(scope="module")
def pool(cluster: redis_cluster.Cluster, broker: EmbeddedRedis) -> Iterator[WorkerProcesses]:
    env = {"ORCH_NODE_PATHS": NODE_PATHS, "ORCH_NODE_LEASE_S": str(LEASE_S), "ORCH_BROKER_URL": broker.url}
    with WorkerProcesses(cluster.url, WorkerConfig(count=2, concurrency=4, env=env)) as procs:
        yield procs


@pytest.fixture(scope="module")
def registry(settings: Settings) -> Registry:
    from orchestrator.service.plugins import load_registry

    return load_registry(settings)


@pytest.fixture(scope="module")
def celery(cluster: redis_cluster.Cluster, settings: Settings) -> Iterator[Any]:
    from orchestrator.queue.app import make_celery

    app = make_celery(cluster.url, settings)
    yield app
    app.close()


@pytest.fixture
async def store(cluster: redis_cluster.Cluster, settings: Settings) -> AsyncIterator[RedisRunStore]:
    s = RedisRunStore.from_url(cluster.url, settings)
    yield s
    await s.close()


@pytest.fixture
async def sweeping(store: RedisRunStore, celery: Any, settings: Settings) -> AsyncIterator[Sweeper]:
    async with sweeping_every(SWEEP_PERIOD_S, store, celery, settings) as sweeper:
        yield sweeper


def fan_out(width: int, delay_s: float = 0.2) -> dict[str, Any]:
    branches = [f"p{i}" for i in range(width)]
    return graph(
        [("t", "manual_trigger", "Start"),
         *[(b, "probe", f"Branch {i}", {"delay_s": delay_s, "value": i}) for i, b in enumerate(branches)],
         ("join", "probe", "Join")],
        [*[("t", "output", b, "input") for b in branches], *[(b, "output", "join", "input") for b in branches]],
    )


async def test_fan_outs_run_on_both_workers_with_their_runs_on_every_primary(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any, sweeping: Sweeper,
) -> None:
    from redis.asyncio import RedisCluster

    results = await asyncio.gather(*(run(store, registry, celery, fan_out(8)) for _ in range(12)))
    for result in results:
        assert result.status == "succeeded"
        assert sorted(item["value"] for item in result.output("join")["input"]) == list(range(8))
        assert set(completions(result).values()) == {1}, "every node completed exactly once"
    assert len({r.output(f"p{i}")["pid"] for r in results for i in range(8)}) == 2, "both workers took nodes"
    cluster: RedisCluster = store.redis  # type: ignore[assignment]
    homes = {cluster.get_node_from_key(store.keys.run(r.run_id)).name for r in results}
    assert len(homes) >= 2, "the runs' state spread over the primaries"


async def test_a_node_whose_message_was_lost_is_sent_again_by_the_sweeper(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any, sweeping: Sweeper,
) -> None:
    lost: list[tuple[str, list[str]]] = []
    run_id = await start_run(store, registry, fan_out(2, 0.0), RunRequest({"x": 1}),
                             dispatch=lambda r, nodes: lost.append((r, nodes)))  # never reaches the broker
    assert lost == [(run_id, ["t"])]
    result = await collect(store, run_id, await wait_for_terminal(store, run_id, 30))
    assert result.status == "succeeded"
    assert set(completions(result).values()) == {1}
    first_event = result.events[0][1].timestamp
    started = result.of("t", "started")[0].timestamp
    assert started - first_event >= GRACE_S, "the start node ran only once the sweeper sent it again"


async def test_a_killed_worker_s_node_runs_again_and_completes_once(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any, sweeping: Sweeper,
    tmp_path: Path,
) -> None:
    g = graph(
        [("t", "manual_trigger", "Start"),
         ("s", "stall", "Stall", {"pid_dir": str(tmp_path), "delay_s": 2, "value": "kept"}),
         ("p", "probe", "After")],
        [("t", "output", "s", "input"), ("s", "output", "p", "input")],
    )
    from orchestrator.queue.dispatch import make_dispatch

    run_id = await start_run(store, registry, g, RunRequest({"x": 1}), dispatch=make_dispatch(celery))
    deadline = time.monotonic() + 20
    while not list(tmp_path.glob("s.*")):
        assert time.monotonic() < deadline, "the stall node never started"
        await asyncio.sleep(0.05)
    victim = int(next(tmp_path.glob("s.*")).name.split(".")[1])
    assert victim in pool.pids
    os.kill(victim, signal.SIGKILL)
    result = await collect(store, run_id, await wait_for_terminal(store, run_id, 40))
    assert result.status == "succeeded"
    assert result.output("s")["value"] == "kept"
    assert set(completions(result).values()) == {1}
    assert len(result.of("s", "started")) >= 2, "the node was claimed again after its worker died"
    index = pool.pids.index(victim)
    pool.procs[index].wait(timeout=10)
    pool.procs.pop(index)


def test_a_run_suspended_on_a_form_waits_and_resumes_through_the_api(
    pool: WorkerProcesses, settings: Settings, registry: Registry,
) -> None:
    from orchestrator.api import create_app
    from orchestrator.client import Client

    g = graph(
        [("t", "manual_trigger", "Start"),
         ("w", "wait", "Approve", {"resume_on": "form", "message": "Approve?",
                                   "form_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                                                   "required": ["ok"]}}),
         ("after", "set_fields", "After", {"fields": {"after": True}})],
        [("t", "output", "w", "input"), ("w", "output", "after", "input")],
        id="cluster-approval")
    api_settings = settings.model_copy(update={"sweep_period_s": SWEEP_PERIOD_S})
    with serve_in_thread(create_app(api_settings, registry=registry)) as url, Client(url) as client:
        client.create_graph(g)
        run_id = client.start_run(g["id"], {"order": 7})
        state = until(client, run_id, {"waiting", "failed", "succeeded"})
        assert state["status"] == "waiting" and state["nodes"]["w"]["status"] == "waiting"
        assert [w["kind"] for w in client.waits(run_id)] == ["form"]
        streamed: list[dict[str, Any]] = []  # the run's SSE stream, followed live (blocking XREAD on its node)
        follower = threading.Thread(target=lambda: streamed.extend(e for _, e in client.iter_events(run_id)))
        follower.start()
        time.sleep(0.3)
        client.submit_form(run_id, "w", {"ok": True})
        state = until(client, run_id, {"succeeded", "failed"})
        follower.join(timeout=20)
        assert not follower.is_alive(), "the event stream did not end with the run"
        assert [e["event_type"] for e in streamed if not e["node_id"]][-2:] == ["run_resumed", "run_completed"]
        assert any(e["node_id"] == "after" and e["event_type"] == "completed" for e in streamed)
        assert state["status"] == "succeeded"
        assert state["nodes"]["w"]["outputs"]["output"]["value"] == {"ok": True}
        assert state["nodes"]["after"]["status"] == "succeeded"
        listed = httpx.get(f"{url}/graphs/{g['id']}/runs").json()
        assert [r["run_id"] for r in listed["items"]] == [run_id]  # the graph's run index (its own slot)
        client.delete_graph(g["id"])
        assert httpx.get(f"{url}/graphs/{g['id']}").status_code == 404


def until(client: Any, run_id: str, wanted: set[str], timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        state: dict[str, Any] = client.get_run(run_id)
        if state["status"] in wanted:
            return state
        assert time.monotonic() < deadline, f"run {run_id} still {state['status']}"
        time.sleep(0.1)


def test_the_celery_app_refuses_a_cluster_as_its_broker(cluster: redis_cluster.Cluster) -> None:
    """(A process refusing to start: tests/settings/test_cluster_layout.py.)"""
    from orchestrator.queue.app import make_celery
    from orchestrator.settings import WorkerSettings

    with pytest.raises(OrchestratorError, match="ORCH_BROKER_URL"):
        make_celery(cluster.url, WorkerSettings())
    with pytest.raises(OrchestratorError, match="names a Redis Cluster"):
        make_celery(cluster.url, WorkerSettings(broker_url=cluster.url))
