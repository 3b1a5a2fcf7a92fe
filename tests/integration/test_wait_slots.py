"""100 runs waiting on a Wait node hold no worker: the worker's in-flight gauge reads 0, a
new run still gets through a worker with 2 slots, and every waiting run resumes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.service.runs import RunRequest, start_run
from tests.integration.conftest import wait_for_terminal
from tests.integration.test_worker_metrics import metrics_worker, scrape  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration

WAITING_RUNS = 100
FORM_GRAPH = {
    "id": "waits-many",
    "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start"},
        {"id": "w", "type": "wait", "name": "Wait", "data": {"resume_on": "form",
                                                             "form_schema": {"type": "object"}}},
        {"id": "s", "type": "set_fields", "name": "Set", "data": {"fields": {"done": True}}},
    ],
    "edges": [
        {"id": "e1", "source": "t", "sourceHandle": "output", "target": "w", "targetHandle": "input",
         "data": {"channel": "flow"}},
        {"id": "e2", "source": "w", "sourceHandle": "output", "target": "s", "targetHandle": "input",
         "data": {"channel": "flow"}},
    ],
}
QUICK_GRAPH = {
    "id": "quick",
    "nodes": [{"id": "t", "type": "manual_trigger", "name": "Start"},
              {"id": "s", "type": "set_fields", "name": "Set", "data": {"fields": {"quick": True}}}],
    "edges": [{"id": "e1", "source": "t", "sourceHandle": "output", "target": "s", "targetHandle": "input",
               "data": {"channel": "flow"}}],
}


def in_flight(text: str) -> list[float]:
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("orchestrator_nodes_in_flight{")]


async def all_waiting(store: Any, run_ids: list[str], timeout_s: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        statuses = [(await store.get_run(r)).status for r in run_ids]
        if all(s == "waiting" for s in statuses):
            return
        assert asyncio.get_running_loop().time() < deadline, sorted(set(statuses))
        await asyncio.sleep(0.2)


async def test_a_hundred_waiting_runs_hold_no_slot(
        metrics_worker: tuple[EmbeddedRedis, int]) -> None:  # noqa: F811
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import get_registry
    from orchestrator.service.waits import submit_form
    from orchestrator.settings import Settings, load_settings
    from orchestrator.store.redis_store import RedisRunStore

    server, port = metrics_worker  # one worker process, 2 node slots
    scrape(port)
    app: Any = make_celery(server.url, Settings())
    store = RedisRunStore.from_url(server.url, Settings())
    dispatch = make_dispatch(app)
    registry = get_registry(load_settings())
    try:
        run_ids = [await start_run(store, registry, FORM_GRAPH, RunRequest({"n": i}), dispatch=dispatch)
                   for i in range(WAITING_RUNS)]
        await all_waiting(store, run_ids)
        gauges = in_flight(scrape(port))
        assert gauges and all(g == 0 for g in gauges), gauges  # no node step holds a slot
        quick = await start_run(store, registry, QUICK_GRAPH, RunRequest({}), dispatch=dispatch)
        await wait_for_terminal(store, quick)
        assert (await store.get_run(quick)).status == "succeeded"  # 100 waits, 2 slots: still free
        for i, run_id in enumerate(run_ids):
            await submit_form(store, run_id, "w", {"answer": i},
                              dispatch=lambda rid, nid: dispatch(rid, [nid]))
        for run_id in run_ids:
            await wait_for_terminal(store, run_id)
        assert {(await store.get_run(r)).status for r in run_ids} == {"succeeded"}
        outputs = await store.read_outputs(run_ids[-1], ["w"])
        assert outputs["w"]["output"].value == {"answer": WAITING_RUNS - 1}
    finally:
        await store.close()
        app.close()
