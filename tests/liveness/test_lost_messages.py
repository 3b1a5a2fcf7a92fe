"""The sweeper sends again what was sent and never claimed, and judges every time by
Redis's clock (real Redis; node messages published by a real Celery app, no worker)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.kernel.store import NodeCompletion, NodeStatus, RunStatus
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.queue.lanes import lane_of, queue_for
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.service.sweeper import Sweeper, SweepLimits
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph, make_registry
from tests.support import claim, events_of, make_plan, record_for

GRACE_S = 0.3
CHAIN = graph([("t", "emit", "Start"), ("r", "relay", "Relay")], [("t", "out", "r", "in")])
HOUR_S = 3600.0


def lost(run_id: str, node_ids: list[str]) -> None:
    """A dispatch whose message vanishes (as between kombu's BRPOP and its unacked record)."""


@pytest.fixture
def celery(redis_server: EmbeddedRedis) -> Iterator[Any]:
    from orchestrator.queue.app import make_celery
    from orchestrator.settings import Settings

    app = make_celery(redis_server.url, Settings())
    yield app
    app.close()


def queued(celery: Any) -> Any:
    """A dispatch that leaves real node messages on the broker queue (no worker takes them)."""
    from orchestrator.queue.dispatch import make_dispatch

    return make_dispatch(celery)


async def start(store: RedisRunStore, dispatch: Any) -> str:
    return await start_run(store, make_registry(), CHAIN, RunRequest({"x": 1}), dispatch=dispatch)


def sweeper(store: RedisRunStore, sent: Any) -> Sweeper:
    return Sweeper(store, sent, store.settings, limits=SweepLimits(undispatched_grace_s=GRACE_S))


async def test_a_start_node_sent_and_never_claimed_is_sent_again_after_the_grace(
    store: RedisRunStore, sent: Any,
) -> None:
    run_id = await start(store, lost)
    s = sweeper(store, sent)
    assert (await s.sweep_once()).resent == []  # it may still be on its way
    await asyncio.sleep(GRACE_S + 0.05)
    assert (await s.sweep_once()).resent == [(run_id, "t")]
    assert (await s.sweep_once()).resent == []  # sent again just now: a worker gets a grace
    assert sent.sent == [(run_id, "t")]
    assert (await claim(store, run_id, "t")).kind == "run"  # it arrived this time
    await asyncio.sleep(GRACE_S + 0.05)
    assert (await s.sweep_once()).resent == [] and sent.sent == [(run_id, "t")]


async def test_the_successor_of_a_start_node_resolved_at_start_is_sent_again_when_lost(
    store: RedisRunStore, sent: Any,
) -> None:
    """With the trigger completed by the start (kernel/start.py), its successor is the node
    the start sends, marked sent by the same create script: lost, it is sent again."""
    from orchestrator.kernel.environment import StepOptions
    from orchestrator.kernel.start import Starting

    registry = make_registry()
    entry = graph([("t", "entry", "Start"), ("r", "relay", "Relay")], [("t", "out", "r", "in")])
    request = RunRequest({"x": 1}, starting=Starting(registry, "api", StepOptions()))
    run_id = await start_run(store, registry, entry, request, dispatch=lost)
    s = sweeper(store, sent)
    assert (await s.sweep_once()).resent == []
    await asyncio.sleep(GRACE_S + 0.05)
    assert (await s.sweep_once()).resent == [(run_id, "r")]
    assert (await claim(store, run_id, "r")).kind == "run"


async def test_a_node_whose_message_waits_behind_a_backlog_is_not_sent_again(
    store: RedisRunStore, sent: Any, celery: Any,
) -> None:
    before = await start(store, lost)  # sent first, and lost
    waiting = await start(store, queued(celery))  # its message is still on the broker queue
    s = sweeper(store, sent)
    await asyncio.sleep(GRACE_S + 0.05)
    # the queue is FIFO: what was sent before its oldest message has left it
    assert (await s.sweep_once()).resent == [(before, "t")]
    assert await store.redis.rpop(queue_for(waiting, store.settings.lanes))  # a worker took it ... and lost it
    await asyncio.sleep(GRACE_S + 0.05)
    assert (await s.sweep_once()).resent == [(before, "t"), (waiting, "t")]


async def test_a_message_lost_in_one_lane_is_sent_again_whatever_waits_in_another_lane(
    store: RedisRunStore, sent: Any, celery: Any,
) -> None:
    lanes, flooded, quiet = store.settings.lanes, "ws-a", "ws-b"  # assigned lanes of their own
    backlog = await start_run(store, make_registry(), CHAIN, RunRequest({"x": 1}, meta={"workspace": flooded}),
                              dispatch=queued(celery))  # waits in its lane, never taken
    lost_one = await start_run(store, make_registry(), CHAIN, RunRequest({"x": 1}, meta={"workspace": quiet}),
                               dispatch=lost)
    assert lane_of(backlog, lanes) != lane_of(lost_one, lanes)
    await asyncio.sleep(GRACE_S + 0.05)
    assert (await sweeper(store, sent).sweep_once()).resent == [(lost_one, "t")]
    assert await store.redis.llen(queue_for(backlog, lanes)) == 1


async def test_a_node_whose_lease_lapsed_is_sent_again_only_after_each_grace(
    store: RedisRunStore, sent: Any,
) -> None:
    plan = make_plan(["a", "b"], [("a", "out", "b", "in")])
    await store.create_run(plan, record_for(plan), deadline_s=600)
    await store.mark_dispatched(plan.run_id, ["a"])
    await claim(store, plan.run_id, "a", lease_s=0.05)
    await asyncio.sleep(0.1)  # its worker died
    s = sweeper(store, sent)
    assert (await s.sweep_once()).requeued == [(plan.run_id, "a")]
    assert (await s.sweep_once()).requeued == []  # a worker may be claiming it
    await asyncio.sleep(GRACE_S + 0.05)  # nobody did: that message was lost too
    assert (await s.sweep_once()).requeued == [(plan.run_id, "a")]
    assert sent.sent == [(plan.run_id, "a"), (plan.run_id, "a")]


@pytest.mark.parametrize("skew_s", [HOUR_S, -HOUR_S])
async def test_the_sweeper_judges_deadlines_by_redis_clock_not_its_hosts(
    store: RedisRunStore, sent: Any, monkeypatch: pytest.MonkeyPatch, skew_s: float,
) -> None:
    healthy = await start(store, lost)  # deadline 3600 s from now (the default)
    plan = make_plan(["a"], [])
    await store.create_run(plan, record_for(plan), deadline_s=0.2)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + skew_s)  # this host's clock is off by an hour
    s = sweeper(store, sent)
    assert (await s.sweep_once()).timed_out == []
    await asyncio.sleep(0.25)
    assert (await s.sweep_once()).timed_out == [plan.run_id]
    assert (await store.get_run(healthy)).status == RunStatus.RUNNING


