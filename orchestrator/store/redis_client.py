"""Every redis-py asyncio client of the product is made here, with one fix applied.

redis-py (8.x) sends each command under ``asyncio.wait_for(write, socket_timeout)``. On
Python 3.11 ``wait_for`` loses a cancellation that arrives in the loop iteration where the
write completes (CPython gh-86296, fixed in 3.12 by rewriting ``wait_for`` on
``asyncio.timeout``): the cancelled task carries on as if nothing happened. Measured here:
a task cancelled at a random moment of ``PING`` went on in 8 % of 600 tries. Whatever
stops by cancellation then may not stop: a sweeper or a stream reader told to end, a node
past its timeout, a request whose client left.

The connection classes below write under ``asyncio.timeout`` instead (the same bound,
``socket_timeout``; an expiry is redis-py's ``TimeoutError``, as before). :func:`client`
and :func:`blocking_client` build clients from a URL with them; :func:`fixed` swaps them
into a pool built elsewhere. ``tests/test_redis_client.py`` shows the loss with redis-py's
own classes (on 3.11) and none with these.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import DataError
from redis.exceptions import TimeoutError as RedisTimeoutError

_hiredis_pack: Any = None
try:
    import hiredis

    _hiredis_pack = hiredis.pack_command
except ImportError:  # pragma: no cover - a dependency; redis-py works without it
    pass


class _CancellableWrites(AbstractConnection):
    def pack_command(self, *args: Any) -> list[bytes]:
        """One command in the Redis protocol, packed by hiredis when it is installed (as
        redis-py's synchronous connections do; its asyncio ones pack in Python, which was
        the largest item of a node step's client CPU: dozens of keys and arguments per
        script call). The same bytes; a value hiredis cannot pack is redis-py's DataError."""
        if _hiredis_pack is None or self.encoder.encoding != "utf-8":
            return super().pack_command(*args)
        head = args[0]
        if isinstance(head, str):
            args = (*head.encode().split(), *args[1:])
        elif b" " in head:
            args = (*head.split(), *args[1:])
        try:
            return [_hiredis_pack(tuple(bytes(a) if isinstance(a, (bytearray, memoryview)) else a for a in args))]
        except TypeError as exc:
            raise DataError(str(exc)) from exc

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        timeout_s = self.socket_timeout
        if not timeout_s:
            await super().send_packed_command(command, check_health)
            return
        self.socket_timeout = None  # redis-py then writes without wait_for; bounded here
        try:
            async with asyncio.timeout(timeout_s):
                await super().send_packed_command(command, check_health)
        except TimeoutError as exc:
            raise RedisTimeoutError("Timeout writing to socket") from exc
        finally:
            self.socket_timeout = timeout_s


class TcpConnection(_CancellableWrites, Connection):
    """redis-py's TCP connection, cancellable while it writes."""


class TlsConnection(_CancellableWrites, SSLConnection):
    """redis-py's TLS connection, cancellable while it writes."""


class UnixConnection(_CancellableWrites, UnixDomainSocketConnection):
    """redis-py's unix socket connection, cancellable while it writes."""


_FIXED: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: TcpConnection, SSLConnection: TlsConnection, UnixDomainSocketConnection: UnixConnection,
}


def fixed(pool: ConnectionPool) -> ConnectionPool:
    """``pool`` with its connection class replaced by the cancellable one (before any
    connection is made)."""
    pool.connection_class = _FIXED.get(pool.connection_class, pool.connection_class)
    return pool


def client(url: str, **kwargs: Any) -> Redis:
    """``Redis.from_url(url, **kwargs)`` with cancellable writes."""
    return Redis.from_pool(fixed(ConnectionPool.from_url(url, **kwargs)))


def blocking_client(url: str, **kwargs: Any) -> Redis:
    """A client on a ``BlockingConnectionPool`` (a burst waits for a free connection)."""
    return Redis.from_pool(fixed(BlockingConnectionPool.from_url(url, **kwargs)))
