"""Sending node tasks: one Celery message per node, with a deterministic task id, all the
messages of one call in one Redis round trip; and drain messages, which carry no node but
let a worker with free slots take nodes from a run's queue.

``make_dispatch(app)`` returns the ``dispatch(run_id, node_ids)`` callable that
``orchestrator.service.runs.start_run`` and the node task use; ``make_async_dispatch(app)``
the one an event loop uses (the API, schedules), which never blocks the loop. Task ids are
``"{run_id}:{node_id}"`` so logs, revokes and a redelivered message all name the same
node; the run store, not the id, makes a second delivery harmless. Every message of a run
travels on the run's lane (``orchestrator/queue/lanes.py``): its start nodes, retries and
reschedules, drains, the sweeper's re-sends.

Two ways a node message (or a drain) goes out, one message format (Celery's protocol v2):

* on a Redis broker, with no countdown and traces off (the common case), the messages are
  built from a template (``orchestrator/queue/messages.py``) and pushed with one ``LPUSH``:
  from an event loop on an asyncio client, the pushes of one loop iteration in one
  pipeline (``orchestrator/store/batching.py``), so no thread and no kombu on the way;
* otherwise (RabbitMQ, a retry's countdown, OpenTelemetry's publish spans) through
  Celery's ``send_task`` in kombu's batch; kombu's client is synchronous, so an event
  loop runs it on a small thread pool of its own.
"""

from __future__ import annotations

import asyncio
import functools
import math
import weakref
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeGuard

import redis
from celery import Celery

from orchestrator.queue.app import DRAIN_TASK, NODE_TASK, is_amqp, lanes_of
from orchestrator.queue.lanes import queue_for
from orchestrator.queue.messages import NodeMessages, drain_args, redis_url_of
from orchestrator.store import redis_client
from orchestrator.store.batching import CommandBatcher
from orchestrator.telemetry import tracing


class Dispatcher(Protocol):
    """Sends the node tasks of ``node_ids`` of run ``run_id`` (sync or async): what starting
    a run, the sweeper, beat and the API take. ``make_dispatch(app)`` is the Celery one;
    tests pass fakes."""

    def __call__(self, run_id: str, node_ids: list[str], /) -> Awaitable[None] | None: ...


class PlanDispatcher(Dispatcher, Protocol):
    """A dispatcher whose messages can carry the run's plan reference
    (``orchestrator/store/plan_refs.py``), so that a worker that holds the plan reads none:
    the Celery ones here are; a start of a stored graph passes ``plan`` to a dispatcher
    that is (:func:`carries_plan`), and sends through any other as before."""

    carries_plan: bool

    def __call__(self, run_id: str, node_ids: list[str], /, plan: str = "") -> Awaitable[None] | None: ...


def carries_plan(dispatch: object) -> TypeGuard[PlanDispatcher]:
    """Whether ``dispatch`` takes a plan reference (:class:`PlanDispatcher`)."""
    return getattr(dispatch, "carries_plan", False) is True


def task_id(run_id: str, node_id: str) -> str:
    return f"{run_id}:{node_id}"


def send_nodes(app: Celery, run_id: str, node_ids: Sequence[str], *,
               countdown_s: float | None = None, plan: str = "") -> None:
    """Publish one node task per id in ONE round trip: one ``LPUSH`` of template messages on
    a Redis broker (see the module docstring), else Celery's messages in kombu's
    ``Producer.batch`` (the LPUSHes in a pipeline flushed when the block ends, over one
    pooled producer connection). ``countdown_s`` delays delivery (a node's retry); on RabbitMQ it is
    rounded up to whole seconds, the unit of Celery's native delayed delivery (rounded down,
    a 0.5 s delay would arrive at once and be sent back until due). ``plan``: the run's plan
    reference, a third task argument when given (see :class:`Dispatcher`)."""
    if not node_ids:
        return
    queue = queue_for(run_id, lanes_of(app))
    direct = _direct(app) if not countdown_s else None
    if direct is not None:  # a Redis broker: the template's messages, one LPUSH
        direct.client().lpush(queue, *direct.messages(queue).encode_all(run_id, node_ids, plan))
        return
    if countdown_s is not None and countdown_s > 0 and is_amqp(str(app.conf.broker_url)):
        countdown_s = float(math.ceil(countdown_s))
    with app.producer_or_acquire() as producer, producer.batch():
        for node_id in node_ids:
            app.send_task(
                NODE_TASK,
                args=(run_id, node_id, plan) if plan else (run_id, node_id),
                task_id=task_id(run_id, node_id),
                queue=queue,
                producer=producer,
                countdown=countdown_s,
            )


DRAIN_MAX_HOPS = 3  # a drain a worker has no free slot for is published again at most this often


