"""Auto-pipelining against a real redis-server: commands issued together share one round
trip, each caller gets its own reply or error, and a flushed script cache is recovered.

Each async test runs on the standard loop (the API's) and on uvloop's (the workers'): the
stream is its connection's protocol, called by either loop's transports (``conftest.py``,
``pytest_asyncio_loop_factories``)."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import AsyncIterator, Callable

import hiredis
import pytest
from redis.asyncio import Redis
from redis.exceptions import BusyLoadingError, InvalidResponse, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.store.batching import HOLD_POOL_MIN, WRITE_AT, CommandBatcher
from orchestrator.store.redis_client import blocking_client
from tests.support.redis_writes import round_trips


def _url(client: Redis) -> str:
    kwargs = client.get_connection_kwargs()
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


@pytest.fixture(params=["held", "checked out"])
async def client(redis_server: EmbeddedRedis, request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    """A workers' and API's kind of client (a blocking pool of 16: the batcher holds one of
    its connections), and a plain pool's (each batch checks one out)."""
    redis = blocking_client(redis_server.url, decode_responses=True, max_connections=HOLD_POOL_MIN, timeout=5) \
        if request.param == "held" else Redis.from_url(redis_server.url, decode_responses=True)
    await redis.flushdb()
    try:
        yield redis
    finally:
        await redis.aclose()


@pytest.fixture
async def held(redis_server: EmbeddedRedis) -> AsyncIterator[Redis]:
    redis = blocking_client(redis_server.url, decode_responses=True, max_connections=HOLD_POOL_MIN, timeout=5)
    await redis.flushdb()
    try:
        yield redis
    finally:
        await redis.aclose()


