"""What every handler needs, built once per app: settings, Redis, registry, stores, dispatch.

State lives only in Redis, so any number of API processes can serve the same runs. The
run store and the dispatcher are created on first use: the graph endpoints work against
a Redis with no workers attached, and tests can inject fakes with the same interface.
"""

from __future__ import annotations

from fastapi import Request
from redis.asyncio import Redis

from orchestrator.kernel.registry import Registry
from orchestrator.kernel.store import RunStore
from orchestrator.queue.dispatch import AsyncDispatch, Dispatcher
from orchestrator.service.graph_store import GraphStore
from orchestrator.settings import Settings
from orchestrator.store.keys import Keys


class Services:
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        registry: Registry,
        *,
        run_store: RunStore | None = None,
        dispatch: Dispatcher | None = None,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.redis_url = settings.redis_url
        self.registry = registry
        self.keys = Keys.of(settings)
        self.graphs = GraphStore(redis, registry, settings)
        self._run_store = run_store
        self._dispatch = dispatch
        self._made_dispatch: AsyncDispatch | None = None

    @property
    def runs(self) -> RunStore:
        """The run store: the API reads runs through its ``RunQuery`` side, and
        ``start_run`` writes through the rest."""
        if self._run_store is None:
            from orchestrator.store.redis_store import RedisRunStore

            self._run_store = RedisRunStore(self.redis, self.settings)
        return self._run_store

    @property
    def run_store(self) -> RunStore:
        return self.runs

    @property
    def dispatch(self) -> Dispatcher:
        if self._dispatch is None:
            from orchestrator.queue.app import make_celery
            from orchestrator.queue.dispatch import make_async_dispatch

            # A Celery app bound to this app's Redis (not the env default the module reads),
            # published off the event loop.
            self._made_dispatch = make_async_dispatch(make_celery(self.redis_url, self.settings))
            self._dispatch = self._made_dispatch
        return self._dispatch

    async def aclose(self) -> None:
        """Close what this object made (the dispatcher's broker client), at the app's shutdown."""
        if self._made_dispatch is not None:
            await self._made_dispatch.aclose()


async def get_services(request: Request) -> Services:
    """The app's services (a dependency; async so FastAPI does not hand it to a thread)."""
    services: Services = request.app.state.services
    return services
