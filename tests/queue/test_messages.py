"""Template node messages are the messages Celery publishes on a Redis broker (protocol
v2 as kombu's Redis transport stores them), and the dispatchers push them in one LPUSH."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.queue.app import make_celery
from orchestrator.queue.dispatch import make_async_dispatch, make_dispatch, send_drains, send_nodes
from orchestrator.queue.lanes import queue_for
from orchestrator.queue.messages import NodeMessages, redis_url_of
from orchestrator.settings import Settings

# Per process or per message in Celery too: who sent it, where results would go, kombu's tag.
VARYING = {("headers", "origin"), ("properties", "reply_to"), ("properties", "delivery_tag")}


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as started:
        yield started


@pytest.fixture
def client(server: EmbeddedRedis) -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(server.url)
    r.flushdb()
    try:
        yield r
    finally:
        r.close()


def comparable(raw: bytes) -> dict[str, Any]:
    envelope = json.loads(raw)
    for part, key in VARYING:
        assert envelope[part][key], f"{part}.{key} is empty"
        envelope[part][key] = "*"
    envelope["body"] = json.loads(base64.b64decode(envelope["body"]))
    return dict(envelope)


def lane(run_id: str) -> str:
    return queue_for(run_id, Settings().lanes)


def celery_messages(url: str, client: redis.Redis, run_id: str, node_ids: list[str], plan: str = "") -> list[bytes]:
    """What Celery's own send_task puts on the queue (the path taken with a countdown of 0)."""
    app = make_celery(url, Settings())
    with app.producer_or_acquire() as producer, producer.batch():
        for node_id in node_ids:
            app.send_task("orchestrator.node", args=(run_id, node_id, plan) if plan else (run_id, node_id),
                          task_id=f"{run_id}:{node_id}", queue=lane(run_id), producer=producer)
    raw = client.lrange(lane(run_id), 0, -1)
    client.delete(lane(run_id))
    return list(raw)


def test_a_template_message_is_the_message_celery_publishes(server: EmbeddedRedis, client: redis.Redis) -> None:
    run_id, nodes = "3f2a", ["n1", 'odd "node" \u00e9']
    expected = celery_messages(server.url, client, run_id, nodes)
    send_nodes(make_celery(server.url, Settings()), run_id, nodes)
    got = client.lrange(lane(run_id), 0, -1)
    assert [comparable(m) for m in got] == [comparable(m) for m in expected]
    assert len({json.loads(m)["properties"]["delivery_tag"] for m in got}) == 2  # kombu acks by this tag


def test_a_template_message_with_a_plan_reference_is_the_message_celery_publishes(
        server: EmbeddedRedis, client: redis.Redis) -> None:
    run_id, nodes, plan = "3f2a", ["n1"], "0123456789abcdef0123456789abcdef"
    expected = celery_messages(server.url, client, run_id, nodes, plan)
    send_nodes(make_celery(server.url, Settings()), run_id, nodes, plan=plan)
    got = client.lrange(lane(run_id), 0, -1)
    assert [comparable(m) for m in got] == [comparable(m) for m in expected]
    assert comparable(got[0])["body"][0] == [run_id, "n1", plan]


@pytest.mark.parametrize(("hops", "plan"), [(0, ""), (2, ""), (0, "0123456789abcdef0123456789abcdef")])
def test_a_template_drain_message_is_the_message_celery_publishes(
        server: EmbeddedRedis, client: redis.Redis, hops: int, plan: str) -> None:
    run_id = "3f2a"
    args = (run_id, hops, plan) if plan else (run_id, hops) if hops else (run_id,)
    app = make_celery(server.url, Settings())
    with app.producer_or_acquire() as producer, producer.batch():
        app.send_task("orchestrator.drain", args=args, queue=lane(run_id), producer=producer)
    expected = client.lrange(lane(run_id), 0, -1)
    client.delete(lane(run_id))
    send_drains(app, run_id, 2, hops, plan=plan)
    got = client.lrange(lane(run_id), 0, -1)
    assert len(got) == 2 and got[0] != got[1]  # a task id of its own each, as Celery's
    for message in (*got, *expected):  # the task id is fresh per message: compare the rest
        assert json.loads(message)["headers"]["id"] == json.loads(message)["properties"]["correlation_id"]
    ids = {("headers", "id"), ("headers", "root_id"), ("properties", "correlation_id")}

    def without_ids(raw: bytes) -> dict[str, Any]:
        envelope = comparable(raw)
        for part, key in ids:
            envelope[part][key] = "*"
        return envelope

    assert [without_ids(m) for m in got] == [without_ids(expected[0])] * 2


def test_the_first_node_is_the_first_a_worker_takes(server: EmbeddedRedis, client: redis.Redis) -> None:
    make_dispatch(make_celery(server.url, Settings()))("r", ["a", "b", "c"])
    taken = [json.loads(client.rpop(lane("r")) or b"")["headers"]["id"] for _ in range(3)]  # kombu's BRPOP end
    assert taken == ["r:a", "r:b", "r:c"]


async def test_the_async_dispatcher_pushes_concurrent_calls_in_one_round_trip(
    server: EmbeddedRedis, client: redis.Redis,
) -> None:
    dispatch = make_async_dispatch(make_celery(server.url, Settings()))
    client.config_resetstat()
    try:
        await asyncio.gather(*(dispatch(f"r{i}", ["a"]) for i in range(20)))
    finally:
        await dispatch.aclose()
    assert sum(client.llen(queue) for queue in {lane(f"r{i}") for i in range(20)}) == 20
    stats = client.info("commandstats")
    assert stats["cmdstat_lpush"]["calls"] == 20
    # one connection (made after the reset) carried them all: one pipeline per loop iteration
    assert client.info("stats")["total_connections_received"] == 1


def test_broker_urls_the_template_path_takes() -> None:
    assert redis_url_of("redis://h:6379/2") == "redis://h:6379/2"
    assert redis_url_of("redis+socket:///tmp/r.sock?virtual_host=3") == "unix:///tmp/r.sock?db=3"
    for other in ("amqp://guest@h//", "sentinel://h:26379", "redis://h:6379/0?ssl_cert_reqs=none"):
        assert redis_url_of(other) is None, other


def test_a_message_names_its_task_and_ids() -> None:
    envelope = json.loads(NodeMessages().encode("r1", "n1"))
    assert envelope["headers"]["task"] == "orchestrator.node"
    assert envelope["headers"]["id"] == envelope["properties"]["correlation_id"] == "r1:n1"
    assert json.loads(base64.b64decode(envelope["body"]))[0] == ["r1", "n1"]
