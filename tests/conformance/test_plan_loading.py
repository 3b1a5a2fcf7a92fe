"""A worker process loads a run's plan once: a burst of the run's nodes on a process that
has not seen the run makes one GET and one parse (single flight), against real Redis;
the plan's graph is built without validating it again, and equals the validated one."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.kernel.errors import RunNotFoundError
from orchestrator.kernel.graph import parse_graph, trusted_graph
from orchestrator.kernel.validation import validate_graph
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.store.redis_store import RedisRunStore
from tests.conformance.conftest import command_stats, reset_stats
from tests.fake_nodes import graph, make_registry

WIDE = graph([("t", "emit", "Start")] + [(f"r{i}", "relay", f"Relay {i}") for i in range(50)],
             [("t", "out", f"r{i}", "in") for i in range(50)])


async def gets(store: RedisRunStore) -> int:
    return (await command_stats(store.redis)).get("get", 0)


async def test_a_burst_of_one_runs_nodes_on_a_fresh_process_fetches_its_plan_once(
        redis_store: RedisRunStore) -> None:
    run_id = await start_run(redis_store, make_registry(), WIDE, RunRequest(None), dispatch=lambda r, n: None)
    worker = RedisRunStore(redis_store.redis, redis_store.settings)  # another process: nothing cached
    await reset_stats(redis_store.redis)
    plans = await asyncio.gather(*(worker.load_plan(run_id) for _ in range(50)))
    assert await gets(worker) == 1
    assert all(plan is plans[0] for plan in plans)  # one object: its graph is built once
    assert len(plans[0].order) == 51
    assert await worker.load_plan(run_id) is plans[0]
    assert await gets(worker) == 1


async def test_every_waiter_of_a_missing_plan_hears_it_and_a_later_load_asks_again(
        redis_store: RedisRunStore) -> None:
    await reset_stats(redis_store.redis)
    results = await asyncio.gather(*(redis_store.load_plan("nope") for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, RunNotFoundError) for r in results)
    assert await gets(redis_store) == 1
    with pytest.raises(RunNotFoundError):
        await redis_store.load_plan("nope")
    assert await gets(redis_store) == 2


def test_the_trusted_graph_of_a_validated_snapshot_equals_its_parse() -> None:
    raw = graph([("t", "emit", "Start"), ("r", "relay", "Relay", {"value": "{{ input.x }}"})],
                [("t", "out", "r", "in")], id="g", settings={"deadline_s": 60})
    raw["nodes"][1]["settings"] = {"retry": {"max_attempts": 3, "retry_on": ["TimeoutError"]},
                                   "on_error": "continue", "timeout_s": 5}
    raw["nodes"][1]["position"] = {"x": 1.5, "y": 2}
    raw["edges"][0]["data"]["label"] = "extra"
    snapshot = validate_graph(raw, make_registry()).graph.to_json()
    trusted = trusted_graph(snapshot)
    assert trusted == parse_graph(snapshot)
    assert trusted.to_json() == snapshot
    assert trusted.node_by_id["r"].settings.retry.max_attempts == 3
