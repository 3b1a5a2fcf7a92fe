"""Fixtures: one real redis-server per module (free TCP port), flushed between tests,
and a ``store`` fixture parametrized over every RunStore implementation."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from orchestrator.kernel.memory import MemoryStore
from orchestrator.kernel.store import RunStore
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore
from tests.support import redis_server as start_redis

# Distinct TTLs so a test can tell "active" from "retention" by the TTL alone.
SETTINGS = Settings(active_ttl_s=1000, retention_s=5000, events_maxlen=10_000)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def redis_store(redis_server: EmbeddedRedis) -> AsyncIterator[RedisRunStore]:
    store = RedisRunStore.from_url(redis_server.url, SETTINGS)
    await store.redis.flushdb()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RunStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    server = request.getfixturevalue("redis_server")
    redis_store = RedisRunStore.from_url(server.url, SETTINGS)
    await redis_store.redis.flushdb()
    try:
        yield redis_store
    finally:
        await redis_store.close()
