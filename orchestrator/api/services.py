"""What every handler needs, built once per app: settings, Redis, registry, stores, dispatch.

State lives only in Redis, so any number of API processes can serve the same runs. The
run store and the dispatcher are created on first use: the graph endpoints work against
a Redis with no workers attached, and tests can inject fakes with the same interface.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from fastapi import Request
from redis.asyncio import Redis

from orchestrator.graph_store import GraphStore
from orchestrator.kernel.protocol import DataValue, NodeEvent
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.kernel.store import RunRecord, RunStore
from orchestrator.keys import Keys
from orchestrator.settings import Settings

Dispatch = Callable[[str, list[str]], None]


class RunStoreApi(Protocol):
    """The part of ``workers.store.RedisRunStore`` the API uses."""

    async def get_run(self, run_id: str) -> RunRecord: ...

    async def load_plan(self, run_id: str) -> RunPlan: ...

    async def read_outputs(self, run_id: str, node_ids: list[str]) -> dict[str, dict[str, DataValue]]: ...

    async def node_states(self, run_id: str) -> Any: ...

    async def read_events(
        self, run_id: str, after: str = "0-0", count: int = 1000, block_ms: int | None = None
    ) -> list[tuple[str, NodeEvent]]: ...

    async def finish_run(self, run_id: str, status: str, error: dict[str, Any] | None = None) -> bool: ...


class Services:
    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        registry: Registry,
        *,
        run_store: RunStoreApi | None = None,
        dispatch: Dispatch | None = None,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.redis_url = settings.redis_url
        self.registry = registry
        self.keys = Keys(settings.key_prefix)
        self.graphs = GraphStore(redis, registry, settings)
        self._run_store = run_store
        self._dispatch = dispatch

    @property
    def runs(self) -> RunStoreApi:
        if self._run_store is None:
            from workers.store import RedisRunStore

            self._run_store = RedisRunStore(self.redis, self.settings)
        return self._run_store

    @property
    def run_store(self) -> RunStore:
        """The same store, typed as the kernel's interface (what ``start_run`` takes)."""
        return cast(RunStore, self.runs)

    @property
    def dispatch(self) -> Dispatch:
        if self._dispatch is None:
            from workers.app import make_celery
            from workers.dispatch import make_dispatch

            # A Celery app bound to this app's Redis (not the env default the module reads).
            self._dispatch = make_dispatch(make_celery(self.redis_url, self.settings))
        return self._dispatch


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services
