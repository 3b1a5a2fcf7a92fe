"""What one worker process keeps between node tasks.

Each pool process owns one asyncio event loop (kept alive across tasks: the run store's
connection pool and cached artifacts are bound to it), one Redis client, one
``RedisRunStore``, the node registry, and an artifact cache per run. Everything is
created lazily on first use *in the process that uses it*: a prefork child never
inherits its parent's loop or sockets, because the state remembers the pid that built it
and is rebuilt after a fork.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from orchestrator.kernel.registry import Registry
from orchestrator.kernel.runtime import ArtifactCache
from orchestrator.kernel.step import StepOptions
from orchestrator.plugins import get_registry
from orchestrator.settings import Settings, get_settings

from .app import DEFAULT_REDIS_URL
from .store import RedisRunStore

MAX_CACHED_RUNS = 32  # runs whose artifacts a process keeps (least recently used dropped first)


@dataclass
class ProcessState:
    pid: int
    worker_id: str
    settings: Settings
    loop: asyncio.AbstractEventLoop
    redis: aioredis.Redis
    store: RedisRunStore
    registry: Registry
    services: dict[str, Any]
    options: StepOptions
    artifacts: ArtifactCache = field(
        default_factory=lambda: ArtifactCache(max_runs=MAX_CACHED_RUNS)
    )

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)


_state: ProcessState | None = None


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _build() -> ProcessState:
    settings = get_settings()
    url = settings.redis_url or DEFAULT_REDIS_URL
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    client = aioredis.Redis.from_url(url, decode_responses=True)  # the store needs str replies
    return ProcessState(
        pid=os.getpid(),
        worker_id=worker_id(),
        settings=settings,
        loop=loop,
        redis=client,
        store=RedisRunStore(client, settings),
        registry=get_registry(),
        services={"redis_url": url, "settings": settings},
        options=StepOptions(lease_s=settings.node_lease_s, cancel_poll_s=settings.cancel_poll_s,
                            max_output_bytes=settings.max_output_bytes),
    )


def process_state() -> ProcessState:
    """The state of the calling process, built on first use (and again after a fork)."""
    global _state
    if _state is None or _state.pid != os.getpid():
        _state = _build()
    return _state


def reset() -> None:
    """Close this process's resources (worker shutdown, tests)."""
    global _state
    state, _state = _state, None
    if state is None or state.pid != os.getpid():
        return
    try:
        state.loop.run_until_complete(state.redis.aclose())
    finally:
        state.loop.close()
