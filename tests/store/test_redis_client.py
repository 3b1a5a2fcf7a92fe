"""Redis clients made by ``orchestrator.store.redis_client``: a task cancelled in the middle of
a command stops there (redis-py's own connections lose such cancellations on 3.11)."""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from redis.exceptions import DataError, NoScriptError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.store import redis_client
from tests.support import redis_server

TRIES = 300


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    s = redis_server()
    try:
        yield s
    finally:
        s.stop()


async def cancellations_lost(redis: Redis, tries: int = TRIES) -> int:
    """Cancel a task at a random moment of a PING, ``tries`` times; how often it carried on."""
    rng = random.Random(11)
    lost = 0
    for _ in range(tries):
        async def command_then_wait() -> None:
            await redis.ping()
            await asyncio.sleep(30)  # only a lost cancellation gets here and stays

        task = asyncio.create_task(command_then_wait())
        await asyncio.sleep(rng.random() * 0.002)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=0.2)  # a cancelled task ends at once
        if not done:
            lost += 1
            task.cancel()
            await asyncio.wait({task}, timeout=1)
    return lost


async def test_a_task_cancelled_mid_command_always_stops(server: EmbeddedRedis) -> None:
    redis = redis_client.client(server.url, decode_responses=True)
    try:
        assert await cancellations_lost(redis) == 0
    finally:
        await redis.aclose()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="asyncio.wait_for keeps cancellations from 3.12 on")
async def test_redis_pys_own_connections_lose_some_which_is_why_the_fix_exists(server: EmbeddedRedis) -> None:
    redis = Redis.from_url(server.url, decode_responses=True)
    try:
        assert await cancellations_lost(redis, tries=150) > 0  # ~8 % of tries: P(none) < 1e-5
    finally:
        await redis.aclose()


async def test_every_connection_kind_is_the_cancellable_one(server: EmbeddedRedis) -> None:
    for url, kind in ((server.url, redis_client.TcpConnection),
                      ("unix:///tmp/none.sock", redis_client.UnixConnection),
                      ("rediss://localhost:1/0", redis_client.TlsConnection)):
        assert redis_client.client(url).connection_pool.connection_class is kind
        assert redis_client.blocking_client(url).connection_pool.connection_class is kind


async def test_a_write_past_the_socket_timeout_is_redis_pys_timeout_error(server: EmbeddedRedis) -> None:
    redis = redis_client.client(server.url, socket_timeout=0.2)
    try:
        await redis.ping()
        conn = await redis.connection_pool.get_connection()
        try:
            async def never_drains() -> None:
                await asyncio.sleep(5)

            conn._writer.drain = never_drains  # type: ignore[union-attr,method-assign]
            with pytest.raises(RedisTimeoutError):
                await conn.send_packed_command(b"PING\r\n")
            assert conn.socket_timeout == 0.2  # restored
        finally:
            await redis.connection_pool.release(conn)
    finally:
        await redis.aclose()


PACKED_ARGS: list[tuple[object, ...]] = [
    ("EVALSHA", "abc", 2, "k1", "k2", '{"node":"n1","read":["é"]}', 0.1, 1 / 3, 1e20, -7, b"\x00\xff"),
    ("CONFIG GET", "maxmemory"),
    (b"CLIENT SETNAME", "x"),
    ("SET", "k", memoryview(b"view"), bytearray(b"array")),
    ("SET", "k", memoryview(b"a-s-t-r-i-d-e")[::2]),  # hiredis alone would pack its whole buffer
]


@pytest.mark.parametrize("args", PACKED_ARGS)
def test_commands_are_packed_as_redis_py_packs_them(args: tuple[object, ...]) -> None:
    ours = redis_client.TcpConnection()
    theirs = Connection()
    assert b"".join(ours.pack_command(*args)) == b"".join(bytes(c) for c in theirs.pack_command(*args))


def test_a_value_redis_cannot_take_is_redis_pys_data_error() -> None:
    with pytest.raises(DataError):
        redis_client.TcpConnection().pack_command("SET", "k", None)


async def test_script_replies_come_back_through_the_packed_commands(server: EmbeddedRedis) -> None:
    redis = redis_client.client(server.url, decode_responses=True)
    try:
        reply = await redis.eval("return {KEYS[1], ARGV[1], ARGV[2]}", 1, "k:é", 0.5, "x" * 70_000)
        assert reply == ["k:é", "0.5", "x" * 70_000]
    finally:
        await redis.aclose()


def _pipelined(redis: Redis) -> Any:
    pipe = redis.pipeline(transaction=False)
    pipe.set("p:k", "é")
    pipe.get("p:k")
    pipe.hset("p:h", mapping={"a": "1", "b": "2"})
    pipe.hgetall("p:h")
    pipe.incr("p:k")  # an error reply: not an integer
    pipe.evalsha("0" * 40, 0)  # NOSCRIPT
    pipe.eval("return {1, 'two', {3}, false}", 0)
    pipe.get("p:none")
    return pipe


@pytest.mark.parametrize("decode", [True, False])
async def test_pipelined_replies_read_from_the_received_buffer_are_redis_pys_replies(
        server: EmbeddedRedis, decode: bool) -> None:
    ours = redis_client.client(server.url, decode_responses=decode)
    theirs = Redis.from_url(server.url, decode_responses=decode)
    try:
        await theirs.delete("p:k", "p:h")
        mine = await _pipelined(ours).execute(raise_on_error=False)
        await theirs.delete("p:k", "p:h")
        expected = await _pipelined(theirs).execute(raise_on_error=False)
        assert [type(r) for r in mine] == [type(r) for r in expected]
        assert [str(r) if isinstance(r, Exception) else r for r in mine] == \
            [str(r) if isinstance(r, Exception) else r for r in expected]
        assert isinstance(mine[5], NoScriptError)
    finally:
        await ours.aclose()
        await theirs.aclose()


async def test_a_reply_already_received_is_taken_without_a_timer(server: EmbeddedRedis) -> None:
    redis = redis_client.client(server.url, decode_responses=True, socket_timeout=5)
    try:
        await redis.ping()
        conn = await redis.connection_pool.get_connection()
        try:
            await conn.send_packed_command(conn.pack_commands([("PING",), ("ECHO", "a"), ("ECHO", "b")]))
            assert await conn.read_response() == "PONG"  # awaited: redis-py's read, under its timer
            timers = len(asyncio.get_running_loop()._scheduled)  # type: ignore[attr-defined]
            assert [await conn.read_response(), await conn.read_response()] == ["a", "b"]
            assert len(asyncio.get_running_loop()._scheduled) == timers  # type: ignore[attr-defined]
        finally:
            await redis.connection_pool.release(conn)
    finally:
        await redis.aclose()
