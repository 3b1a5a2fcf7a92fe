"""Concurrency keys for runs on real workers: a graph's settings.concurrency holds runs of
one key to ``max_runs`` in progress, by its strategy (orchestrator/service/admission.py)."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from orchestrator.kernel.registry import Registry
from orchestrator.kernel.store import RunStatus
from orchestrator.queue.dispatch import make_dispatch
from orchestrator.service import admission
from orchestrator.service.runs import RunRequest, start_run
from tests.fake_nodes import graph
from tests.integration.conftest import wait_for_terminal

pytestmark = pytest.mark.integration


def keyed_graph(strategy: str, max_runs: int = 1, delay_s: float = 0.05,
                key: str = "{{ $run.input.key }}") -> dict[str, Any]:
    return graph([("t", "manual_trigger", "Start"), ("p", "probe", "Work", {"delay_s": delay_s})],
                 [("t", "output", "p", "input")], id=f"cc-{strategy}-{time.time_ns()}",
                 settings={"concurrency": {"key": key, "max_runs": max_runs, "strategy": strategy}})


async def _start_all(store: Any, registry: Registry, celery: Any, g: dict[str, Any],
                     inputs: list[Any]) -> list[str]:
    dispatch = make_dispatch(celery)
    return [await start_run(store, registry, g, RunRequest(i), dispatch=dispatch) for i in inputs]


async def _work_interval(store: Any, run_id: str) -> tuple[float, float]:
    value = (await store.read_outputs(run_id, ["p"]))["p"]["output"].value
    return value["start"], value["end"]


async def test_fifty_runs_of_one_key_with_max_one_run_strictly_one_after_another(
        workers: Any, store: Any, registry: Registry, celery: Any) -> None:
    runs = await _start_all(store, registry, celery, keyed_graph("queue"), [{"key": "k"}] * 50)
    # the last run waits, visibly, behind the others still held (the first ones may have run by
    # now: each takes 0.05 s and starting fifty takes longer; the order is checked below)
    last = await admission.queue_position(store, runs[-1])
    assert last is not None and last >= 25, last
    assert (await store.get_run(runs[-1])).status == RunStatus.QUEUED
    for run_id in runs:
        events = await wait_for_terminal(store, run_id, timeout_s=60)
        assert events[-1][1].event_type == "run_completed"
    intervals = [await _work_interval(store, r) for r in runs]
    # in start order, and never two at once
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(intervals)), intervals


async def test_cancel_in_progress_leaves_only_the_newest_to_complete(
        workers: Any, store: Any, registry: Registry, celery: Any) -> None:
    runs = await _start_all(store, registry, celery, keyed_graph("cancel_in_progress", delay_s=1.0),
                            [{"key": "k"}] * 5)
    statuses = []
    for run_id in runs:
        await wait_for_terminal(store, run_id, timeout_s=30)
        statuses.append((await store.get_run(run_id)).status)
    assert statuses == [RunStatus.CANCELLED] * 4 + [RunStatus.SUCCEEDED]


async def test_cancel_newest_refuses_runs_while_one_is_in_progress(
        workers: Any, store: Any, registry: Registry, celery: Any) -> None:
    runs = await _start_all(store, registry, celery, keyed_graph("cancel_newest", delay_s=1.0),
                            [{"key": "k"}] * 3)
    statuses = []
    for run_id in runs:
        await wait_for_terminal(store, run_id, timeout_s=30)
        statuses.append((await store.get_run(run_id)).status)
    assert statuses == [RunStatus.SUCCEEDED, RunStatus.CANCELLED, RunStatus.CANCELLED]


async def test_round_robin_takes_waiting_runs_one_key_at_a_time(
        workers: Any, store: Any, registry: Registry, celery: Any) -> None:
    # a occupies the one place; then 3 runs of a, 3 of b, 1 of c queue in that order
    inputs = [{"key": "a"}] * 4 + [{"key": "b"}] * 3 + [{"key": "c"}]
    runs = await _start_all(store, registry, celery, keyed_graph("round_robin", delay_s=0.05), inputs)
    for run_id in runs:
        await wait_for_terminal(store, run_id, timeout_s=60)
    starts = [(await _work_interval(store, r))[0] for r in runs]
    order = [inputs[i]["key"] for i in sorted(range(len(runs)), key=lambda i: starts[i])]
    assert order == ["a", "a", "b", "c", "a", "b", "a", "b"]


async def test_cancelling_a_queued_run_takes_it_out_of_the_queue(
        workers: Any, store: Any, registry: Registry, celery: Any) -> None:
    runs = await _start_all(store, registry, celery, keyed_graph("queue", delay_s=0.5), [{"key": "k"}] * 3)
    assert await admission.queue_position(store, runs[2]) == 2
    assert await store.finish_run(runs[1], RunStatus.CANCELLED)
    await admission.release(store, runs[1], make_dispatch(celery))
    assert await admission.queue_position(store, runs[2]) == 1
    for run_id in (runs[0], runs[2]):
        events = await wait_for_terminal(store, run_id, timeout_s=30)
        assert events[-1][1].event_type == "run_completed"
    assert (await store.get_run(runs[1])).status == RunStatus.CANCELLED
    assert (await store.node_states(runs[1]))["p"] == "not_run"
