"""Fixtures: one real redis-server per module (free TCP port), flushed between tests,
the suite's 3-primary Redis Cluster (``cluster_server``, tests/conftest.py),
and a ``store`` fixture parametrized over every RunStore implementation (memory, one Redis,
the cluster); ``redis_store`` (what only the Redis store promises) over one Redis and the cluster."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest
import uvloop
from redis.asyncio import RedisCluster

from orchestrator.kernel.memory import MemoryStore
from orchestrator.kernel.store import RunStore
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.settings import Settings
from orchestrator.store.redis_client import is_cluster
from orchestrator.store.redis_store import RedisRunStore

# Distinct TTLs so a test can tell "active" from "retention" by the TTL alone.
SETTINGS = Settings(active_ttl_s=1000, retention_s=5000, events_maxlen=10_000)


# Modules whose async tests also run on uvloop's loop, the one a worker's steps run on: the
# batcher's stream is its connection's protocol, called by the loop's own transports.
ON_BOTH_LOOPS = frozenset({"test_batching.py"})


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item
                                  ) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.path.name in ON_BOTH_LOOPS:
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as server:
        yield server


def settings_for(request: pytest.FixtureRequest, kind: str) -> tuple[str, Settings]:
    """The URL and settings of the store ``kind`` ("redis" or "cluster")."""
    if kind == "cluster":
        url = request.getfixturevalue("cluster_server").url
        return url, SETTINGS.model_copy(update={"redis_url": url})
    return request.getfixturevalue("redis_server").url, SETTINGS


async def _redis_store(request: pytest.FixtureRequest, kind: str) -> AsyncIterator[RedisRunStore]:
    url, settings = settings_for(request, kind)
    store = RedisRunStore.from_url(url, settings)
    await store.redis.flushdb()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture(params=["redis", "cluster"])
async def redis_store(request: pytest.FixtureRequest) -> AsyncIterator[RedisRunStore]:
    async for store in _redis_store(request, request.param):
        yield store


@pytest.fixture(params=["memory", "redis", "cluster"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[RunStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    async for redis_store in _redis_store(request, request.param):
        yield redis_store


async def reset_stats(redis: Any) -> None:
    """CONFIG RESETSTAT on the Redis (every primary of a cluster)."""
    if is_cluster(redis):
        await redis.config_resetstat(target_nodes=RedisCluster.PRIMARIES)
    else:
        await redis.config_resetstat()


async def command_stats(redis: Any) -> dict[str, int]:
    """Calls per command since the last reset (summed over a cluster's primaries)."""
    if is_cluster(redis):
        per_node = await redis.info("commandstats", target_nodes=RedisCluster.PRIMARIES)
    else:
        per_node = {"": await redis.info("commandstats")}
    out: dict[str, int] = {}
    for stats in per_node.values():
        for name, v in stats.items():
            out[name.removeprefix("cmdstat_")] = out.get(name.removeprefix("cmdstat_"), 0) + int(v["calls"])
    return out
