"""Auto-pipelining: the Redis commands a process issues in one loop iteration travel in
one pipeline (one connection, one write, one read), as ioredis' ``enableAutoPipelining``.

Hundreds of node steps on one event loop each claim, complete and append events: sent one
by one, every command takes a pooled connection (under a timeout), a socket write and a
read of its own, and a burst needs as many connections as there are commands in flight.
:class:`CommandBatcher` queues the commands issued while the loop runs its current
callbacks and sends them together at the next iteration; each caller awaits its own reply
(a command's error is raised to its caller only). Pipelines are not transactions: each
script is still atomic on its own, exactly as when sent alone. Several batches may be in
flight at once (a slow reply does not hold back the next batch).

On one Redis a batch is written and read on a pool connection directly, without
redis-py's pipeline object (``CommandBatcher._on_one_redis``: the same write and replies,
without layers that cost a lone chain's every link as much CPU as its step), and the
connection stays with the batcher for its next batch when its pool is a large blocking
one; a cluster's batches go through redis-py's cluster pipeline, which routes them.

Scripts go as ``EVALSHA``; a batch that meets ``NOSCRIPT`` (a restarted or flushed
Redis) loads the scripts and sends those commands again.

On a cluster, a command a node's failure answered (connection lost, timeout, cluster down,
slot not covered) goes again once the client has read the slot map anew, up to the
client's retries, 0.25 s apart: what redis-py does for a pipeline that raises, and for a
pipeline or command on one Redis. Pipelines sent here report errors per command, and for
those redis-py re-reads nothing: after a failover, every command for the failed primary's
slots went on to its dead address until something else in the process refreshed the map.
Sending a command twice is what redis-py's retries do too; the store's scripts are made
to be run again (a claim, a completion or a create seen twice changes nothing more).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError, ResponseError

from orchestrator.store.redis_client import is_cluster

MAX_BATCH = 512  # commands per pipeline; a larger burst goes as several
IDLE_MAX = 2  # connections a batcher keeps between its batches (one Redis)
IDLE_POOL_MIN = 16  # ... only from a blocking pool this large: a small pool's callers need them
RETRY_PAUSE_S = 0.25  # between a cluster's attempts, as redis-py's cluster pipeline
Batch = list[tuple[tuple[Any, ...], dict[str, Any], "asyncio.Future[Any]"]]


def _still_open(conn: Any) -> bool:
    """Whether a connection between two batches is ready for the next: connected, the
    server's end of stream not seen, nothing unread (redis-py's check of a connection its
    pool lends, ``can_read``: what came has already been received by the loop)."""
    reader = getattr(conn, "_reader", None)
    return bool(conn.is_connected and reader is not None and not reader.at_eof()
                and not getattr(reader, "_buffer", b""))


class CommandBatcher:
    """Send the commands of one loop iteration in one pipeline; see the module doc."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._pending: Batch = []
        self._flushes: set[asyncio.Task[None]] = set()
        self._idle: list[Any] = []

    def _queue(self, command: tuple[Any, ...], options: dict[str, Any] | None = None) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._pending:  # the batch's sender starts at the next iteration and takes what is queued by then
            self._spawn(self._send_pending())
        self._pending.append((command, options or {}, future))
        return future

    async def execute(self, *command: Any) -> Any:
        """Queue ``command`` (e.g. ``"HGET", key, field``) and await its reply."""
        return await self._queue(command)

    async def script_acked(self, script: AsyncScript, keys: list[str], args: list[Any], replicas: int,
                           timeout_ms: int) -> tuple[Any, int]:
        """:meth:`script`, then ``WAIT replicas timeout_ms`` right behind it in the same
        pipeline (so on the same connection to the same node: WAIT counts the replicas that
        hold this connection's writes). The script's reply and how many replicas acked
        (0 when the WAIT itself failed)."""
        cluster: Any = self.redis
        options: dict[str, Any] = {}
        if is_cluster(cluster):
            await cluster.initialize()  # the slot map (a no-op once known)
            options["target_nodes"] = cluster.get_node_from_key(keys[0])
        for attempt in range(2):
            ran = self._queue(("EVALSHA", script.sha, len(keys), *keys, *args))
            acked = self._queue(("WAIT", replicas, timeout_ms), dict(options))
            try:
                reply = await ran
            except NoScriptError:
                await asyncio.gather(acked, return_exceptions=True)
                if attempt:
                    raise
                script.sha = await self.redis.script_load(script.script)
                continue
            try:
                return reply, int(await acked)
            except Exception:  # an unanswered WAIT confirms nothing
                return reply, 0
        raise AssertionError("unreachable")

    async def script(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """Run a registered script by its SHA (loaded again if Redis lost it)."""
        try:
            return await self._queue(("EVALSHA", script.sha, len(keys), *keys, *args))
        except NoScriptError:
            script.sha = await self.redis.script_load(script.script)
            return await self._queue(("EVALSHA", script.sha, len(keys), *keys, *args))

    def _spawn(self, sending: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(sending)
        self._flushes.add(task)  # a reference, so the task is not collected mid-flight
        task.add_done_callback(self._flushes.discard)

    async def _send_pending(self) -> None:
        """Send what was queued (in pipelines of at most ``MAX_BATCH``, the first in this
        task): one task per batch, started when its first command is queued (a callback
        that then started the task cost each batch a loop iteration more)."""
        batch, self._pending = self._pending, []
        for start in range(MAX_BATCH, len(batch), MAX_BATCH):
            self._spawn(self._send(batch[start:start + MAX_BATCH]))
        await self._send(batch[:MAX_BATCH])

    async def _pipeline(self, batch: Batch) -> list[Any]:
        """The batch's replies (a reply error in its command's place). On one Redis the
        commands go on a connection of the client's pool without redis-py's pipeline
        object (see :meth:`_on_one_redis`); a cluster's go through its pipeline, which
        routes each command to its node."""
        if is_cluster(self.redis):
            pipe = self.redis.pipeline(transaction=False)
            for command, options, _ in batch:
                pipe.execute_command(*command, **options)
            return list(await pipe.execute(raise_on_error=False))
        return await self._on_one_redis(batch)

    async def _on_one_redis(self, batch: Batch) -> list[Any]:
        """What redis-py's pipeline does for a batch on one Redis (one packed write, each
        reply read and parsed by the client, a connection error retried on a new
        connection under the connection's retry policy), without its layers: a pipeline
        object per batch, a pool checkout per batch (a lock, a timeout, the observability
        counters, the connection's checks), the optional features' hooks. They were about
        as much CPU as the rest of a one-script batch, which is what each link of a chain
        sends.

        A connection whose every reply was read stays with the batcher for its next batch
        (up to ``IDLE_MAX``, from a blocking pool with room for ``IDLE_POOL_MIN``
        connections or more, as the workers' and the API's are: a caller there waits for a
        connection, where a plain pool at its size fails the call); any other goes back to
        the pool. A connection the server closed while it waited (kept here, or in the
        pool, whose check redis-py 8 skips while its maintenance notifications are on, as
        they are by default) is connected again before the batch is written: the batch
        does not fail on it. (A connection's retry policy is redis-py's: none by default,
        so a batch is never sent twice unless the client asks for retries.)"""
        pool: Any = self.redis.connection_pool
        conn = self._idle.pop() if self._idle else await pool.get_connection()
        if not _still_open(conn):  # its write connects it again
            await conn.disconnect()
        kept = False
        try:
            replies: list[Any] = await conn.retry.call_with_retry(lambda: self._exchange(conn, batch),
                                                       lambda error: conn.disconnect(error=error))
            kept = len(self._idle) < IDLE_MAX and isinstance(pool, BlockingConnectionPool) \
                and (pool.max_connections or 0) >= IDLE_POOL_MIN
            return replies
        finally:
            if kept:
                self._idle.append(conn)
            else:
                await pool.release(conn)

    async def _exchange(self, conn: Any, batch: Batch) -> list[Any]:
        """Write the batch's commands at once and read every reply (a pipeline's
        ``raise_on_error=False``: a reply error takes its command's place)."""
        await conn.send_packed_command(conn.pack_commands([command for command, _, _ in batch]))
        replies: list[Any] = []
        for command, options, _ in batch:
            try:
                replies.append(await self.redis.parse_response(conn, command[0], **options))
            except ResponseError as exc:
                replies.append(exc)
        return replies

    async def _again_on_cluster(self, batch: Batch, replies: list[Any]) -> list[Any]:
        """``replies`` with the commands a failed node answered sent again (see the module
        doc); a command aimed at a node of its own (``target_nodes``) is not."""
        cluster: RedisCluster = self.redis  # type: ignore[assignment]
        for attempt in range(max(1, cluster.retry.get_retries())):
            failed = [i for i, reply in enumerate(replies)
                      if type(reply) in RedisCluster.ERRORS_ALLOW_RETRY and not batch[i][1]]
            if not failed:
                break
            if attempt:
                await asyncio.sleep(RETRY_PAUSE_S)
            await cluster.nodes_manager.initialize()
            again = await self._pipeline([batch[i] for i in failed])
            for i, reply in zip(failed, again, strict=True):
                replies[i] = reply
        return replies

    async def _send(self, batch: Batch) -> None:
        try:
            replies = await self._pipeline(batch)
            if is_cluster(self.redis):
                replies = await self._again_on_cluster(batch, replies)
        except BaseException as exc:  # the connection failed: every caller of the batch sees it
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else ConnectionError(str(exc)))
            if not isinstance(exc, Exception):
                raise
            return
        for (_, _, future), reply in zip(batch, replies, strict=True):
            if future.done():
                continue  # its caller was cancelled
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)
