"""Global counts over the run buckets (``keys.py``): one key on one Redis, a sum over
``Keys.buckets`` keys on a Redis Cluster (one pipeline; redis-py sends it as one batch per
node). Back-pressure reads the queued count on every start, so on a cluster a sum is shared
for ``QUEUED_MAX_AGE_S`` by the callers of one process.
"""

from __future__ import annotations

import time
from typing import Any

from redis.asyncio import Redis

from orchestrator.store.keys import Keys

QUEUED_MAX_AGE_S = 0.5
_queued_cache: dict[tuple[int, str], tuple[float, int]] = {}


async def _per_bucket(redis: Redis, keys: Keys, command: str, key_of: Any) -> list[Any]:
    async with redis.pipeline(transaction=False) as pipe:
        for bucket in range(keys.buckets):
            getattr(pipe, command)(key_of(bucket))
        return list(await pipe.execute())


async def queued_nodes(redis: Redis, keys: Keys, *, max_age_s: float = QUEUED_MAX_AGE_S) -> int:
    """Nodes waiting on every run's queue (``{p}:runs:queued``, summed over the buckets; a
    sum younger than ``max_age_s`` is reused)."""
    if keys.buckets <= 1:
        return int(await redis.get(keys.queued_nodes()) or 0)
    cache_key = (id(redis), keys.prefix)
    cached = _queued_cache.get(cache_key)
    if cached is not None and time.monotonic() - cached[0] < max_age_s:
        return cached[1]
    total = sum(int(n or 0) for n in await _per_bucket(redis, keys, "get", keys.queued_nodes))
    _queued_cache[cache_key] = (time.monotonic(), total)
    return total


async def active_runs(redis: Redis, keys: Keys) -> int:
    """Runs in ``{p}:runs:active`` (summed over the buckets)."""
    return sum(int(n) for n in await _per_bucket(redis, keys, "zcard", keys.active_runs))
