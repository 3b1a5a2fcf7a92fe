"""EventHub: one Redis reader per run, fanned out to every subscriber, against a real
redis-server; and many SSE streams through the endpoint on a small Redis pool."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from orchestrator.api import create_app
from orchestrator.api.event_hub import EventHub, HubConfig
from orchestrator.kernel.errors import RunNotFoundError
from orchestrator.kernel.store import RunStatus
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.store.keys import Keys
from tests.api.conftest import Api, api_registry, make_settings
from tests.api.test_events import add_progress, make_run, parse_sse


def make_hub(api: Api, **options: Any) -> EventHub:
    async def run_over(run_id: str) -> bool:
        try:
            return (await api.store.get_run(run_id)).status in RunStatus.TERMINAL
        except RunNotFoundError:
            return True

    return EventHub(api.redis, Keys(api.settings.key_prefix), run_over, HubConfig(**options))


@pytest.fixture
async def hub(api: Api) -> AsyncIterator[EventHub]:
    hub = make_hub(api)
    yield hub
    await hub.close()


async def collect(hub: EventHub, run_id: str, after: str = "0-0") -> list[str]:
    return [d.stream_id async for d in hub.subscribe(run_id, after)]


async def stored_ids(api: Api, run_id: str) -> list[str]:
    return [sid for sid, _ in await api.store.read_events(run_id, count=100_000)]


async def until(condition: Any, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting until {what}")


async def blocked_xread_connections(redis: Redis) -> int:
    clients: Any = await redis.client_list()
    return sum(1 for c in clients if c.get("cmd") == "xread" and "b" in c.get("flags", ""))


async def test_many_subscribers_of_one_run_each_get_every_event_once_in_order(api: Api, hub: EventHub) -> None:
    await make_run(api, "r1")
    followers = [asyncio.create_task(collect(hub, "r1")) for _ in range(30)]
    await until(lambda: hub.subscribers("r1") == 30, "all 30 subscribed")
    await add_progress(api, "r1", 40)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    received = await asyncio.gather(*followers)
    everything = await stored_ids(api, "r1")
    assert all(ids == everything for ids in received)
    assert hub.readers == 0  # the reader stopped after the terminal event


async def test_late_subscribers_get_history_then_live_tail_with_no_gap_or_duplicate(api: Api, hub: EventHub) -> None:
    await make_run(api, "r1")
    late: list[asyncio.Task[list[str]]] = []

    async def produce() -> None:
        for i in range(240):
            await add_progress(api, "r1", 1, start=i)
            if i % 30 == 0:  # join while events are being written
                late.append(asyncio.create_task(collect(hub, "r1")))
            await asyncio.sleep(0)
        await api.store.finish_run("r1", RunStatus.CANCELLED)

    first = asyncio.create_task(collect(hub, "r1"))
    await produce()
    received = await asyncio.gather(first, *late)
    everything = await stored_ids(api, "r1")
    assert len(received) == 9
    assert all(ids == everything for ids in received)


async def test_a_subscriber_resuming_mid_stream_gets_only_what_follows(api: Api, hub: EventHub) -> None:
    await make_run(api, "r1")
    await add_progress(api, "r1", 10)
    everything = await stored_ids(api, "r1")
    resumed = asyncio.create_task(collect(hub, "r1", after=everything[4]))
    await until(lambda: hub.subscribers("r1") == 1, "subscribed")
    await add_progress(api, "r1", 5, start=10)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    assert await resumed == (await stored_ids(api, "r1"))[5:]


async def test_one_reader_serves_a_run_however_many_subscribe(api: Api, hub: EventHub) -> None:
    await make_run(api, "r1")
    await make_run(api, "r2")
    followers = [asyncio.create_task(collect(hub, run)) for run in ("r1", "r2") for _ in range(25)]
    await until(lambda: hub.subscribers("r1") == hub.subscribers("r2") == 25, "all subscribed")
    for _ in range(500):  # the readers' first read never blocks; then each blocks
        if await blocked_xread_connections(api.redis) == 2:
            break
        await asyncio.sleep(0.01)
    assert hub.readers == 2
    assert await blocked_xread_connections(api.redis) == 2
    started_s, reads_before_events = time.monotonic(), hub.reads("r1")  # the reader's first reads
    await add_progress(api, "r1", 20)
    reads_before_terminal = hub.reads("r1") - reads_before_events
    elapsed_s = time.monotonic() - started_s
    for run in ("r1", "r2"):
        await api.store.finish_run(run, RunStatus.CANCELLED)
    await asyncio.gather(*followers)
    # The one reader makes at most two XREADs per event (the one that returns it, and a
    # non-blocking one that finds the stream drained) plus one per elapsed block timeout;
    # a reader per subscriber would make at least 25 per event.
    block_timeouts = 1 + int(elapsed_s * 1000 / hub.block_ms)
    assert reads_before_terminal <= 2 * 20 + block_timeouts
    assert hub.readers == 0
    assert await blocked_xread_connections(api.redis) == 0


async def test_the_reader_stops_when_its_last_subscriber_leaves(api: Api, hub: EventHub) -> None:
    await make_run(api, "r1")
    followers = [asyncio.create_task(collect(hub, "r1")) for _ in range(3)]
    await until(lambda: hub.subscribers("r1") == 3, "subscribed")
    followers[0].cancel()
    await asyncio.sleep(0.05)
    assert hub.readers == 1
    for task in followers[1:]:
        task.cancel()
    await asyncio.gather(*followers, return_exceptions=True)
    await until(lambda: hub.readers == 0, "the reader stopped")
    for _ in range(100):  # the server notices the closed connection a moment later
        if await blocked_xread_connections(api.redis) == 0:
            break
        await asyncio.sleep(0.01)
    assert await blocked_xread_connections(api.redis) == 0


async def test_a_slow_subscriber_is_dropped_without_affecting_the_others(api: Api) -> None:
    # Five deliveries of slack and at most five per read: a subscriber that reads empties
    # its queue while the reader awaits its next read, the one that stops reading
    # overflows (with reads of 200, one burst of 30 would overflow every queue of 5).
    hub = make_hub(api, queue_size=5, batch=5)
    await make_run(api, "r1")
    slow_received: list[str] = []
    slow_may_read = asyncio.Event()

    async def slow() -> None:
        async for delivery in hub.subscribe("r1"):
            slow_received.append(delivery.stream_id)
            await slow_may_read.wait()

    async def fast(got: list[str]) -> list[str]:
        async for delivery in hub.subscribe("r1"):
            got.append(delivery.stream_id)
        return got

    fast_received: list[list[str]] = [[], [], []]
    followers = [asyncio.create_task(fast(got)) for got in fast_received]
    lagging = asyncio.create_task(slow())
    # Every subscriber has its history (run_started) and waits on its queue: the live tail.
    await until(lambda: all(len(got) == 1 for got in [*fast_received, slow_received]), "all subscribed")
    await asyncio.sleep(0.05)
    await add_progress(api, "r1", 30)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    received = await asyncio.gather(*followers)
    slow_may_read.set()
    await lagging  # its stream ended early instead of blocking the others
    everything = await stored_ids(api, "r1")
    assert all(ids == everything for ids in received)
    assert hub.dropped == 1
    assert slow_received == everything[: len(slow_received)] and len(slow_received) < len(everything)
    # Reconnecting after the last id it got loses nothing.
    assert slow_received + await collect(hub, "r1", after=slow_received[-1]) == everything
    await hub.close()


async def test_two_hundred_streams_work_with_a_pool_of_fifty_connections(redis_server: EmbeddedRedis) -> None:
    settings = make_settings(redis_server, redis_url=f"{redis_server.url}?max_connections=50")
    app = create_app(settings, registry=api_registry(), dispatch=lambda run_id, nodes: None)
    services, hub = app.state.services, app.state.event_hub
    assert services.redis.connection_pool.max_connections == 50
    api = Api(client=None, redis=services.redis, settings=settings, store=services.runs)  # type: ignore[arg-type]
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api", timeout=60)
    try:
        await make_run(api, "r1")
        streams = [asyncio.create_task(client.get("/runs/r1/events")) for _ in range(200)]
        await until(lambda: hub.subscribers("r1") == 200, "200 streams subscribed")
        assert hub.readers == 1
        await add_progress(api, "r1", 10)
        await api.store.finish_run("r1", RunStatus.CANCELLED)
        responses = await asyncio.gather(*streams)
        assert [r.status_code for r in responses] == [200] * 200
        everything = await stored_ids(api, "r1")
        for response in responses:
            frames = parse_sse(response.text)
            assert [f["id"] for f in frames] == everything
            assert frames[-1]["event"] == "run_cancelled"
            assert json.loads(frames[1]["data"])["event_type"] == "progress"
    finally:
        await client.aclose()
        await hub.close()
        await services.redis.aclose()


async def test_redis_unavailable_is_a_503_naming_the_store(redis_server: EmbeddedRedis) -> None:
    from orchestrator.local.embedded_redis import free_port

    settings = make_settings(redis_server, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    app = create_app(settings, registry=api_registry(), dispatch=lambda run_id, nodes: None)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    try:
        response = await client.get("/runs/r1/events")
        assert response.status_code == 503
        error = response.json()["error"]
        assert error["code"] == "store_unavailable" and "Redis" in error["message"]
        assert response.headers["Retry-After"]
    finally:
        await client.aclose()
        await app.state.services.redis.aclose()


async def test_a_subscriber_cancelled_at_any_moment_leaves_and_its_reader_stops(api: Api, hub: EventHub) -> None:
    """A client that goes away mid-replay: its stream ends whatever redis-py call it was in
    (on Python 3.11 redis-py's writes could swallow the cancellation; CPython gh-86296)."""
    import random

    await make_run(api, "r1")
    await add_progress(api, "r1", 20)
    rng = random.Random(7)
    for _ in range(150):
        follower = asyncio.create_task(collect(hub, "r1"))
        await asyncio.sleep(rng.random() * 0.003)
        follower.cancel()
        done, _ = await asyncio.wait({follower}, timeout=2)
        assert done, "a cancelled subscriber kept its stream open"
    await until(lambda: hub.readers == 0 and hub.subscribers("r1") == 0, "the reader stopped")
