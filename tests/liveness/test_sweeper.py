"""The sweeper against a real Redis and a Redis Cluster (its runs in buckets across the
primaries): deadlines, lost workers, lost dispatches, the lock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from orchestrator.kernel.store import RunStatus, Take
from orchestrator.service.sweeper import Sweeper, SweepLimits, lock_key
from orchestrator.store.redis_store import RedisRunStore
from tests.liveness.conftest import SETTINGS
from tests.support import claim, completed, events_of, make_plan, node_states, record_for

CHAIN = [("a", "out", "b", "in"), ("b", "out", "c", "in")]


@pytest.fixture(params=["redis", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RedisRunStore]:
    if request.param == "cluster":
        url = request.getfixturevalue("cluster_server").url
        settings = SETTINGS.model_copy(update={"redis_url": url})
    else:
        url, settings = request.getfixturevalue("redis_server").url, SETTINGS
    s = RedisRunStore.from_url(url, settings)
    await s.redis.flushdb()
    try:
        yield s
    finally:
        await s.close()


async def start(store: RedisRunStore, *, deadline_s: float = 600) -> str:
    plan = make_plan(["a", "b", "c"], CHAIN)
    await store.create_run(plan, record_for(plan), deadline_s=deadline_s)
    await store.mark_dispatched(plan.run_id, plan.start)
    return plan.run_id


def sweeper(store: RedisRunStore, sent: Any, **kw: Any) -> Sweeper:
    return Sweeper(store, sent, store.settings, limits=SweepLimits(**kw))


async def test_run_past_its_deadline_ends_timed_out_with_a_run_event(
    store: RedisRunStore, sent: Any,
) -> None:
    run_id = await start(store, deadline_s=5)
    report = await sweeper(store, sent).sweep_once(now=time.time() + 10)
    assert report.timed_out == [run_id]
    record = await store.get_run(run_id)
    assert record.status == RunStatus.TIMED_OUT
    assert record.error and record.error["code"] == "run_timed_out"
    assert [e.event_type for e in await events_of(store, run_id)][-1] == "run_timed_out"
    assert await store.redis.zscore(store.keys.active_runs(store.keys.bucket(run_id)), run_id) is None
    assert 1000 < await store.redis.ttl(store.keys.run(run_id)) <= 5000  # retention TTL


async def test_run_before_its_deadline_is_left_alone(store: RedisRunStore, sent: Any) -> None:
    run_id = await start(store, deadline_s=600)
    report = await sweeper(store, sent).sweep_once()
    assert report.timed_out == [] and sent.sent == []
    assert (await store.get_run(run_id)).status == RunStatus.RUNNING


async def test_running_node_whose_lease_expired_is_sent_again(store: RedisRunStore, sent: Any) -> None:
    run_id = await start(store)
    assert (await claim(store, run_id, "a", lease_s=0.05)).kind == "run"
    await asyncio.sleep(0.1)  # the worker "died": nobody renews the lease
    report = await sweeper(store, sent).sweep_once()
    assert report.requeued == [(run_id, "a")]
    assert sent.sent == [(run_id, "a")]
    again = await claim(store, run_id, "a", worker_id="w2")
    assert again.kind == "run" and again.claims == 2
    started = [e for e in await events_of(store, run_id) if e.event_type == "started"]
    assert [bool(e.data and e.data.get("reclaimed")) for e in started] == [False, True]


async def test_running_node_with_a_live_lease_is_not_touched(store: RedisRunStore, sent: Any) -> None:
    run_id = await start(store)
    await claim(store, run_id, "a", lease_s=30)
    report = await sweeper(store, sent).sweep_once()
    assert report.requeued == [] and sent.sent == []
    assert (await node_states(store, run_id))["a"] == "running"


async def test_requeued_node_is_not_sent_again_before_a_worker_could_claim_it(
    store: RedisRunStore, sent: Any,
) -> None:
    run_id = await start(store)
    await claim(store, run_id, "a", lease_s=0.05)
    await asyncio.sleep(0.1)
    s = sweeper(store, sent, undispatched_grace_s=30)
    now = time.time()
    await s.sweep_once(now=now)
    await s.sweep_once(now=now + 1)
    assert sent.sent == [(run_id, "a")]
    # the resend was stamped by Redis's clock during the first pass, which may end well
    # after ``now`` on a busy host (a cluster's pass walks every bucket): the grace counts
    # from that stamp, so the late pass is 31 s after this moment, not after ``now``
    await s.sweep_once(now=time.time() + 31)
    assert sent.sent == [(run_id, "a"), (run_id, "a")]


async def test_node_that_loses_its_worker_too_often_fails_the_run_naming_the_node(
    store: RedisRunStore, sent: Any,
) -> None:
    run_id = await start(store)
    s = sweeper(store, sent, max_node_reclaims=1)
    for worker in ("w1", "w2"):
        assert (await claim(store, run_id, "a", worker_id=worker, lease_s=0.05)).kind == "run"
        await asyncio.sleep(0.1)
        report = await s.sweep_once()
    assert report.lost == [(run_id, "a")]
    assert sent.sent == [(run_id, "a")]  # requeued once, then given up
    record = await store.get_run(run_id)
    assert record.status == RunStatus.FAILED
    assert record.error and record.error["node_id"] == "a" and "worker lost" in record.error["message"]
    states = await node_states(store, run_id)
    assert states["a"] == "failed" and states["b"] == "not_run"  # the run failed before b ran
    errors = [e for e in await events_of(store, run_id) if e.event_type == "error"]
    assert len(errors) == 1 and errors[0].node_id == "a"


async def test_ready_node_never_dispatched_is_dispatched_after_the_grace_period(
    store: RedisRunStore, sent: Any,
) -> None:
    run_id = await start(store)
    await claim(store, run_id, "a")
    # the worker completed "a" and crashed before sending "b"
    assert (await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))).nodes == ["b"]
    s = sweeper(store, sent, undispatched_grace_s=10)
    now = time.time()
    assert (await s.sweep_once(now=now)).dispatched == []
    assert (await s.sweep_once(now=now + 5)).dispatched == []
    assert (await s.sweep_once(now=now + 11)).dispatched == [(run_id, "b")]
    assert sent.sent == [(run_id, "b")]
    assert (await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))).nodes == []
    assert (await s.sweep_once(now=now + 30)).dispatched == []


async def test_a_queue_left_with_no_running_node_gets_its_oldest_node_sent(
    store: RedisRunStore, sent: Any,
) -> None:
    plan = make_plan(["a", "b0", "b1", "b2"], [("a", "out", f"b{i}", "in") for i in range(3)])
    await store.create_run(plan, record_for(plan), deadline_s=600)
    run_id = plan.run_id
    await claim(store, run_id, "a")
    # "a" queued its three successors, took none, and its drain messages died with the worker
    assert (await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), take=Take(0))).backlog == 3
    s = sweeper(store, sent, undispatched_grace_s=10)
    now = time.time()
    assert (await s.sweep_once(now=now)).dispatched == []
    assert (await s.sweep_once(now=now + 11)).dispatched == [(run_id, "b0")]
    assert await store.queue_length(run_id) == 2  # b0's completion takes the next ones
    await claim(store, run_id, "b0")  # a node of the run runs again: nothing more to do
    assert (await s.sweep_once(now=now + 30)).dispatched == []


async def test_a_queue_behind_running_nodes_is_left_to_them(store: RedisRunStore, sent: Any) -> None:
    plan = make_plan(["a", "b0", "b1", "b2"], [("a", "out", f"b{i}", "in") for i in range(3)])
    await store.create_run(plan, record_for(plan), deadline_s=600)
    run_id = plan.run_id
    await claim(store, run_id, "a")
    await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), take=Take(1))
    await claim(store, run_id, "b0")  # running: its completion will take from the queue
    s = sweeper(store, sent, undispatched_grace_s=10)
    now = time.time()
    assert (await s.sweep_once(now=now)).dispatched == []
    assert (await s.sweep_once(now=now + 60)).dispatched == []
    assert await store.queue_length(run_id) == 2


async def test_only_one_of_several_sweepers_works_at_a_time(store: RedisRunStore, sent: Any) -> None:
    run_id = await start(store)
    await claim(store, run_id, "a", lease_s=0.05)
    await asyncio.sleep(0.1)
    await store.redis.set(lock_key(store.keys), "someone-else", px=5000)
    report = await sweeper(store, sent).sweep_once()
    assert not report.locked and sent.sent == []
    await store.redis.delete(lock_key(store.keys))
    reports = await asyncio.gather(*(sweeper(store, sent).sweep_once() for _ in range(4)))
    assert sum(len(r.requeued) for r in reports) >= 1
    assert sent.sent.count((run_id, "a")) == sum(len(r.requeued) for r in reports)
    assert await store.redis.exists(lock_key(store.keys)) == 0  # released after the pass


async def test_sweeper_finished_runs_are_ignored(store: RedisRunStore, sent: Any) -> None:
    run_id = await start(store)
    await store.finish_run(run_id, RunStatus.CANCELLED)
    report = await sweeper(store, sent).sweep_once(now=time.time() + 10_000)
    assert report.timed_out == [] and sent.sent == []
    assert (await store.get_run(run_id)).status == RunStatus.CANCELLED


async def test_run_forever_sweeps_until_cancelled(store: RedisRunStore, sent: Any) -> None:
    run_id = await start(store, deadline_s=0.2)
    task = asyncio.create_task(sweeper(store, sent).run_forever(0.05))
    for _ in range(100):
        if (await store.get_run(run_id)).status == RunStatus.TIMED_OUT:
            break
        await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert (await store.get_run(run_id)).status == RunStatus.TIMED_OUT


async def test_a_pass_cancelled_from_inside_or_stuck_does_not_end_the_sweeper(
    store: RedisRunStore, sent: Any,
) -> None:
    """The sweeper ends every run whatever dies, so only a stop ends it: a pass that a
    library's own cancellation interrupts, and one stuck past its time budget, are logged
    and the next pass sweeps (here: the node whose worker died is sent again)."""
    run_id = await start(store)
    assert (await claim(store, run_id, "a", lease_s=0.05)).kind == "run"
    await asyncio.sleep(0.1)  # the worker "died": nobody renews the lease
    s = sweeper(store, sent, pass_timeout_s=0.3)
    passes = 0
    real_time_out = s._time_out

    async def first_two_passes_go_wrong(now: float, report: Any) -> None:
        nonlocal passes
        passes += 1
        if passes == 1:
            raise asyncio.CancelledError  # not asked of the sweeper's task
        if passes == 2:
            await asyncio.sleep(3600)  # a reply that never comes
        await real_time_out(now, report)

    s._time_out = first_two_passes_go_wrong  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.create_task(s.run_forever(0.05, stop=stop))
    for _ in range(100):
        if sent.sent:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert passes >= 3 and sent.sent == [(run_id, "a")]
    assert task.exception() is None


async def test_a_stopped_sweeper_ends_between_passes_and_leaves_its_client_usable(
    store: RedisRunStore, sent: Any,
) -> None:
    from orchestrator.service.sweeper import start_sweeper, stop_sweeper

    run_id = await start(store, deadline_s=0.2)
    running = start_sweeper(sweeper(store, sent), period_s=0.05)
    for _ in range(100):
        if (await store.get_run(run_id)).status == RunStatus.TIMED_OUT:
            break
        await asyncio.sleep(0.05)
    await stop_sweeper(running, timeout_s=5)
    assert running.task.done() and not running.task.cancelled()
    assert running.task.exception() is None
    assert (await store.get_run(run_id)).status == RunStatus.TIMED_OUT
    assert await store.redis.ping()  # no command was cut off: the shared client still works


async def test_a_retry_long_overdue_is_sent_again_and_a_pending_one_is_left_alone(
    store: RedisRunStore, sent: Any,
) -> None:
    """The delayed message of a retry lives in the worker that scheduled it; if that worker
    died, the sweeper sends the node again once the retry is well past due."""
    from orchestrator.kernel.store import NodeCompletion, NodeStatus

    run_id = await start(store)
    assert (await claim(store, run_id, "a")).kind == "run"
    now = time.time()
    await store.complete_node(run_id, "a", NodeCompletion(status=NodeStatus.RETRYING, next_attempt=2,
                                                          retry_delay_s=0.2))
    sweep = sweeper(store, sent, undispatched_grace_s=5)
    assert (await sweep.sweep_once(now=now + 2)).requeued == []  # due, but not overdue yet
    report = await sweep.sweep_once(now=now + 30)
    assert report.requeued == [(run_id, "a")] and sent.sent == [(run_id, "a")]
    await asyncio.sleep(0.3)  # due by Redis's clock now
    again = await claim(store, run_id, "a", worker_id="w2")
    assert again.kind == "run" and again.attempt == 2


async def fanned_run(store: RedisRunStore, width: int, deadline_s: float) -> str:
    """A run whose start node "a" is claimed, with ``width`` successors."""
    plan = make_plan(["a", *[f"b{i}" for i in range(width)]], [("a", "out", f"b{i}", "in") for i in range(width)])
    await store.create_run(plan, record_for(plan), deadline_s=deadline_s)
    await claim(store, plan.run_id, "a")
    return plan.run_id


async def test_a_pass_corrects_a_drifted_queued_count_and_keeps_what_changed_meanwhile(
    store: RedisRunStore, sent: Any,
) -> None:
    if store.keys.tagged:
        pytest.skip("two runs in one counter: one Redis (a cluster counts per bucket: the conformance suite)")
    counter = store.keys.queued_nodes()
    early = await fanned_run(store, 2, deadline_s=300)  # swept first (nearer deadline)
    late = await fanned_run(store, 3, deadline_s=600)
    await store.complete_node(late, "a", completed(late, "a", ["out"]), take=Take(0))  # 3 queued
    await store.redis.set(counter, 10)  # drift: say, a queued run whose keys expired
    s = sweeper(store, sent, undispatched_grace_s=10)
    check_run = s._check_run

    async def meanwhile(run_id: str, *args: Any) -> int:
        if run_id == late:  # the early run was counted (empty); now it queues two
            await store.complete_node(early, "a", completed(early, "a", ["out"]), take=Take(0))
        return await check_run(run_id, *args)

    s._check_run = meanwhile  # type: ignore[method-assign]
    await s.sweep_once()
    assert await store.queue_length(early) + await store.queue_length(late) == 5
    assert int(await store.redis.get(counter)) == 5  # not 10 (drift), not 3 (what it counted)
