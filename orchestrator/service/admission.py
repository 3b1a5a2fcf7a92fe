"""Back-pressure: new runs are refused while queued work is above a bound.

Every way a run starts from outside goes through ``runs.admit_and_start``, which calls
:func:`check` first: the API's manual starts, webhooks, chat messages and reruns, and
schedules (``workers/beat.py:start_scheduled`` skips an overloaded fire, logged and
counted, rather than queuing it; see there). ``runs.start_run`` itself does not check: it
is also the primitive of local runs and tests, where there is no queue.

Queued work is the node tasks waiting for a worker (the Celery queue's length: the first
nodes of runs not yet started included) plus the nodes waiting on runs' queues for a free
slot (``{p}:runs:queued``, kept by the Lua scripts and corrected by the sweeper), read in
one round trip; on a RabbitMQ broker (``ORCH_BROKER_URL=amqp://...``) the node queue's
count comes from the broker instead, sampled at most every half second
(``orchestrator/queue/depth.py``). :func:`check` raises
:class:`~orchestrator.errors.OverloadedError` when that is at or above
``Settings.max_queued_nodes``; the API answers 429 with ``Retry-After:
Settings.overload_retry_after_s`` and a JSON error naming the limit. Nothing is stored
for a refused request, and an accepted run is never dropped: the bound only gates
admission. ``max_queued_nodes = 0`` turns the check off.
"""

from __future__ import annotations

from redis.asyncio import Redis

from orchestrator.errors import OverloadedError
from orchestrator.queue import depth
from orchestrator.queue.app import NODE_QUEUE, is_amqp
from orchestrator.settings import Settings
from orchestrator.store.keys import Keys
from orchestrator.telemetry import metrics

RUN_QUEUES = "runs"  # the metric's label for the nodes on runs' queues (as metrics.refresh_from_redis)
LIMIT = "ORCH_MAX_QUEUED_NODES"


async def check(redis: Redis, settings: Settings) -> None:
    """Raise ``OverloadedError`` if the node queue holds ``max_queued_nodes`` or more tasks."""
    bound = settings.max_queued_nodes
    if bound <= 0:
        return
    async with redis.pipeline(transaction=False) as pipe:
        pipe.llen(NODE_QUEUE)
        pipe.get(Keys(settings.key_prefix).queued_nodes())
        tasks, waiting = await pipe.execute()
    if settings.broker_url and is_amqp(settings.broker_url):
        tasks = await depth.node_queue_depth(settings.broker_url)
    metrics.QUEUE_DEPTH.labels(queue=NODE_QUEUE).set(int(tasks))
    metrics.QUEUE_DEPTH.labels(queue=RUN_QUEUES).set(int(waiting or 0))
    queued = int(tasks) + int(waiting or 0)
    if queued >= bound:
        metrics.ADMISSION_REJECTED.labels(limit=LIMIT).inc()
        raise OverloadedError(
            f"busy: {queued} nodes are queued, at or above the limit of {bound} ({LIMIT}); "
            f"retry after {settings.overload_retry_after_s} s",
            limit=LIMIT, queued=queued, bound=bound, retry_after_s=settings.overload_retry_after_s,
        )
