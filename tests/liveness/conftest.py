"""A real redis-server per module (flushed between tests) and a store on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore

# Distinct TTLs so a test can tell "active" from "retention" by the TTL alone.
SETTINGS = Settings(active_ttl_s=1000, retention_s=5000, node_lease_s=30)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as server:
        yield server


@pytest.fixture
async def store(redis_server: EmbeddedRedis) -> AsyncIterator[RedisRunStore]:
    s = RedisRunStore.from_url(redis_server.url, SETTINGS)
    await s.redis.flushdb()
    try:
        yield s
    finally:
        await s.close()


class Recorder:
    """A dispatch that records what it was asked to send."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def __call__(self, run_id: str, node_ids: list[str]) -> None:
        self.sent += [(run_id, n) for n in node_ids]


@pytest.fixture
def sent() -> Recorder:
    return Recorder()
