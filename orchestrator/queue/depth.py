"""How many node messages wait in the broker's node queues (its lanes), for back-pressure,
``/metrics`` and the sweeper's lost-message watermark, wherever the broker is.

* The default broker is the state Redis: each lane is a Redis list, which admission reads
  with ``LLEN`` in the same round trip as the runs' queues (the caller does that itself).
* ``ORCH_BROKER_URL=redis://...`` (required beside a Redis Cluster): the lanes are lists on
  *that* Redis, read through one client per process (:class:`BrokerLanes`); the state Redis
  holds none of them, so reading it there would count an empty broker and call every
  waiting message lost.
* ``ORCH_BROKER_URL=amqp://...``: each quorum queue's message count (a passive
  ``queue.declare``: messages ready for delivery, not those a worker holds).

A start must not wait on a broker of its own, so :func:`lane_depths` reuses a reading
younger than ``MAX_AGE_S``; on RabbitMQ :func:`node_queue_depth` answers the last sample and
refreshes it in a thread (single flight: one sample at a time per process); the first call
of a process waits for one sample. A broker that cannot be reached counts as 0 queued (the
publish that follows fails the start with a clear error anyway), and the error is logged
without the URL (it carries the password).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from typing import Any

from kombu import Connection
from redis.asyncio import Redis
from redis.exceptions import RedisError

from orchestrator.queue.app import is_amqp
from orchestrator.store import redis_client

log = logging.getLogger("orchestrator.queue.depth")

MAX_AGE_S = 0.5
CONNECT_TIMEOUT_S = 2.0


class _Sampler:
    def __init__(self, url: str, queues: tuple[str, ...]) -> None:
        self.url = url
        self.queues = queues
        self.value: dict[str, int] = dict.fromkeys(queues, 0)
        self.at = float("-inf")
        self.lock = threading.Lock()
        self.refreshing: asyncio.Future[None] | None = None
        self.conn: Connection | None = None

    def sample(self) -> None:
        with self.lock:
            try:
                if self.conn is None:
                    self.conn = Connection(self.url, connect_timeout=CONNECT_TIMEOUT_S)
                for queue in self.queues:
                    self.value[queue] = self._count(queue)
            except Exception as exc:  # any broker error: count 0, reconnect next time
                self.value = dict.fromkeys(self.queues, 0)
                if "NOT_FOUND" not in str(exc):
                    log.warning("broker queue depth unavailable: %s", type(exc).__name__)
                if self.conn is not None:
                    self.conn.release()
                self.conn = None
            self.at = time.monotonic()

    def _count(self, queue: str) -> int:
        assert self.conn is not None
        channel: Any = self.conn.default_channel  # an amqp Channel (kombu types it as StdChannel)
        try:
            _, count, _ = channel.queue_declare(queue, passive=True)
        except Exception as exc:
            if "NOT_FOUND" not in str(exc):
                raise
            # no worker declared this lane yet: nothing queued (the failed declare closed the channel)
            self.conn.release()
            self.conn = Connection(self.url, connect_timeout=CONNECT_TIMEOUT_S)
            return 0
        return int(count)


_samplers: dict[tuple[str, tuple[str, ...]], _Sampler] = {}
# (url, id(loop)) -> (the loop, weakly, and its client): a loop's id can be reused once it is
# gone, so an entry counts only while its loop is the one asking.
_broker_clients: dict[tuple[str, int], tuple[weakref.ref[asyncio.AbstractEventLoop], Redis]] = {}


async def node_queue_depth(url: str, queues: list[str]) -> dict[str, int]:
    """Each of ``queues``' message count on the RabbitMQ broker at ``url``, at most
    ``MAX_AGE_S`` old after the first call (see the module)."""
    key = (url, tuple(queues))
    sampler = _samplers.get(key)
    if sampler is None:
        sampler = _samplers[key] = _Sampler(url, key[1])
    loop = asyncio.get_running_loop()
    if sampler.refreshing is None and time.monotonic() - sampler.at > MAX_AGE_S:
        sampler.refreshing = loop.run_in_executor(None, sampler.sample)
        sampler.refreshing.add_done_callback(lambda _: setattr(sampler, "refreshing", None))
    if sampler.at == float("-inf") and sampler.refreshing is not None:
        await asyncio.shield(sampler.refreshing)
    return dict(sampler.value)


def reset() -> None:
    """Forget every sample (tests; a process after fork)."""
    for sampler in _samplers.values():
        if sampler.conn is not None:
            sampler.conn.release()
    _samplers.clear()
    _depth_cache.clear()


async def close_clients() -> None:
    """Close the broker clients :func:`broker_redis` keeps for the running loop (tests; a
    process ending)."""
    loop = asyncio.get_running_loop()
    ours = [key for key, (owner, _) in _broker_clients.items() if owner() is loop]
    for key in ours:
        _, client = _broker_clients.pop(key)
        await client.aclose()


def broker_redis(broker_url: str | None, state: Redis) -> Redis | None:
    """The Redis the node queues (lanes) are lists on: ``state`` when no broker URL is set,
    a client of ``broker_url`` (one per URL and event loop, kept for the process) when it
    names a Redis, None on RabbitMQ."""
    if not broker_url:
        return state
    if is_amqp(broker_url):
        return None
    loop = asyncio.get_running_loop()
    key = (broker_url, id(loop))
    entry = _broker_clients.get(key)
    if entry is None or entry[0]() is not loop:
        entry = _broker_clients[key] = (weakref.ref(loop), redis_client.client(broker_url, decode_responses=True))
    return entry[1]


class BrokerLanes:
    """The lanes as a reader sees them, on whichever broker (see the module docstring)."""

    def __init__(self, broker_url: str | None, state: Redis, queues: list[str]) -> None:
        self.broker_url = broker_url
        self.queues = queues
        self.lists = broker_redis(broker_url, state)  # None: RabbitMQ

    async def depths(self) -> dict[str, int]:
        """Messages waiting on each lane (on RabbitMQ, a sample at most ``MAX_AGE_S`` old)."""
        if self.lists is None:
            assert self.broker_url is not None
            return await node_queue_depth(self.broker_url, self.queues)
        async with self.lists.pipeline(transaction=False) as pipe:
            for queue in self.queues:
                pipe.llen(queue)
            counts = await pipe.execute()
        return dict(zip(self.queues, (int(n) for n in counts), strict=True))

    async def oldest(self, queue: str, count: int) -> list[str] | None:
        """Up to ``count`` of the oldest messages of ``queue``, oldest last (kombu's Redis
        queue is FIFO: LPUSH, BRPOP from the other end); None on RabbitMQ, whose messages
        cannot be read without taking them."""
        if self.lists is None:
            return None
        return [m if isinstance(m, str) else m.decode() for m in await self.lists.lrange(queue, -count, -1)]


_depth_cache: dict[tuple[str, int], tuple[float, dict[str, int]]] = {}


async def lane_depths(broker_url: str | None, state: Redis, queues: list[str]) -> dict[str, int]:
    """Messages waiting on each lane of the broker (see the module docstring), for a caller
    on every start: on a broker of its own, a reading at most ``MAX_AGE_S`` old is reused
    by the process (a start pays no round trip to the broker for it)."""
    lanes = BrokerLanes(broker_url, state, queues)
    if lanes.lists is None or lanes.lists is state:
        return await lanes.depths()
    key = (str(broker_url), id(lanes.lists))
    cached = _depth_cache.get(key)
    if cached is not None and time.monotonic() - cached[0] < MAX_AGE_S and cached[1].keys() == set(queues):
        return dict(cached[1])
    try:
        counts = await lanes.depths()
    except (RedisError, OSError) as exc:  # as on RabbitMQ: count 0; the publish fails the start clearly
        log.warning("broker queue depth unavailable: %s", type(exc).__name__)
        counts = dict.fromkeys(queues, 0)
    _depth_cache[key] = (time.monotonic(), counts)
    return dict(counts)
