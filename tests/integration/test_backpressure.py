"""Back-pressure: above the queue bound the API answers 429 + Retry-After, and no accepted
run is ever dropped.

Its own redis-server and API (uvicorn in a thread, ``max_queued_nodes=3``); the worker
process starts only once the queue is full, so the queue length is deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator.api import create_app
from orchestrator.client import Client, ServerBusyError
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.settings import Settings
from tests.fake_nodes import graph
from tests.integration.conftest import FAKE_PACK
from tests.support.servers import serve_in_thread

pytestmark = pytest.mark.integration

BOUND = 3


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as s:
        yield s


@pytest.fixture(scope="module")
def registry() -> Registry:
    from orchestrator.service.plugins import load_registry

    return load_registry(Settings(node_paths=str(FAKE_PACK)))


@pytest.fixture
def api_url(server: EmbeddedRedis, registry: Registry) -> Iterator[str]:
    settings = Settings(redis_url=server.url, max_queued_nodes=BOUND, overload_retry_after_s=7,
                        api_run_sweeper=False)
    app = create_app(settings, registry=registry)
    with serve_in_thread(app) as url:
        yield url


def two_nodes(graph_id: str) -> dict[str, Any]:
    return graph([("t", "manual_trigger", "Start"), ("p", "probe", "Probe")],
                 [("t", "output", "p", "input")], id=graph_id)


def test_runs_over_the_queue_bound_get_429_and_every_accepted_run_finishes(
    api_url: str, server: EmbeddedRedis,
) -> None:
    with Client(api_url) as client:
        client.create_graph(two_nodes("bp"))
        accepted = [client.start_run("bp", {"n": i}) for i in range(BOUND)]  # no worker yet: they queue
        refused = httpx.post(f"{api_url}/graphs/bp/runs", json={"input": {"n": 99}})
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "7"
        error = refused.json()["error"]
        assert (error["code"], error["limit"], error["queued"], error["bound"]) == (
            "overloaded", "ORCH_MAX_QUEUED_NODES", BOUND, BOUND)
        assert "ORCH_MAX_QUEUED_NODES" in error["message"]
        with pytest.raises(ServerBusyError) as busy:
            client.start_run("bp", {"n": 100})
        assert (busy.value.retry_after_s, busy.value.limit) == (7.0, "ORCH_MAX_QUEUED_NODES")
        assert client.list_graphs()["items"][0]["id"] == "bp"  # nothing else broke meanwhile
        env = {"ORCH_NODE_PATHS": str(FAKE_PACK)}
        with WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=10, env=env)):
            for run_id in accepted:
                last = [e for _, e in client.iter_events(run_id)][-1]
                assert last["event_type"] == "run_completed"
            assert client.get_run(client.start_run("bp", {"n": 101}))["status"] in (
                "queued", "running", "succeeded")  # the queue drained: admitted again


def test_nodes_waiting_on_a_runs_queue_count_toward_the_bound(
    api_url: str, server: EmbeddedRedis, registry: Registry,
) -> None:
    """A fan-out wider than the worker's free slots leaves its other branches on the run's
    queue in Redis, not in the broker: they are queued work all the same."""
    import redis

    wide = graph([("t", "manual_trigger", "Start"),
                  *[(f"b{i}", "probe", f"Branch {i}", {"delay_s": 1.0}) for i in range(8)]],
                 [("t", "output", f"b{i}", "input") for i in range(8)], id="bp-wide")
    env = {"ORCH_NODE_PATHS": str(FAKE_PACK)}
    with Client(api_url) as client, \
            WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=2, env=env)):
        client.create_graph(wide)
        run_id = client.start_run("bp-wide", {})
        counter = redis.Redis.from_url(server.url, decode_responses=True)
        try:
            for _ in range(100):  # the start node completes: two branches run, six queue
                if int(counter.get(Settings().key_prefix + ":runs:queued") or 0) >= BOUND:
                    break
                time.sleep(0.05)
        finally:
            counter.close()
        refused = httpx.post(f"{api_url}/graphs/bp-wide/runs", json={"input": {}})
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["queued"] >= BOUND
        last = [e for _, e in client.iter_events(run_id)][-1]
        assert last["event_type"] == "run_completed"  # the queued branches ran all the same
