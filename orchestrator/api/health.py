"""``/health`` (liveness, open), ``/ready`` (Redis answers, open) and ``/metrics``.

``/metrics`` counts the runs and queues of every workspace, so it is the operator's, not a
workspace's: with API keys configured it needs an ``admin`` key of workspace ``default``
(what ``ORCH_API_KEYS`` holds) or the bearer token ``ORCH_METRICS_TOKEN`` (for a Prometheus
scrape config, which then holds no API key); any other key is a 403.
``ORCH_METRICS_PUBLIC=1`` opens it (a scrape from a private network). With no keys
configured at all (auth off) it is open, like the rest of the API.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from redis.asyncio import Redis
from redis.exceptions import RedisError

from orchestrator.errors import AuthError, ForbiddenError
from orchestrator.settings import Settings
from orchestrator.store import fanin, lanes
from orchestrator.store.keys import Keys
from orchestrator.telemetry import flow_metrics, metrics

from .auth import credential
from .principal import DEFAULT_WORKSPACE, key_ring
from .services import Services, get_services

router = APIRouter(tags=["health"])
SERVICES = Depends(get_services)


@router.get("/health")
async def health() -> dict[str, Any]:
    """The process is up (no dependency is checked)."""
    return {"status": "ok"}


@router.get("/ready")
async def ready(services: Services = SERVICES) -> JSONResponse:
    """200 when Redis answers PING, else 503 naming the failure."""
    try:
        await services.redis.ping()
    except (RedisError, OSError) as exc:
        return JSONResponse({"status": "unavailable", "redis": str(exc)}, status_code=503)
    return JSONResponse({"status": "ok", "redis": "ok"})


def authorize_metrics(request: Request, settings: Settings) -> None:
    """Return when the caller may read ``/metrics``; else AuthError (401) or ForbiddenError
    (403) naming what it needs."""
    ring = key_ring(settings)
    if settings.metrics_public or not ring.enabled:
        return
    token = credential(request)
    if settings.metrics_token and hmac.compare_digest(token.encode(), settings.metrics_token.encode()):
        return
    principal = ring.authenticate(token)
    if principal is None:
        raise AuthError("invalid API key")
    if principal.workspace != DEFAULT_WORKSPACE or not principal.can("admin"):
        raise ForbiddenError(f"/metrics counts every workspace's runs: it needs an admin key of workspace "
                             f"{DEFAULT_WORKSPACE!r} or ORCH_METRICS_TOKEN; the key is a {principal.role} of "
                             f"workspace {principal.workspace!r}")


@router.get("/metrics")
async def prometheus(request: Request, services: Services = SERVICES) -> Response:
    """Prometheus exposition of every workspace's counts (who may read it: the module
    docstring)."""
    authorize_metrics(request, services.settings)
    try:
        from orchestrator.queue import depth
        from orchestrator.queue.lanes import lane_queues

        queues = lane_queues(services.settings.lanes)  # one per lane
        if services.settings.broker_url:  # the node queues are on the broker's own Redis or RabbitMQ
            for queue, count in (await depth.lane_depths(services.settings.broker_url, services.redis,
                                                         queues)).items():
                metrics.QUEUE_DEPTH.labels(queue=queue).set(count)
            queues = []
    except ImportError:  # an API-only install samples no queue
        queues = []
    try:
        await refresh_from_redis(services.redis, services.keys, queues)
    except (RedisError, OSError):
        pass  # serve the process-local metrics even when Redis is down
    return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)


async def refresh_from_redis(redis: Redis, keys: Keys, queues: list[str]) -> None:
    """Sample the state that lives in Redis: the broker queues' lengths, the nodes waiting
    on runs' queues (``queue="runs"``), the number of active runs and each active
    workspace's lanes."""
    for queue in queues:
        metrics.QUEUE_DEPTH.labels(queue=queue).set(int(await redis.llen(queue)))
    metrics.QUEUE_DEPTH.labels(queue="runs").set(await fanin.queued_nodes(redis, keys))
    metrics.RUNS.labels(status="active").set(await fanin.active_runs(redis, keys))
    flow_metrics.lanes(await lanes.read_table(redis, keys))  # each active workspace's lanes
