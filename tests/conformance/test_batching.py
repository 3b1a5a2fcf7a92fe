"""Auto-pipelining against a real redis-server: commands issued together share one round
trip, each caller gets its own reply or error, and a flushed script cache is recovered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.store.batching import CommandBatcher


@pytest.fixture
async def client(redis_server: EmbeddedRedis) -> AsyncIterator[Redis]:
    redis = Redis.from_url(redis_server.url, decode_responses=True)
    await redis.flushdb()
    try:
        yield redis
    finally:
        await redis.aclose()


async def test_commands_issued_together_travel_in_one_pipeline(client: Redis) -> None:
    batcher = CommandBatcher(client)
    sent: list[int] = []
    real = client.pipeline

    def counting_pipeline(*args: Any, **kwargs: Any) -> Any:
        pipe = real(*args, **kwargs)
        execute = pipe.execute

        async def execute_counted(*a: Any, **kw: Any) -> Any:
            sent.append(len(pipe.command_stack))
            return await execute(*a, **kw)

        pipe.execute = execute_counted  # type: ignore[method-assign]
        return pipe

    client.pipeline = counting_pipeline  # type: ignore[method-assign]
    replies = await asyncio.gather(*(batcher.execute("INCRBY", "k", i) for i in range(1, 201)))
    assert sent == [200]  # one round trip for two hundred callers
    assert sorted(int(r) for r in replies)[-1] == sum(range(1, 201))
    assert int(await client.get("k")) == sum(range(1, 201))


async def test_an_error_reaches_only_the_caller_whose_command_failed(client: Redis) -> None:
    batcher = CommandBatcher(client)
    await client.set("text", "not a number")
    good, bad = await asyncio.gather(batcher.execute("INCR", "n"), batcher.execute("INCR", "text"),
                                     return_exceptions=True)
    assert good == 1
    assert isinstance(bad, ResponseError)


async def test_a_script_lost_by_the_server_is_loaded_again(client: Redis) -> None:
    batcher = CommandBatcher(client)
    script = client.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    assert await batcher.script(script, ["s"], [2]) == 2
    await client.script_flush()  # a restarted or flushed Redis forgets every script
    results = await asyncio.gather(*(batcher.script(script, ["s"], [1]) for _ in range(5)))
    assert sorted(results) == [3, 4, 5, 6, 7]


async def test_a_cancelled_caller_does_not_disturb_the_others(client: Redis) -> None:
    batcher = CommandBatcher(client)
    first = asyncio.ensure_future(batcher.execute("INCR", "c"))
    second = asyncio.ensure_future(batcher.execute("INCR", "c"))
    await asyncio.sleep(0)  # both are queued for the next flush
    first.cancel()
    assert await second == 2  # the batch went out whole; only the reply to `first` is dropped
    assert await batcher.execute("GET", "c") == "2"
