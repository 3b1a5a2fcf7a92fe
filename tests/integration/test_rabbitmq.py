"""The broker apart from the state: Celery on RabbitMQ (a quorum queue), run state in Redis.

The module starts its own RabbitMQ node (tests/support/rabbitmq.py), its own redis-server
and two Celery worker processes whose broker is ``ORCH_BROKER_URL=amqp://...``; a sweeper
runs in the test's loop as in test_faults. Each test is a behaviour a deployment that moves
its broker to RabbitMQ relies on: runs spread over workers, retries wait in the broker
(native delayed delivery) and come back, a killed worker's node runs again and completes
once, the queue really is a quorum queue, back-pressure counts the broker's messages, and a
flood of one workspace's runs does not hold another workspace's run behind it (lanes).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection

from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.service.sweeper import Sweeper
from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph
from tests.integration.conftest import collect, completions, sweeping_every, wait_for_terminal
from tests.integration.conftest import run_through as run
from tests.support import rabbitmq

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not rabbitmq.available(),
                       reason="rabbitmq-server is not installed (apt-get install rabbitmq-server)"),
]

HERE = Path(__file__).parent
NODE_PATHS = os.pathsep.join([str(HERE / "fault_pack"), str(HERE / "fake_pack")])
LEASE_S = 2.0
SWEEP_PERIOD_S = 0.5


@pytest.fixture(scope="module")
def broker() -> Iterator[rabbitmq.RabbitServer]:
    server = rabbitmq.started()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as s:
        yield s


@pytest.fixture(scope="module")
def settings(broker: rabbitmq.RabbitServer) -> Settings:
    return Settings(node_lease_s=LEASE_S, node_paths=NODE_PATHS, broker_url=broker.url)


@pytest.fixture(scope="module")
def pool(server: EmbeddedRedis, broker: rabbitmq.RabbitServer) -> Iterator[WorkerProcesses]:
    env = {"ORCH_NODE_PATHS": NODE_PATHS, "ORCH_NODE_LEASE_S": str(LEASE_S), "ORCH_BROKER_URL": broker.url}
    # grace_s: the last test leaves its flood of runs running; a warm stop would wait them out.
    with WorkerProcesses(server.url, WorkerConfig(count=2, concurrency=4, env=env, grace_s=2.0)) as procs:
        yield procs


@pytest.fixture(scope="module")
def registry(settings: Settings) -> Registry:
    from orchestrator.service.plugins import load_registry

    return load_registry(settings)


@pytest.fixture(scope="module")
def celery(server: EmbeddedRedis, settings: Settings) -> Iterator[Any]:
    from orchestrator.queue.app import make_celery

    app = make_celery(server.url, settings)
    yield app
    app.close()


@pytest.fixture
async def store(server: EmbeddedRedis, settings: Settings) -> AsyncIterator[RedisRunStore]:
    s = RedisRunStore.from_url(server.url, settings)
    yield s
    await s.close()


@pytest.fixture
async def sweeping(store: RedisRunStore, celery: Any, settings: Settings) -> AsyncIterator[Sweeper]:
    async with sweeping_every(SWEEP_PERIOD_S, store, celery, settings) as sweeper:
        yield sweeper


async def test_a_fan_out_runs_on_both_workers_through_rabbitmq(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any, sweeping: Sweeper,
) -> None:
    branches = [f"p{i}" for i in range(8)]
    g = graph(
        [("t", "manual_trigger", "Start"),
         *[(b, "probe", f"Branch {i}", {"delay_s": 0.5, "value": i}) for i, b in enumerate(branches)],
         ("join", "probe", "Join")],
        [*[("t", "output", b, "input") for b in branches], *[(b, "output", "join", "input") for b in branches]],
    )
    result = await run(store, registry, celery, g)
    assert result.status == "succeeded"
    assert sorted(item["value"] for item in result.output("join")["input"]) == list(range(8))
    assert len({result.output(b)["pid"] for b in branches}) == 2, "both workers took nodes"
    assert set(completions(result).values()) == {1}


async def test_a_retry_waits_in_the_broker_and_runs_again(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any, sweeping: Sweeper,
) -> None:
    g = graph([("t", "manual_trigger", "Start"), ("f", "flaky", "Flaky", {"fail_times": 1})],
              [("t", "output", "f", "input")])
    g["nodes"][1]["settings"] = {"retry": {"max_attempts": 2, "initial_interval_s": 1.5, "jitter": False}}
    result = await run(store, registry, celery, g)
    assert result.status == "succeeded"
    assert result.output("f")["attempt"] == 2
    (retry,) = result.of("f", "retry")
    _, second = result.of("f", "started")
    assert second.timestamp - retry.timestamp >= 1.4, "the retry waited for its delay"


async def test_a_killed_worker_s_node_runs_again_and_completes_once(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any, sweeping: Sweeper,
    tmp_path: Path,
) -> None:
    g = graph(
        [("t", "manual_trigger", "Start"),
         ("s", "stall", "Stall", {"pid_dir": str(tmp_path), "delay_s": 2, "value": "kept"}),
         ("p", "probe", "After")],
        [("t", "output", "s", "input"), ("s", "output", "p", "input")],
    )
    from orchestrator.queue.dispatch import make_dispatch

    run_id = await start_run(store, registry, g, RunRequest({"x": 1}), dispatch=make_dispatch(celery))
    deadline = time.monotonic() + 20
    while not list(tmp_path.glob("s.*")):
        assert time.monotonic() < deadline, "the stall node never started"
        await asyncio.sleep(0.05)
    victim = int(next(tmp_path.glob("s.*")).name.split(".")[1])
    assert victim in pool.pids
    os.kill(victim, signal.SIGKILL)
    result = await collect(store, run_id, await wait_for_terminal(store, run_id, 40))
    assert result.status == "succeeded"
    assert result.output("s")["value"] == "kept"
    assert set(completions(result).values()) == {1}
    assert len(result.of("s", "started")) >= 2
    index = pool.pids.index(victim)
    pool.procs[index].wait(timeout=10)
    pool.procs.pop(index)


def test_the_node_queue_is_a_durable_quorum_queue(celery: Any, pool: WorkerProcesses,
                                                  broker: rabbitmq.RabbitServer) -> None:
    from amqp.exceptions import PreconditionFailed

    from orchestrator.queue.app import NODE_QUEUE

    with Connection(broker.url) as conn:
        channel = conn.channel()
        _, _, consumers = channel.queue_declare(NODE_QUEUE, passive=True)
        assert consumers >= 1
        # declaring it as a classic queue is refused: the broker has it as a quorum queue
        with pytest.raises(PreconditionFailed, match="x-queue-type"):
            channel.queue_declare(NODE_QUEUE, durable=True, auto_delete=False,
                                  arguments={"x-queue-type": "classic"})


def _queue_settles(conn: Connection, queue: str, settled: Callable[[int, int], bool]) -> None:
    """Wait (at most 10 s) until the broker's (message count, consumer count) of ``queue`` satisfy ``settled``."""
    deadline = time.monotonic() + 10.0
    while True:
        channel: Any = conn.default_channel  # an amqp Channel (kombu types it as StdChannel)
        _, count, consumers = channel.queue_declare(queue, passive=True)
        if settled(count, consumers):
            return
        assert time.monotonic() < deadline, f"{queue}: {count} messages, {consumers} consumers after 10 s"
        time.sleep(0.05)