def send_drains(app: Celery, run_id: str, count: int, hops: int = 0, *, plan: str = "") -> None:
    """Publish ``count`` drain messages for ``run_id`` in one round trip: each one lets a
    worker with free slots take nodes from the run's queue (``orchestrator.drain``).
    ``hops``: how many workers with no free slot passed this drain on already; ``plan``:
    the run's plan reference (see :class:`PlanDispatcher`)."""
    if count <= 0:
        return
    queue = queue_for(run_id, lanes_of(app))
    direct = _direct(app)
    if direct is not None:  # a Redis broker: the template's messages, one LPUSH
        direct.client().lpush(queue, *direct.messages(queue).encode_drains(run_id, count, hops, plan))
        return
    args = drain_args(run_id, hops, plan)
    with app.producer_or_acquire() as producer, producer.batch():
        for _ in range(count):
            app.send_task(DRAIN_TASK, args=args, queue=queue, producer=producer)


class SyncDispatch:
    """A blocking ``dispatch(run_id, node_ids)`` bound to a Celery app's broker (a
    :class:`PlanDispatcher`)."""

    carries_plan = True

    def __init__(self, app: Celery) -> None:
        self.app = app

    def __call__(self, run_id: str, node_ids: list[str], /, plan: str = "") -> None:
        send_nodes(self.app, run_id, node_ids, plan=plan)


def make_dispatch(app: Celery) -> SyncDispatch:
    """A ``dispatch(run_id, node_ids)`` bound to ``app``'s broker."""
    return SyncDispatch(app)


class _Direct:
    """A Redis broker's template messages and clients (one per Celery app, made on first use)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._messages: dict[str, NodeMessages] = {}
        self._client: redis.Redis | None = None

    def messages(self, queue: str) -> NodeMessages:
        """The template of ``queue``'s messages (one per lane)."""
        template = self._messages.get(queue)
        if template is None:
            template = self._messages[queue] = NodeMessages(queue)
        return template

    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(self.url)
        return self._client

    def batcher(self) -> CommandBatcher:
        """An asyncio client's auto-pipeline (for the event loop that calls this first)."""
        return CommandBatcher(redis_client.client(self.url))


_directs: weakref.WeakKeyDictionary[Celery, _Direct | None] = weakref.WeakKeyDictionary()


def _direct(app: Celery) -> _Direct | None:
    """The template path for ``app`` (None: Celery's, see the module docstring)."""
    if tracing.enabled():
        return None
    try:
        return _directs[app]
    except (KeyError, TypeError):  # TypeError: an app that cannot be weakly referenced (a test fake)
        pass
    conf = getattr(app, "conf", None)
    url = redis_url_of(str(getattr(conf, "broker_url", "") or ""))
    options = getattr(conf, "broker_transport_options", None) or {}
    direct = _Direct(url) if url and not options.get("global_keyprefix") else None
    try:
        _directs[app] = direct
    except TypeError:
        pass
    return direct


PUBLISH_THREADS = 2  # threads one async dispatcher publishes on with Celery (kombu's producer pool is thread-safe)


class AsyncDispatch:
    """An async ``dispatch(run_id, node_ids)`` bound to a Celery app's broker (see the module
    docstring): awaiting it never blocks the loop. On a Redis broker the pushes of one loop
    iteration share one pipeline, on an asyncio client made for the loop that first
    dispatches (:meth:`aclose` closes it); else the publish runs on its own threads."""

    carries_plan = True  # a PlanDispatcher

    def __init__(self, app: Celery, threads: int = PUBLISH_THREADS) -> None:
        self.app = app
        self._pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="orchestrator-publish")
        self._batcher: tuple[asyncio.AbstractEventLoop, CommandBatcher] | None = None

    async def __call__(self, run_id: str, node_ids: list[str], /, plan: str = "") -> None:
        if not node_ids:
            return
        direct = _direct(self.app)
        loop = asyncio.get_running_loop()
        if direct is None:
            await loop.run_in_executor(self._pool, functools.partial(send_nodes, self.app, run_id, node_ids,
                                                                     plan=plan))
            return
        if self._batcher is None or self._batcher[0] is not loop:
            self._batcher = (loop, direct.batcher())  # an asyncio client is bound to its loop
        queue = queue_for(run_id, lanes_of(self.app))
        await self._batcher[1].execute("LPUSH", queue, *direct.messages(queue).encode_all(run_id, node_ids, plan))

    async def aclose(self) -> None:
        """Close the asyncio client (call it on the loop that dispatched) and the threads."""
        batcher, self._batcher = self._batcher, None
        if batcher is not None:
            await batcher[1].aclose()
            await batcher[1].redis.aclose()
        self._pool.shutdown(wait=False)


def make_async_dispatch(app: Celery, *, threads: int = PUBLISH_THREADS) -> AsyncDispatch:
    """An :class:`AsyncDispatch` of ``app`` (publishing on ``threads`` when through Celery)."""
    return AsyncDispatch(app, threads)
