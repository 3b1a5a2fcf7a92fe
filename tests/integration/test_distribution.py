"""Distributed behaviour: real parallelism across worker processes, and redelivered tasks."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
import redis

from orchestrator.queue.lanes import lane_queues
from orchestrator.settings import Settings
from tests.fake_nodes import graph

pytestmark = pytest.mark.integration

FAN_WIDTH = 20
QUEUES = lane_queues(Settings().lanes)  # every lane's Redis list
UNACKED = "unacked"  # kombu's Redis ack-emulation hash


async def wait_for_drained_queue(client: redis.Redis, timeout_s: float = 15.0) -> None:
    """Until no node task is queued or delivered-but-unacked (seen twice in a row)."""
    calm = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while calm < 2:
        busy = sum(client.llen(q) for q in QUEUES) or client.hlen(UNACKED)
        calm = 0 if busy else calm + 1
        if loop.time() > deadline:
            raise AssertionError("node tasks still queued or unacked")
        await asyncio.sleep(0.1)


def event_counts(events: list[tuple[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter((e.node_id, e.event_type) for _, e in events)


async def test_wide_fan_out_runs_in_parallel_on_several_worker_processes(run_graph: Any) -> None:
    branches = [f"p{i}" for i in range(FAN_WIDTH)]
    g = graph(
        [("t", "manual_trigger", "Start"),
         *[(b, "probe", f"Branch {i}", {"delay_s": 0.4, "value": i})
           for i, b in enumerate(branches)],
         ("join", "probe", "Join")],
        [*[("t", "output", b, "input") for b in branches],
         *[(b, "output", "join", "input") for b in branches]],
    )
    result = await run_graph(g, {"go": True})
    assert result.status == "succeeded"
    records = [result.output(b) for b in branches]
    assert sorted(r["value"] for r in records) == list(range(FAN_WIDTH))
    assert len({r["pid"] for r in records}) >= 2
    overlapping = [
        (a, b) for a in records for b in records
        if a["pid"] != b["pid"] and a["start"] < b["end"] and b["start"] < a["end"]
    ]
    assert overlapping, "no two branches ran at the same time"
    joined = result.output("join")["input"]
    assert sorted(item["value"] for item in joined) == list(range(FAN_WIDTH))
    assert len(result.of("join", "started")) == 1


async def test_redelivered_tasks_after_the_run_ended_change_nothing(
    run_graph: Any, store: Any, celery: Any, sync_redis: redis.Redis,
) -> None:
    from orchestrator.queue.dispatch import send_nodes

    g = graph(
        [("t", "manual_trigger", "Start"), ("a", "probe", "A"), ("b", "probe", "B")],
        [("t", "output", "a", "input"), ("a", "output", "b", "input")],
    )
    result = await run_graph(g, {"n": 1})
    assert result.status == "succeeded"
    send_nodes(celery, result.run_id, ["t", "a", "b"])
    await wait_for_drained_queue(sync_redis)
    after = await store.read_events(result.run_id)
    assert after == result.events
    assert await store.node_states(result.run_id) == result.states


async def test_task_delivered_twice_while_its_node_runs_completes_once(
    workers: Any, store: Any, registry: Any, celery: Any, sync_redis: redis.Redis,
    wait_terminal: Any,
) -> None:
    from orchestrator.queue.dispatch import make_dispatch, send_nodes
    from orchestrator.service.runs import RunRequest, start_run

    g = graph(
        [("t", "manual_trigger", "Start"), ("slow", "probe", "Slow", {"delay_s": 1.5}),
         ("next", "probe", "Next")],
        [("t", "output", "slow", "input"), ("slow", "output", "next", "input")],
    )
    run_id = await start_run(store, registry, g, RunRequest({"n": 1}), dispatch=make_dispatch(celery))
    after = "0-0"
    started = False
    while not started:
        batch = await store.read_events(run_id, after=after, block_ms=5000)
        assert batch, "the slow node never started"
        for event_id, event in batch:
            after = event_id
            started = started or (event.node_id == "slow" and event.event_type == "started")
    send_nodes(celery, run_id, ["slow"])  # a second copy while the first one runs
    await wait_terminal(run_id)
    await wait_for_drained_queue(sync_redis)
    events = await store.read_events(run_id)  # including anything a late duplicate appended
    counts = event_counts(events)
    assert counts[("slow", "started")] == 1
    assert counts[("slow", "completed")] == 1
    assert counts[("next", "completed")] == 1
    assert counts[("", "run_completed")] == 1
