"""``/health`` (liveness, open), ``/ready`` (Redis answers, open) and ``/metrics``."""

from __future__ import annotations

import os
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError

from orchestrator import metrics
from orchestrator.kernel.errors import AuthError

from .auth import credential, key_ring
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


@router.get("/metrics")
async def prometheus(request: Request, services: Services = SERVICES) -> Response:
    """Prometheus exposition; behind the API key unless ``ORCH_METRICS_PUBLIC`` is set."""
    if os.environ.get("ORCH_METRICS_PUBLIC", "").lower() not in ("1", "true", "yes"):
        ring = key_ring(services.settings)
        if ring.enabled and ring.authenticate(credential(request)) is None:
            raise AuthError("invalid API key")
    try:
        from workers.app import NODE_QUEUE

        queues = [NODE_QUEUE]
    except ImportError:  # an API-only install samples no queue
        queues = []
    try:
        await metrics.refresh_from_redis(services.redis, services.keys.active_runs(), queues)
    except (RedisError, OSError):
        pass  # serve the process-local metrics even when Redis is down
    return Response(metrics.render(), media_type=metrics.CONTENT_TYPE)
