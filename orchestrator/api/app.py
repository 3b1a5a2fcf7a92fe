"""The FastAPI application: ``create_app(settings=None) -> FastAPI`` (OpenAPI at ``/docs``).

Routers (one concern each): ``graphs``, ``runs``, ``events`` (SSE), ``triggers``
(webhooks, chat), ``nodes``, ``health``, ``docs``; for the console: ``drafts``,
``previews`` (expression previews), ``single_step`` (test one node), ``gallery`` (the
shipped examples), ``credential_usage``, ``waits`` (Wait nodes). Bearer-key auth guards
everything except ``/health``, ``/ready``, ``/hooks/*`` and ``/resume/*`` (signed instead),
``/auth/session`` (browser sign-in), the console's static files at ``/ui/`` and, when ``ORCH_METRICS_PUBLIC`` /
``ORCH_PUBLIC_DOCS`` are set, ``/metrics`` / the docs. Keys belong to workspaces and
carry roles (``auth.py``); browsers may present a session cookie or a stream token
instead (``browser_auth.py``), and pages on ``ORCH_CORS_ORIGINS`` may call it
cross-origin (``cors.py``). Errors from the error tree map to HTTP in ``errors.py``;
bodies over ``Settings.max_body_bytes`` get a 413 (``limits.py``).

State lives only in Redis (``Settings.redis_url``), so several API processes can serve
the same graphs and runs. The Redis client this function builds has a blocking pool of
``Settings.redis_max_connections``: a burst of requests waits for a connection (up to
``POOL_WAIT_S``, then 503) instead of failing. SSE streams hold no pooled connection:
the process's ``EventHub`` (``app.state.event_hub``) reads each followed run once, on a
connection of its own, and is stopped at shutdown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from redis.asyncio import Redis

from orchestrator.kernel.registry import Registry
from orchestrator.kernel.store import RunStore
from orchestrator.queue.dispatch import Dispatcher
from orchestrator.settings import Settings, get_settings
from orchestrator.store import redis_client
from orchestrator.telemetry import tracing

from . import (
    browser_auth,
    connections,
    console_ui,
    cors,
    credential_usage,
    credentials,
    docs,
    drafts,
    errors,
    events,
    files,
    gallery,
    graphs,
    health,
    nodes,
    previews,
    run_list,
    runs,
    single_step,
    triggers,
    waits,
)
from .auth import require_key
from .limits import AuthBeforeBody, BodyLimit
from .principal import check_metrics_token, key_ring
from .services import Services

POOL_WAIT_S = 10.0  # a request waits this long for a pooled Redis connection, then 503


def app_redis(settings: Settings, url: str) -> Redis:
    """The app's client: a blocking pool of ``Settings.redis_max_connections`` (a
    ``max_connections`` option in the URL wins)."""
    return redis_client.blocking_client(url, decode_responses=True, max_connections=settings.redis_max_connections,
                                        timeout=POOL_WAIT_S)


def create_app(
    settings: Settings | None = None,
    *,
    registry: Registry | None = None,
    redis: Redis | None = None,
    run_store: RunStore | None = None,
    dispatch: Dispatcher | None = None,
) -> FastAPI:
    """Build the app. Without arguments: settings from the environment, the node registry
    from ``orchestrator.service.plugins``, a Redis client on ``Settings.redis_url``."""
    settings = settings or get_settings()
    connections.configure(settings)  # the per-connection limits of the HTTP protocol (PROTOCOL)
    key_ring(settings)  # a placeholder or malformed key stops the app here, naming the setting
    check_metrics_token(settings)
    owned: list[Redis] = []  # closed at shutdown: only a client this function created
    if redis is None:
        if not settings.redis_url:
            raise RuntimeError(
                "the API needs REDIS_URL (the `orchestrator serve` command starts an embedded Redis when it is unset)"
            )
        redis = app_redis(settings, settings.redis_url)
        owned.append(redis)
    if registry is None:
        from orchestrator.service.plugins import get_registry

        registry = get_registry(settings)
    services = Services(settings, redis, registry, run_store=run_store, dispatch=dispatch)
    hub = events.make_hub(services)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from orchestrator.service.sweeper import start_background_sweeper, stop_background_sweeper

        if settings.api_run_sweeper:
            start_background_sweeper(app.state)
        yield
        await stop_background_sweeper(app.state)
        await hub.close()
        await services.aclose()
        for client in owned:
            await client.aclose()

    app = FastAPI(
        # FastAPI's own OpenTelemetry only when traces are asked for (tracing.instrument_app
        # below): off, it would look up the global providers on every request for nothing.
        telemetry=None if tracing.requested() else {"tracing": False, "metrics": False, "logs": False},
        title="Agent workflow orchestrator",
        version="0.1.0",
        description="Graphs of nodes, run one Celery task per node; events over SSE.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.services = services
    app.state.event_hub = hub
    errors.install(app)
    app.add_middleware(BodyLimit, max_body_bytes=settings.max_body_bytes,
                       path_limits={"/files": files.upload_body_limit(settings),
                                    "/resume/": (settings.wait_max_payload_bytes,
                                                 f"the body exceeds {settings.wait_max_payload_bytes} "
                                                 "bytes (ORCH_WAIT_MAX_PAYLOAD_BYTES)")})  # checked as bytes arrive
    app.add_middleware(AuthBeforeBody, check=lambda request: require_key(request, services))
    cors.install(app, settings)  # outermost: preflights are answered before auth
    browser_auth.mask_access_log()
    guarded = [Depends(require_key)]
    # Routes are matched in order and a start is the hottest request: its router goes first
    # (no other route matches its paths; a 52-node start's CPU fell by ~15% in process).
    app.include_router(runs.router, dependencies=guarded)
    docs.install(app, guarded, public=settings.public_docs)
    app.include_router(health.router)
    app.include_router(browser_auth.router)
    app.include_router(browser_auth.guarded, dependencies=guarded)
    console_ui.mount(app)
    app.include_router(triggers.hooks)
    app.include_router(waits.open_router)  # signed instead (orchestrator/api/waits.py)
    for router in (graphs.router, run_list.router, events.router, nodes.router, triggers.chats,
                   credentials.router, files.router, drafts.router, previews.router, single_step.router,
                   gallery.router, credential_usage.router, waits.router):
        app.include_router(router, dependencies=guarded)
    if tracing.configure("orchestrator-api"):  # the standard OTEL_* variables (docs/observability.md)
        tracing.instrument_app(app)
        tracing.instrument_celery()
    return app
