"""How many node messages wait in a RabbitMQ broker's node queues (its lanes), for
back-pressure and ``/metrics``.

On the Redis broker each lane is a Redis list, which admission reads with ``LLEN`` in the
same round trip as the runs' queues. On RabbitMQ it is each quorum queue's message count
(a passive ``queue.declare``: messages ready for delivery, not those a worker holds). A
start must not wait on the broker, so :func:`node_queue_depth` answers the last sample and
refreshes it in a thread when it is older than ``MAX_AGE_S`` (single flight: one sample at a
time per process); the first call of a process waits for one sample. A broker that cannot be
reached counts as 0 queued (the publish that follows fails the start with a clear error
anyway), and the error is logged without the URL (it carries the password).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from kombu import Connection

from orchestrator.queue.app import is_amqp

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


async def broker_depth(broker_url: str | None, queues: list[str]) -> dict[str, int] | None:
    """The depth of each node queue (lane) in ``queues`` on the broker ``broker_url`` names
    when it is RabbitMQ (:func:`node_queue_depth`); None when the broker is a Redis (its
    queues are Redis lists, which the caller reads with ``LLEN``)."""
    if not broker_url or not is_amqp(broker_url):
        return None
    return await node_queue_depth(broker_url, queues)


def reset() -> None:
    """Forget every sample (tests; a process after fork)."""
    for sampler in _samplers.values():
        if sampler.conn is not None:
            sampler.conn.release()
    _samplers.clear()