async def test_commands_queued_together_are_written_in_chunks_as_they_come(held: Redis) -> None:
    """On one Redis, every ``WRITE_AT`` commands queued are written at once, in the loop
    iteration that queued them (Redis starts on them while the loop goes on), the rest at
    the iteration's end; every caller gets its own reply."""
    batcher = CommandBatcher(held)
    assert await batcher.execute("PING")  # its connection made
    sent: list[int] = []
    with round_trips(sent):
        replies = await asyncio.gather(*(batcher.execute("INCRBY", "k", i) for i in range(1, 201)))
    assert len(sent) == -(-200 // WRITE_AT)
    assert sorted(int(r) for r in replies)[-1] == sum(range(1, 201))
    assert int(await held.get("k")) == sum(range(1, 201))


async def test_a_chunk_is_written_before_the_loop_iteration_ends(held: Redis) -> None:
    batcher = CommandBatcher(held)
    assert await batcher.execute("PING")
    sent: list[int] = []
    with round_trips(sent):
        futures = [batcher._queue(("INCR", "now")) for _ in range(WRITE_AT)]  # no await in between
        assert sent == [1]  # the chunk went out in this loop iteration
        assert [int(r) for r in await asyncio.gather(*futures)] == list(range(1, WRITE_AT + 1))


async def test_a_large_pool_lends_the_batcher_one_connection_for_every_batch(redis_server: EmbeddedRedis) -> None:
    """From the workers' and the API's pools (blocking, 16 or more) the batcher holds one
    connection: no batch checks one out; closing the client closes it."""
    large = blocking_client(redis_server.url, decode_responses=True, max_connections=HOLD_POOL_MIN, timeout=1)
    try:
        batcher = CommandBatcher(large)
        checkouts: list[int] = []
        real = large.connection_pool.get_connection

        async def counted(*args: object, **kwargs: object) -> object:
            checkouts.append(1)
            return await real(*args, **kwargs)

        await large.delete("held")
        large.connection_pool.get_connection = counted  # type: ignore[method-assign]
        for i in range(5):
            assert await batcher.execute("INCR", "held") == i + 1
        await asyncio.gather(*(batcher.execute("INCR", "held") for _ in range(3 * WRITE_AT)))
        assert checkouts == [1]
    finally:
        await large.aclose()


@pytest.mark.parametrize("blocking", [True, False])
async def test_a_small_pools_connections_go_back_after_each_batch(redis_server: EmbeddedRedis, blocking: bool) -> None:
    """A small pool's callers need every connection (a plain pool at its size refuses one):
    the batcher holds none, each batch checks one out and gives it back."""
    small = (blocking_client(redis_server.url, decode_responses=True, max_connections=2, timeout=1) if blocking
             else Redis.from_url(redis_server.url, decode_responses=True, max_connections=2))
    try:
        batcher = CommandBatcher(small)
        await small.delete("small")
        await asyncio.gather(*(batcher.execute("INCR", "small") for _ in range(10)))
        assert await batcher.execute("GET", "small") == "10"
        held = [await small.connection_pool.get_connection() for _ in range(2)]  # both free again
        for conn in held:
            await small.connection_pool.release(conn)
    finally:
        await small.aclose()


async def test_a_connection_the_server_closed_between_batches_is_replaced(client: Redis) -> None:
    """A connection the server closed between two batches is connected again before the
    next batch is written: the batch does not fail on it."""
    batcher = CommandBatcher(client)
    assert await batcher.execute("SET", "k", "1")
    other = Redis.from_url(_url(client), decode_responses=True)
    try:
        assert await other.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") >= 1
    finally:
        await other.aclose()
    await asyncio.sleep(0.05)  # the loop sees the connection's end of stream
    assert await batcher.execute("GET", "k") == "1"
    assert await batcher.execute("INCR", "n") == 1  # and the new connection is in a good state
    await batcher.aclose()


async def test_a_connection_lost_with_replies_awaited_fails_them_and_the_next_command_reconnects(
        held: Redis) -> None:
    """Commands written on a connection that is lost before their replies come fail with a
    connection error (never sent twice), and the next command goes on a new connection."""
    batcher = CommandBatcher(held)
    own_id = await batcher.execute("CLIENT", "ID")
    waiting = asyncio.ensure_future(batcher.execute("BLPOP", "never", 5))
    behind = asyncio.ensure_future(batcher.execute("INCR", "behind"))
    await asyncio.sleep(0.1)  # both written; BLPOP holds the connection
    assert await held.execute_command("CLIENT", "KILL", "ID", own_id) == 1
    results = await asyncio.wait_for(asyncio.gather(waiting, behind, return_exceptions=True), 5)
    assert all(isinstance(r, RedisConnectionError) for r in results), results
    assert await held.get("behind") is None  # the INCR behind the BLPOP never ran
    assert await batcher.execute("INCR", "after") == 1
    assert await batcher.execute("CLIENT", "ID") != own_id
    await batcher.aclose()


async def test_a_script_and_its_wait_go_on_a_connection_of_their_own(held: Redis) -> None:
    """``WAIT`` blocks its connection until the replicas answer (here: none, so its timeout):
    the commands queued meanwhile are answered at once, not after it."""
    batcher = CommandBatcher(held)
    script = held.register_script("return redis.call('INCR', KEYS[1])")
    acked = asyncio.ensure_future(batcher.script_acked(script, ["w"], [], replicas=1, timeout_ms=500))
    await asyncio.sleep(0.05)
    began = asyncio.get_running_loop().time()
    assert await batcher.execute("INCR", "quick") == 1
    assert asyncio.get_running_loop().time() - began < 0.3
    assert await acked == (1, 0)  # the script ran; no replica acked
    await batcher.aclose()


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


async def test_each_command_gets_its_reply_as_redis_py_parses_it(client: Redis) -> None:
    """Replies go through redis-py's response callbacks, as its own commands' do."""
    batcher = CommandBatcher(client)
    await client.hset("h", mapping={"a": "1", "b": "2"})
    assert await batcher.execute("HGETALL", "h") == {"a": "1", "b": "2"}
    assert await batcher.execute("SET", "k", "v") is True
    assert await batcher.execute("HGET", "h", "b") == "2"
    await batcher.aclose()


async def test_replies_that_do_not_come_within_the_socket_timeout_fail_and_the_next_command_reconnects(
        redis_server: EmbeddedRedis) -> None:
    """A connection that answers nothing for ``socket_timeout`` while replies are awaited
    fails them with a timeout (the command behind is never run) and is replaced."""
    redis = blocking_client(redis_server.url, decode_responses=True, max_connections=HOLD_POOL_MIN, timeout=5,
                            socket_timeout=0.3)
    batcher = CommandBatcher(redis)
    try:
        own_id = await batcher.execute("CLIENT", "ID")
        began = asyncio.get_running_loop().time()
        results = await asyncio.wait_for(asyncio.gather(
            batcher.execute("BLPOP", "never", 5), batcher.execute("INCR", "behind"), return_exceptions=True), 5)
        assert all(isinstance(r, RedisTimeoutError) for r in results), results
        assert asyncio.get_running_loop().time() - began < 2
        assert await batcher.execute("CLIENT", "ID") != own_id
        assert await batcher.execute("GET", "behind") is None
    finally:
        await batcher.aclose()
        await redis.aclose()


class FakeRedis:
    """A server that speaks just enough RESP: ``+OK`` to every command (the client's
    handshake included), except what ``answers`` (command name -> raw reply bytes) says."""

    def __init__(self, answers: dict[str, Callable[[list[bytes]], bytes]]) -> None:
        self.answers, self.connections = answers, 0
        self.server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        commands = hiredis.Reader()
        try:
            while data := await reader.read(65536):
                commands.feed(data)
                while (command := commands.gets()) is not False:
                    answer = self.answers.get(command[0].decode().upper())
                    writer.write(answer(command) if answer else b"+OK\r\n")
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.serve, "127.0.0.1", 0)
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()


