"""A worker started by `orchestrator worker` serves Prometheus metrics of all its pool processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis, free_port
from orchestrator.service.runs import RunRequest, start_run
from tests.integration.conftest import wait_for_terminal

pytestmark = pytest.mark.integration

CHAIN = {
    "id": "metrics",
    "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start"},
        {"id": "s", "type": "set_fields", "name": "Set", "data": {"fields": {"seen": True}}},
    ],
    "edges": [{"id": "e1", "source": "t", "sourceHandle": "output", "target": "s",
               "targetHandle": "input", "data": {"channel": "flow"}}],
}


@pytest.fixture
def metrics_worker() -> Iterator[tuple[EmbeddedRedis, int]]:
    port = free_port()
    with EmbeddedRedis(unix_socket=False) as server:
        env = {**os.environ, "REDIS_URL": server.url, "ORCH_WORKER_METRICS_PORT": str(port)}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "worker", "-c", "2", "--loglevel", "WARNING"],
            env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            yield server, port
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def scrape(port: int, deadline_s: float = 30.0) -> str:
    end = time.monotonic() + deadline_s
    while True:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
        except httpx.HTTPError:
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_worker_metrics_count_node_runs_and_latency_by_node_type(
    metrics_worker: tuple[EmbeddedRedis, int],
) -> None:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import get_registry
    from orchestrator.settings import Settings, load_settings
    from orchestrator.store.redis_store import RedisRunStore

    server, port = metrics_worker
    scrape(port)  # the worker is up and serving
    app: Any = make_celery(server.url, Settings())
    store = RedisRunStore.from_url(server.url, Settings())
    try:
        for _ in range(3):
            run_id = await start_run(store, get_registry(load_settings()), CHAIN, RunRequest({"n": 1}),
                                     dispatch=make_dispatch(app))
            await wait_for_terminal(store, run_id)
    finally:
        await store.close()
        app.close()
    text = scrape(port)
    assert sample(text, "orchestrator_node_runs_total", node_type="set_fields", status="succeeded") == 3
    assert sample(text, "orchestrator_node_duration_seconds_count", node_type="manual_trigger") == 3
    assert sample(text, "orchestrator_events_published_total", event_type="completed") >= 6


AGENT = {
    "id": "metered",
    "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start"},
        {"id": "a", "type": "agent", "name": "Assistant", "data": {"model": "dryrun:gpt-4o-mini", "prompt": "hi"}},
    ],
    "edges": [{"id": "e1", "source": "t", "sourceHandle": "output", "target": "a",
               "targetHandle": "input", "data": {"channel": "flow"}}],
}


async def test_worker_metrics_count_model_tokens_and_cost_by_model_graph_and_workspace(
    metrics_worker: tuple[EmbeddedRedis, int],
) -> None:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import get_registry
    from orchestrator.settings import Settings, load_settings
    from orchestrator.store.redis_store import RedisRunStore
    from orchestrator.telemetry.pricing import load_table
    from orchestrator.telemetry.usage import summarize, usage_events

    server, port = metrics_worker
    scrape(port)
    app: Any = make_celery(server.url, Settings())
    store = RedisRunStore.from_url(server.url, Settings())
    try:
        run_ids = []
        for _ in range(2):
            run_ids.append(await start_run(store, get_registry(load_settings()), AGENT, RunRequest({}),
                                           dispatch=make_dispatch(app)))
            await wait_for_terminal(store, run_ids[-1])
        totals = [summarize(await usage_events(store, r), load_table())["total"] for r in run_ids]
    finally:
        await store.close()
        app.close()
    where = {"model": "dryrun:gpt-4o-mini", "graph": "metered", "workspace": "default"}
    text = scrape(port)
    assert sample(text, "orchestrator_model_tokens_total", kind="input", **where) == sum(
        t["input_tokens"] for t in totals) > 0
    assert sample(text, "orchestrator_model_calls_total", **where) == 2
    cost = sum(t["cost_usd"] for t in totals)
    assert sample(text, "orchestrator_model_cost_usd_total", **where) == pytest.approx(cost)