async def test_the_run_store_stamps_deadlines_retries_and_events_with_redis_clock(
    store: RedisRunStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + HOUR_S)  # a host an hour ahead
    plan = make_plan(["a", "b"], [("a", "out", "b", "in")])
    await store.create_run(plan, record_for(plan), deadline_s=60)
    seconds, micros = await store.redis.time()
    redis_now = int(seconds) + int(micros) / 1e6
    deadline = await store.redis.zscore(store.keys.active_runs(), plan.run_id)
    assert deadline is not None and abs(deadline - (redis_now + 60)) < 5
    assert abs((await store.get_run(plan.run_id)).created_at - redis_now) < 5
    await claim(store, plan.run_id, "a")  # its started event was made on this host
    retry = NodeEvent(run_id=plan.run_id, node_id="a", node_type="fake", event_type=EventType.RETRY)
    await store.complete_node(plan.run_id, "a", NodeCompletion(
        status=NodeStatus.RETRYING, next_attempt=2, retry_delay_s=30, events=[retry]))
    due = await store.redis.hget(store.keys.claims(plan.run_id), "retry_at:a")
    assert due is not None and abs(float(due) - (redis_now + 30)) < 5
    events = await events_of(store, plan.run_id)
    assert [e.event_type for e in events] == ["run_started", "started", "retry"]
    assert all(abs(e.timestamp - redis_now) < 5 for e in events)