async def test_a_server_that_cannot_serve_or_answers_out_of_step_is_left_for_a_new_connection() -> None:
    """``-LOADING`` (Redis loading its data) fails the command with redis-py's error and the
    connection; a reply that no command awaited means the replies are out of step with the
    commands: the connection is dropped before it hands anyone a wrong reply; so are bytes
    that are not the protocol."""
    fake = FakeRedis({"PING": lambda _: b"-LOADING Redis is loading the dataset in memory\r\n",
                      "ECHO": lambda c: b"$%d\r\n%s\r\n" % (len(c[1]), c[1]) * 2,
                      "TIME": lambda _: b"?not the protocol\r\n"})
    async with fake as url:
        redis = blocking_client(url, decode_responses=True, max_connections=HOLD_POOL_MIN, timeout=5,
                                socket_timeout=2)
        batcher = CommandBatcher(redis)
        try:
            assert await batcher.execute("SET", "k", "v") is True
            assert fake.connections == 1
            with pytest.raises(BusyLoadingError):
                await batcher.execute("PING")
            assert await batcher.execute("SET", "k", "v") is True
            assert fake.connections == 2
            assert await batcher.execute("ECHO", "hi") == "hi"  # its own reply; the second is extra
            await asyncio.sleep(0.05)
            assert await batcher.execute("SET", "k", "v") is True
            assert fake.connections == 3
            with pytest.raises(InvalidResponse):  # bytes that are not RESP: redis-py's error
                await batcher.execute("TIME")
            assert await batcher.execute("SET", "k", "v") is True
            assert fake.connections == 4
        finally:
            await batcher.aclose()
            await redis.aclose()


def test_a_batcher_used_from_another_event_loop_connects_again(redis_server: EmbeddedRedis) -> None:
    """The held connection belongs to the loop that made it: on another loop (the first one
    closed) the next command connects again instead of failing. (Standard loops only: a
    worker's uvloop loop lives as long as its process.)"""
    redis = blocking_client(redis_server.url, decode_responses=True, max_connections=HOLD_POOL_MIN, timeout=5)
    batcher = CommandBatcher(redis)
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        first.run_until_complete(batcher.execute("DEL", "loops"))
        assert first.run_until_complete(batcher.execute("INCR", "loops")) == 1
        first.close()  # with the connection open: its socket closes when collected, not through the loop
        assert second.run_until_complete(batcher.execute("INCR", "loops")) == 2
        assert second.run_until_complete(batcher.execute("INCR", "loops")) == 3
        with warnings.catch_warnings():  # the first loop's socket, released when collected (asyncio warns)
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
    finally:
        second.run_until_complete(batcher.aclose())
        second.run_until_complete(redis.aclose())
        second.close()
