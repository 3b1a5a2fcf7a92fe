"""Sending node tasks: one Celery message per node, with a deterministic task id, all the
messages of one call in one Redis round trip; and drain messages, which carry no node but
let a worker with free slots take nodes from a run's queue.

``make_dispatch(app)`` returns the ``dispatch(run_id, node_ids)`` callable that
``orchestrator.service.runs.start_run`` and the node task use; ``make_async_dispatch(app)``
the one an event loop uses (the API, schedules): kombu's client is synchronous, so its
publish runs on a small thread pool of its own and the loop never waits on the broker's
socket. Task ids are ``"{run_id}:{node_id}"``
so logs, revokes and a redelivered message all name the same node; the run store, not the
id, makes a second delivery harmless. Every message of a run travels on the run's lane
(``orchestrator/queue/lanes.py``): its start nodes, retries and reschedules, drains, the
sweeper's re-sends.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from celery import Celery

from orchestrator.queue.app import DRAIN_TASK, NODE_TASK, is_amqp, lanes_of
from orchestrator.queue.lanes import queue_for


class Dispatcher(Protocol):
    """Sends the node tasks of ``node_ids`` of run ``run_id`` (sync or async): what starting
    a run, the sweeper, beat and the API take. ``make_dispatch(app)`` is the Celery one;
    tests pass fakes."""

    def __call__(self, run_id: str, node_ids: list[str], /) -> Awaitable[None] | None: ...


def task_id(run_id: str, node_id: str) -> str:
    return f"{run_id}:{node_id}"


def send_nodes(app: Celery, run_id: str, node_ids: Sequence[str], *,
               countdown_s: float | None = None) -> None:
    """Publish one node task per id in ONE Redis round trip (kombu's ``Producer.batch``
    buffers the LPUSHes in a pipeline flushed when the block ends), over one pooled
    producer connection. ``countdown_s`` delays delivery (a node's retry); on RabbitMQ it is
    rounded up to whole seconds, the unit of Celery's native delayed delivery (rounded down,
    a 0.5 s delay would arrive at once and be sent back until due)."""
    if not node_ids:
        return
    if countdown_s is not None and countdown_s > 0 and is_amqp(str(app.conf.broker_url)):
        countdown_s = float(math.ceil(countdown_s))
    queue = queue_for(run_id, lanes_of(app))
    with app.producer_or_acquire() as producer, producer.batch():
        for node_id in node_ids:
            app.send_task(
                NODE_TASK,
                args=(run_id, node_id),
                task_id=task_id(run_id, node_id),
                queue=queue,
                producer=producer,
                countdown=countdown_s,
            )


DRAIN_MAX_HOPS = 3  # a drain a worker has no free slot for is published again at most this often


def send_drains(app: Celery, run_id: str, count: int, hops: int = 0) -> None:
    """Publish ``count`` drain messages for ``run_id`` in one round trip: each one lets a
    worker with free slots take nodes from the run's queue (``orchestrator.drain``).
    ``hops``: how many workers with no free slot passed this drain on already."""
    if count <= 0:
        return
    queue = queue_for(run_id, lanes_of(app))
    with app.producer_or_acquire() as producer, producer.batch():
        for _ in range(count):
            app.send_task(DRAIN_TASK, args=(run_id, hops) if hops else (run_id,), queue=queue,
                          producer=producer)


def make_dispatch(app: Celery) -> Dispatcher:
    """A ``dispatch(run_id, node_ids)`` bound to ``app``'s broker."""

    def dispatch(run_id: str, node_ids: list[str]) -> None:
        send_nodes(app, run_id, node_ids)

    return dispatch


PUBLISH_THREADS = 2  # threads one async dispatcher publishes on (kombu's producer pool is thread-safe)


def make_async_dispatch(app: Celery, *, threads: int = PUBLISH_THREADS) -> Dispatcher:
    """An async ``dispatch(run_id, node_ids)`` bound to ``app``'s broker whose publish runs
    on its own ``threads`` (see the module docstring): awaiting it never blocks the loop."""
    pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="orchestrator-publish")

    async def dispatch(run_id: str, node_ids: list[str]) -> None:
        await asyncio.get_running_loop().run_in_executor(pool, send_nodes, app, run_id, node_ids)

    return dispatch