# --- the broker elsewhere (ORCH_BROKER_URL): its lanes are read where they are -------------


@pytest.fixture(scope="module")
def broker_server() -> Iterator[EmbeddedRedis]:

    with EmbeddedRedis(unix_socket=False) as server:
        yield server


@pytest.fixture
async def split(redis_server: EmbeddedRedis, broker_server: EmbeddedRedis) -> Any:
    """A store on the state Redis whose settings put the broker on a second Redis, and a
    Celery app publishing there (no worker takes anything)."""
    from orchestrator.queue import depth
    from orchestrator.queue.app import make_celery
    from tests.liveness.conftest import SETTINGS

    settings = SETTINGS.model_copy(update={"broker_url": broker_server.url, "max_queued_nodes": 2})
    s = RedisRunStore.from_url(redis_server.url, settings)
    await s.redis.flushdb()
    broker = RedisRunStore.from_url(broker_server.url, settings).redis
    await broker.flushdb()
    app = make_celery(redis_server.url, settings)
    depth.reset()
    try:
        yield s, app, broker
    finally:
        app.close()
        depth.reset()
        await depth.close_clients()
        await broker.aclose()
        await s.close()


async def test_a_backlog_on_the_brokers_own_redis_is_not_sent_again(split: Any, sent: Any) -> None:
    store, app, broker = split
    waiting = await start(store, queued(app))
    lane = queue_for(waiting, store.settings.lanes)
    assert await broker.llen(lane) == 1 and await store.redis.llen(lane) == 0  # on the broker, not the state
    s = Sweeper(store, sent, store.settings, limits=SweepLimits(undispatched_grace_s=GRACE_S))
    await asyncio.sleep(GRACE_S + 0.05)
    assert (await s.sweep_once()).resent == []  # still waiting on the broker: not lost
    assert await broker.rpop(lane)  # a worker took it ... and lost it
    await asyncio.sleep(GRACE_S + 0.05)
    assert (await s.sweep_once()).resent == [(waiting, "t")]


async def test_back_pressure_counts_the_messages_on_the_brokers_own_redis(split: Any) -> None:
    from orchestrator.errors import OverloadedError
    from orchestrator.queue import depth
    from orchestrator.service import admission

    store, app, _ = split
    await admission.check(store.redis, store.settings)  # nothing queued yet
    for _ in range(2):
        await start(store, queued(app))
    depth.reset()  # the reading a start reuses for half a second
    with pytest.raises(OverloadedError, match="2 nodes are queued"):
        await admission.check(store.redis, store.settings)


@pytest.mark.parametrize(("ready", "resent"), [(3, False), (0, True)])
async def test_on_rabbitmq_a_lane_with_messages_ready_counts_none_lost(
    store: RedisRunStore, sent: Any, monkeypatch: pytest.MonkeyPatch, ready: int, resent: bool,
) -> None:
    """RabbitMQ's queues cannot be read without taking their messages: a lane with
    messages ready may hold the node's, so nothing of it is sent again this pass."""
    from orchestrator.queue import depth

    async def sample(url: str, queues: list[str]) -> dict[str, int]:
        assert url.startswith("amqp://")
        return dict.fromkeys(queues, ready)

    monkeypatch.setattr(depth, "node_queue_depth", sample)
    settings = store.settings.model_copy(update={"broker_url": "amqp://guest:guest@127.0.0.1:1//"})
    run_id = await start(store, lost)
    await asyncio.sleep(GRACE_S + 0.05)
    report = await Sweeper(store, sent, settings, limits=SweepLimits(undispatched_grace_s=GRACE_S)).sweep_once()
    assert report.resent == ([(run_id, "t")] if resent else [])