async def test_back_pressure_counts_the_messages_waiting_in_rabbitmq(
    server: EmbeddedRedis, broker: rabbitmq.RabbitServer, settings: Settings, pool: WorkerProcesses,
) -> None:
    """Messages in the broker's queue that no worker has taken count against
    ORCH_MAX_QUEUED_NODES: start messages published on a queue nobody consumes (a second
    vhost-free queue name) do not; the node queue's own do."""
    from redis.asyncio import Redis

    from orchestrator.errors import OverloadedError
    from orchestrator.queue import depth
    from orchestrator.queue.app import NODE_QUEUE
    from orchestrator.service import admission

    depth.reset()
    redis = Redis.from_url(server.url)
    bounded = settings.model_copy(update={"max_queued_nodes": 5})
    try:
        await admission.check(redis, bounded)  # the queue is empty: admitted
        pool.stop()  # nobody consumes: what is published stays in the queue
        # the broker learns of the dead consumers on its own time, and a quorum queue counts
        # a message once its log has it: wait for both (confirmed publishes), bounded
        with Connection(broker.url, transport_options={"confirm_publish": True}) as conn:
            _queue_settles(conn, NODE_QUEUE, lambda _count, consumers: consumers == 0)
            producer = conn.Producer()
            for _ in range(5):
                producer.publish({"noop": True}, routing_key=NODE_QUEUE, exchange=NODE_QUEUE,
                                 declare=[], serializer="json")
            _queue_settles(conn, NODE_QUEUE, lambda count, _consumers: count == 5)
        depth.reset()
        with pytest.raises(OverloadedError, match="5 nodes are queued"):
            await admission.check(redis, bounded)
    finally:
        depth.reset()
        await redis.aclose()
        with Connection(broker.url) as conn:
            conn.channel().queue_purge(NODE_QUEUE)
        pool.dir.mkdir(parents=True, exist_ok=True)  # stop() removed it
        pool.start()  # the module's later tests need workers again


async def test_another_workspace_s_run_is_not_held_behind_a_flood_of_runs_on_rabbitmq(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any, settings: Settings,
) -> None:
    """Each lane is a consumer with its own prefetch: the flooded lane holds at most that
    many of a worker's messages, and the other workspace's lane is served at once (two
    workspaces hashing would put on one lane: assigned lanes of their own)."""
    from orchestrator.queue.dispatch import make_dispatch
    from tests.integration.test_lanes import COLLIDING_FLOODER, COLLIDING_VICTIM, flood_then_other

    took_s, flood_left_s = await flood_then_other(store, registry, make_dispatch(celery), settings.lanes,
                                                  flooder=COLLIDING_FLOODER, victim=COLLIDING_VICTIM)
    assert flood_left_s > 1.5, "the chain ended long before the flood"
    assert took_s < 2.5
