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

They also pack commands with hiredis, and take a reply that is already received (a
pipeline's replies after its first, mostly) from the hiredis reader without arming a
timer: redis-py reads every reply under its own ``socket_timeout`` timer, armed and
cancelled even when the reply is there (the largest part of reading a pipelined reply);
a read that waits is still bounded by it.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    DefaultParser,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, RedisClusterException, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.settings.store import is_cluster_url

_hiredis_pack: Any = None
try:
    import hiredis

    _hiredis_pack = hiredis.pack_command
except ImportError:  # pragma: no cover - a dependency; redis-py works without it
    pass

_HiredisParser: Any = None  # redis-py's asyncio hiredis parser, whose reader holds received replies
_NOT_ENOUGH_DATA: Any = None
try:
    from redis._parsers.hiredis import NOT_ENOUGH_DATA as _NOT_ENOUGH_DATA
    from redis._parsers.hiredis import _AsyncHiredisParser as _HiredisParser
except ImportError:  # pragma: no cover - another redis-py layout: every read goes through redis-py
    pass


NOT_ENOUGH_DATA: Any = _NOT_ENOUGH_DATA  # what a hiredis reader of redis-py's returns until a reply is whole
_PUSH: Any = getattr(hiredis, "PushNotification", None) if _hiredis_pack is not None else None


def parses_with_hiredis(pool: Any) -> bool:
    """Whether ``pool``'s connections parse replies with redis-py's hiredis parser (the
    default when hiredis is installed, which the project requires)."""
    return _HiredisParser is not None and pool.connection_kwargs.get("parser_class", DefaultParser) is _HiredisParser


def is_push(reply: Any) -> bool:
    """Whether ``reply`` is a RESP3 push message (one that answers no command)."""
    return _PUSH is not None and isinstance(reply, _PUSH)


# Packed as bytes first: hiredis refuses a bytearray and packs a strided memoryview's
# underlying buffer, not its items.
_AS_BYTES = frozenset({bytearray, memoryview})


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
        if not _AS_BYTES.isdisjoint(map(type, args)):  # rare; checked in C, not per argument in Python
            args = tuple(bytes(a) if isinstance(a, (bytearray, memoryview)) else a for a in args)
        try:
            return [_hiredis_pack(args)]
        except TypeError as exc:
            raise DataError(str(exc)) from exc

    async def read_response(self, disable_decoding: bool = False, timeout: float | None = None, *,
                            disconnect_on_error: bool = True, push_request: bool | None = False) -> Any:
        """redis-py's read, except that a reply the hiredis reader already holds is returned
        at once, with no timer (see the module docstring): the same reply, or the same error
        raised (a reply error as itself, a broken connection after disconnecting it)."""
        parser = self._hiredis() if timeout is None and not push_request else None
        if parser is None:
            return await super().read_response(disable_decoding, timeout, disconnect_on_error=disconnect_on_error,
                                               push_request=push_request)
        response = parser._reader.gets(False) if disable_decoding else parser._reader.gets()
        if response is _NOT_ENOUGH_DATA:  # to be awaited: redis-py's read, timed
            return await super().read_response(disable_decoding, timeout, disconnect_on_error=disconnect_on_error,
                                               push_request=push_request)
        push = getattr(parser, "_hiredis_PushNotificationType", None)
        if push is not None and isinstance(response, push):  # a RESP3 push message first: as redis-py does
            await parser.handle_push_response(response)
            return await self.read_response(disable_decoding, timeout, disconnect_on_error=disconnect_on_error)
        broken = response if isinstance(response, RedisConnectionError) else \
            response[0] if isinstance(response, list) and response and isinstance(response[0], RedisConnectionError) \
            else None
        if broken is not None:
            if disconnect_on_error:
                await self.disconnect(nowait=True)
            raise broken
        if self.health_check_interval:
            self.next_health_check = asyncio.get_running_loop().time() + self.health_check_interval
        if isinstance(response, ResponseError):
            raise response from None
        return response

    def _hiredis(self) -> Any:
        """redis-py's hiredis parser of this connection, when it is one and connected, else None."""
        parser: Any = getattr(self, "_parser", None)
        if _HiredisParser is None or type(parser) is not _HiredisParser or not parser._connected:
            return None
        return parser

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
    """``Redis.from_url(url, **kwargs)`` with cancellable writes; a cluster client for a
    ``redis+cluster://`` URL (see :func:`cluster_client`)."""
    if is_cluster_url(url):
        return cluster_client(url, **kwargs)
    return Redis.from_pool(fixed(ConnectionPool.from_url(url, **kwargs)))


def blocking_client(url: str, **kwargs: Any) -> Redis:
    """A client on a ``BlockingConnectionPool`` (a burst waits for a free connection); a
    cluster client for a ``redis+cluster://`` URL."""
    if is_cluster_url(url):
        return cluster_client(url, **kwargs)
    return Redis.from_pool(fixed(BlockingConnectionPool.from_url(url, **kwargs)))


class _Cluster(RedisCluster):
    """redis-py's ``RedisCluster`` that finds XREAD's keys itself.

    redis-py 8.1 asks one node (``COMMAND GETKEYS``, its parser's node, chosen at start)
    for the keys of commands whose keys move (XREAD), and asks before its retry loop: once
    that node dies, every XREAD fails with a ConnectionError forever, even after failover.
    The keys of ``XREAD ... STREAMS k1 k2 id1 id2`` are read here (as redis-py does for
    EVALSHA), so reading a run's events never depends on one node."""

    async def _determine_slot(self, command: str, *args: Any) -> int:
        if str(command).upper() in ("XREAD", "XREADGROUP"):
            words = [a.decode() if isinstance(a, bytes) else str(a) for a in args]
            at = next(i for i, w in enumerate(words) if w.upper() == "STREAMS")
            streams = words[at + 1:]
            slots = {self.keyslot(k) for k in streams[:len(streams) // 2]}
            if len(slots) != 1:
                raise RedisClusterException(f"{command}: its streams are in {len(slots)} slots, not one")
            return slots.pop()
        return await super()._determine_slot(command, *args)


def cluster_client(url: str, **kwargs: Any) -> Redis:
    """redis-py's asyncio ``RedisCluster`` for ``redis+cluster://[user:password@]host:port[,host:port...]``
    (``rediss+cluster://``: TLS), with cancellable writes.

    Typed as ``Redis``: the product calls only commands both clients have (single-key
    commands, scripts whose keys share one slot, pipelines; transactions on one slot).
    ``is_cluster(client)`` tells them apart where the fan-in differs."""
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    nodes = []
    for hostport in hosts.split(","):
        host, _, port = hostport.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"REDIS_URL {url!r}: cluster nodes are host:port[,host:port...], not {hostport!r}")
        nodes.append(ClusterNode(host.strip("[]"), int(port)))
    # A cluster node's pool does not wait for a free connection (it raises past
    # max_connections): the pool-wait timeout of a blocking pool has no meaning here.
    kwargs.pop("timeout", None)
    tls = parts.scheme.lower().startswith("rediss")
    cluster = _Cluster(startup_nodes=nodes, username=unquote(username) or None,
                           password=unquote(password) or None, ssl=tls, **kwargs)
    conn_class = TlsConnection if tls else TcpConnection
    cluster.connection_kwargs["connection_class"] = conn_class
    cluster.nodes_manager.connection_kwargs["connection_class"] = conn_class
    for node in nodes:
        node.connection_class = conn_class
        node.connection_kwargs.update({k: v for k, v in cluster.connection_kwargs.items()
                                       if k not in ("connection_class", "max_connections")})
    return cast(Redis, cluster)


def sibling(redis: Redis, **kwargs: Any) -> Redis:
    """A new client on the same server (or cluster) as ``redis``, with its own connections
    and ``kwargs`` over its options (e.g. ``decode_responses=False``, ``max_connections=1``)."""
    if isinstance(redis, RedisCluster):
        cluster = cast(RedisCluster, redis)
        accepted = set(inspect.signature(RedisCluster.__init__).parameters) - {"self", "host", "port",
                                                                               "startup_nodes", "max_connections"}
        options = {k: v for k, v in cluster.connection_kwargs.items() if k in accepted}
        nodes = [ClusterNode(n.host, n.port) for n in cluster.get_nodes()] or list(
            cluster.nodes_manager.startup_nodes.values())
        conn_class = cluster.connection_kwargs.get("connection_class", TcpConnection)
        own = _Cluster(startup_nodes=[ClusterNode(n.host, n.port) for n in nodes],
                           **{**options, **kwargs})
        own.connection_kwargs["connection_class"] = conn_class
        own.nodes_manager.connection_kwargs["connection_class"] = conn_class
        return cast(Redis, own)
    pool = redis.connection_pool
    max_connections = kwargs.pop("max_connections", None)
    own_pool = ConnectionPool(connection_class=pool.connection_class, max_connections=max_connections,
                              **{**pool.connection_kwargs, **kwargs})
    return Redis.from_pool(fixed(own_pool))


def is_cluster(redis: Any) -> bool:
    """Whether ``redis`` is a cluster client."""
    return isinstance(redis, RedisCluster)


def decodes(redis: Any) -> bool:
    """Whether ``redis`` answers ``str`` (``decode_responses=True``), cluster or not."""
    return bool(redis.get_encoder().decode_responses)
