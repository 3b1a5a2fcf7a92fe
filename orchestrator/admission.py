"""Back-pressure: new runs are refused while queued work is above a bound.

Every way a run starts from outside (``POST /graphs/{id}/runs``, a webhook, a chat
message) calls :func:`check` first. It reads the length of the node-task queue (one
``LLEN``: the tasks waiting for a worker, the first nodes of runs not yet started
included) and raises :class:`~orchestrator.kernel.errors.OverloadedError` when it is at
or above ``Settings.max_queued_nodes``; the API answers 429 with ``Retry-After:
Settings.overload_retry_after_s`` and a JSON error naming the limit. Nothing is stored
for a refused request, and an accepted run is never dropped: the bound only gates
admission. ``max_queued_nodes = 0`` turns the check off.
"""

from __future__ import annotations

from redis.asyncio import Redis

from orchestrator import metrics
from orchestrator.kernel.errors import OverloadedError
from orchestrator.settings import Settings

NODE_QUEUE = "orchestrator"  # workers.app.NODE_QUEUE (the Celery queue is a Redis list of this name)
LIMIT = "ORCH_MAX_QUEUED_NODES"


async def check(redis: Redis, settings: Settings) -> None:
    """Raise ``OverloadedError`` if the node queue holds ``max_queued_nodes`` or more tasks."""
    bound = settings.max_queued_nodes
    if bound <= 0:
        return
    queued = int(await redis.llen(NODE_QUEUE))
    metrics.QUEUE_DEPTH.labels(queue=NODE_QUEUE).set(queued)
    if queued >= bound:
        metrics.ADMISSION_REJECTED.labels(limit=LIMIT).inc()
        raise OverloadedError(
            f"busy: {queued} node tasks are queued, at or above the limit of {bound} ({LIMIT}); "
            f"retry after {settings.overload_retry_after_s} s",
            limit=LIMIT, queued=queued, bound=bound, retry_after_s=settings.overload_retry_after_s,
        )
