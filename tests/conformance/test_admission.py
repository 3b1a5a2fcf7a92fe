"""Concurrency keys on the Redis store, one Redis and a cluster (where the run's keys and the
key's state are two slots and admission is split in steps): which runs start, which wait,
and who starts them when a place frees. No workers: dispatches are recorded."""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.store import RunStatus
from orchestrator.service import admission
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph, make_registry


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[str]]] = []

    def __call__(self, run_id: str, nodes: list[str]) -> None:
        self.sent.append((run_id, list(nodes)))

    def runs(self) -> list[str]:
        return [run_id for run_id, _ in self.sent]


def keyed(strategy: str, max_runs: int = 1) -> dict[str, Any]:
    return graph([("t", "emit", "Start"), ("r", "relay", "Relay")], [("t", "out", "r", "in")],
                 id=f"cc-{strategy}",
                 settings={"concurrency": {"key": "{{ $run.input.key }}", "max_runs": max_runs, "strategy": strategy}})


async def test_a_queued_run_waits_unsent_and_starts_when_the_first_ends(redis_store: RedisRunStore) -> None:
    sent = Recorder()
    g = keyed("queue")
    first, second, third = [await start_run(redis_store, make_registry(), g, RunRequest({"key": "k"}),
                                            dispatch=sent) for _ in range(3)]
    other = await start_run(redis_store, make_registry(), g, RunRequest({"key": "other"}), dispatch=sent)
    assert sent.runs() == [first, other]  # one per key in progress; the others are held
    assert (await redis_store.get_run(second)).status == RunStatus.QUEUED
    assert await admission.queue_position(redis_store, second) == 1
    assert await admission.queue_position(redis_store, third) == 2
    # a held run's start node is neither ready nor sent: the sweeper has nothing to send for it
    assert await redis_store.redis.hget(redis_store.keys.sent(second), "t") is None

    assert await redis_store.finish_run(first, RunStatus.CANCELLED)
    assert await admission.release(redis_store, first, sent) == [second]
    assert sent.sent[-1] == (second, ["t"])
    assert (await redis_store.get_run(second)).status == RunStatus.RUNNING
    assert await redis_store.redis.hget(redis_store.keys.sent(second), "t") is not None
    assert await admission.queue_position(redis_store, third) == 1


async def test_cancel_newest_refuses_and_cancel_in_progress_replaces(redis_store: RedisRunStore) -> None:
    sent = Recorder()
    newest = keyed("cancel_newest")
    kept = await start_run(redis_store, make_registry(), newest, RunRequest({"key": "k"}), dispatch=sent)
    refused = await start_run(redis_store, make_registry(), newest, RunRequest({"key": "k"}), dispatch=sent)
    assert sent.runs() == [kept]
    assert (await redis_store.get_run(refused)).status == RunStatus.CANCELLED

    in_progress = keyed("cancel_in_progress")
    old = await start_run(redis_store, make_registry(), in_progress, RunRequest({"key": "k"}), dispatch=sent)
    new = await start_run(redis_store, make_registry(), in_progress, RunRequest({"key": "k"}), dispatch=sent)
    assert sent.runs()[-2:] == [old, new]
    assert (await redis_store.get_run(old)).status == RunStatus.CANCELLED
    assert (await redis_store.get_run(new)).status == RunStatus.RUNNING
