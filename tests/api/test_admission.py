"""Back-pressure holds for every way a run starts: a new run, a rerun (429 with
Retry-After, nothing stored) and a scheduled fire (skipped, logged and counted).

Its own redis-server: the node queue the bound reads (``LLEN orchestrator``) is one list per
Redis server, filled here by hand, with no worker to drain it."""

from __future__ import annotations

import ast
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.queue.lanes import NODE_QUEUE
from orchestrator.telemetry import metrics
from tests.api.conftest import Api, chain, open_api
from tests.support.inline_worker import repo_registry

BOUND = 2
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def own_redis() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as server:
        yield server


@pytest.fixture
async def bounded(own_redis: EmbeddedRedis) -> AsyncIterator[Api]:
    api = await open_api(own_redis, max_queued_nodes=BOUND, overload_retry_after_s=7)
    yield api
    await api.redis.delete(NODE_QUEUE)
    await api.close()


async def fill_queue(api: Api) -> None:
    await api.redis.rpush(NODE_QUEUE, *["waiting task"] * BOUND)


async def an_ended_run(api: Api) -> str:
    assert (await api.client.post("/graphs", json=chain("ga"))).status_code == 201
    started = await api.client.post("/graphs/ga/runs", json={"input": {"x": 1}})
    assert started.status_code == 202
    run_id = str(started.json()["run_id"])
    assert (await api.client.post(f"/runs/{run_id}/cancel")).json()["status"] == "cancelled"
    return run_id


async def test_a_rerun_over_the_queue_bound_is_429_with_retry_after_and_starts_nothing(bounded: Api) -> None:
    old = await an_ended_run(bounded)
    await fill_queue(bounded)
    dispatched = len(bounded.dispatched)
    refused = await bounded.client.post(f"/runs/{old}/rerun", json={"from_node": "b"})
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "7"
    error = refused.json()["error"]
    assert (error["code"], error["limit"], error["queued"], error["bound"]) == (
        "overloaded", "ORCH_MAX_QUEUED_NODES", BOUND, BOUND)
    assert len(bounded.dispatched) == dispatched
    assert [r["run_id"] for r in (await bounded.client.get("/graphs/ga/runs")).json()["items"]] == [old]
    await bounded.redis.delete(NODE_QUEUE)
    accepted = await bounded.client.post(f"/runs/{old}/rerun", json={"from_node": "b"})
    assert accepted.status_code == 202 and accepted.json()["rerun_of"] == old


async def test_a_new_run_over_the_bound_is_still_429(bounded: Api) -> None:
    assert (await bounded.client.post("/graphs", json=chain("gb"))).status_code == 201
    await fill_queue(bounded)
    refused = await bounded.client.post("/graphs/gb/runs", json={"input": {}})
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "7"


def schedule_graph() -> dict[str, Any]:
    return {"id": "nightly", "nodes": [{"id": "s", "type": "schedule_trigger", "name": "Every hour",
                                        "data": {"interval_s": 3600}}], "edges": []}


async def test_a_scheduled_fire_over_the_bound_is_skipped_logged_and_counted(
        bounded: Api, caplog: pytest.LogCaptureFixture) -> None:
    from orchestrator.service.graph_store import GraphStore
    from workers.beat import ScheduleServices, start_scheduled

    registry = repo_registry()
    await GraphStore(bounded.redis, registry, bounded.settings).create(schedule_graph())
    sent: list[tuple[str, list[str]]] = []

    def dispatch(run_id: str, node_ids: list[str]) -> None:
        sent.append((run_id, node_ids))

    def skipped() -> float:
        value = metrics.REGISTRY.get_sample_value("orchestrator_schedule_skipped_total", {"reason": "overloaded"})
        return value or 0.0

    services = ScheduleServices(redis=bounded.redis, settings=bounded.settings, run_store=bounded.store,
                                registry=registry, dispatch=dispatch)
    await fill_queue(bounded)
    before = skipped()
    with caplog.at_level(logging.WARNING, logger="workers.beat"):
        assert await start_scheduled(services, "nightly", "s") is None
    assert sent == [] and skipped() == before + 1
    assert any("nightly" in r.getMessage() and "ORCH_MAX_QUEUED_NODES" in r.getMessage() for r in caplog.records)
    await bounded.redis.delete(NODE_QUEUE)
    run_id = await start_scheduled(services, "nightly", "s")
    assert run_id is not None
    record = await bounded.store.get_run(run_id)
    assert record.meta["trigger"] == "schedule"
    # Its one node, the trigger, was resolved by the start (kernel/start.py): nothing to send.
    assert record.status == "succeeded" and sent == []


def test_every_run_start_of_the_api_and_the_workers_is_admitted() -> None:
    """In the API and the workers, ``start_run`` is called only by ``admit_and_start``, and
    a stored graph's compiled plan is started (``_start_compiled``) only by
    ``start_stored``; both check admission first."""
    callers: set[tuple[str, str]] = set()
    paths = [*(ROOT / "orchestrator" / "api").rglob("*.py"), *(ROOT / "workers").rglob("*.py"),
             ROOT / "orchestrator" / "service" / "runs.py"]
    for path in paths:
        tree = ast.parse(path.read_text())
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)):
            names = {ast.unparse(c.func) for c in ast.walk(func) if isinstance(c, ast.Call)}
            if any(n in ("start_run", "_start_compiled") or n.endswith(".start_run") for n in names):
                callers.add((path.relative_to(ROOT).as_posix(), func.name))
                assert "admission.check" in names, f"{path.name}:{func.name} starts a run without admission.check"
    assert callers == {("orchestrator/service/runs.py", "admit_and_start"),
                       ("orchestrator/service/runs.py", "start_stored")}
