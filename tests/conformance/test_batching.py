"""Auto-pipelining against a real redis-server: commands issued together share one round
trip, each caller gets its own reply or error, and a flushed script cache is recovered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.store.batching import IDLE_POOL_MIN, MAX_BATCH, CommandBatcher
from orchestrator.store.redis_client import blocking_client
from tests.support.redis_writes import round_trips


def _url(client: Redis) -> str:
    kwargs = client.get_connection_kwargs()
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


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
    with round_trips(sent):
        replies = await asyncio.gather(*(batcher.execute("INCRBY", "k", i) for i in range(1, 201)))
    assert sent == [1]  # one write (one round trip) for two hundred callers
    assert sorted(int(r) for r in replies)[-1] == sum(range(1, 201))
    assert int(await client.get("k")) == sum(range(1, 201))


async def test_a_burst_past_the_batch_size_goes_in_several_pipelines(client: Redis) -> None:
    batcher = CommandBatcher(client)
    sent: list[int] = []
    count = 2 * MAX_BATCH + 10
    await asyncio.gather(*(batcher.execute("PING") for _ in range(count)))  # its connections made
    with round_trips(sent):
        replies = await asyncio.gather(*(batcher.execute("INCR", "burst") for _ in range(count)))
    assert len(sent) == 3
    assert sorted(int(r) for r in replies) == list(range(1, count + 1))


async def test_a_connection_the_server_closed_between_batches_is_replaced(client: Redis) -> None:
    """A connection the server closed between two batches (kept by the batcher, or in the
    client's pool) is connected again before the next batch is written: the batch does not
    fail on it (redis-py's pipeline failed it with a ConnectionError)."""
    batcher = CommandBatcher(client)
    assert await batcher.execute("SET", "k", "1")
    other = Redis.from_url(_url(client), decode_responses=True)
    try:
        assert await other.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") >= 1
    finally:
        await other.aclose()
    await asyncio.sleep(0.05)  # the loop sees the kept connection's end of stream
    assert await batcher.execute("GET", "k") == "1"
    assert await batcher.execute("INCR", "n") == 1  # and the new connection is kept in a good state


async def test_a_small_pools_connection_is_not_kept(redis_server: EmbeddedRedis) -> None:
    """From a pool of a few connections the batcher takes one per batch and gives it back:
    the client's other callers need it."""
    small = blocking_client(redis_server.url, decode_responses=True, max_connections=1, timeout=1)
    try:
        batcher = CommandBatcher(small)
        assert await batcher.execute("SET", "only", "x")
        assert await small.get("only") == "x"  # the pool's one connection is free again
    finally:
        await small.aclose()


async def test_a_plain_pools_connections_go_back_after_each_batch(redis_server: EmbeddedRedis) -> None:
    """A plain pool at its size refuses a connection (a blocking one waits): the batcher
    keeps none of its connections between batches."""
    plain = Redis.from_url(redis_server.url, decode_responses=True, max_connections=IDLE_POOL_MIN)
    try:
        batcher = CommandBatcher(plain)
        await plain.delete("plain")
        await asyncio.gather(*(batcher.execute("INCR", "plain") for _ in range(10)))
        assert await batcher.execute("GET", "plain") == "10"
        held = [await plain.connection_pool.get_connection() for _ in range(IDLE_POOL_MIN)]  # all of them free
        for conn in held:
            await plain.connection_pool.release(conn)
    finally:
        await plain.aclose()


async def test_a_large_blocking_pools_connection_is_kept_between_batches(redis_server: EmbeddedRedis) -> None:
    """The workers' and the API's pools wait for a connection: the batcher keeps one for
    its next batch (no pool checkout per batch), and a connection the server closed
    meanwhile is connected again."""
    large = blocking_client(redis_server.url, decode_responses=True, max_connections=IDLE_POOL_MIN, timeout=1)
    try:
        await large.delete("kept")
        batcher = CommandBatcher(large)
        checkouts: list[int] = []
        real = large.connection_pool.get_connection

        async def counted(*args: object, **kwargs: object) -> object:
            checkouts.append(1)
            return await real(*args, **kwargs)

        large.connection_pool.get_connection = counted  # type: ignore[method-assign]
        for i in range(5):
            assert await batcher.execute("INCR", "kept") == i + 1
        assert checkouts == [1]
        await large.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        await asyncio.sleep(0.05)  # the loop sees the kept connection's end of stream
        assert await batcher.execute("INCR", "kept") == 6
    finally:
        await large.aclose()


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
