"""Auto-pipelining: the Redis commands a process issues travel together, as ioredis'
``enableAutoPipelining``.

Hundreds of node steps on one event loop each claim, complete and append events: sent one
by one, every command takes a pooled connection (under a timeout), a socket write and a
read of its own, and a burst needs as many connections as there are commands in flight.
:class:`CommandBatcher` queues the commands and each caller awaits its own reply (a
command's error is raised to its caller only). Pipelines are not transactions: each
script is still atomic on its own, exactly as when sent alone.

On one Redis the commands go on one connection the batcher holds from the client's pool
(:class:`Stream`; closing the client closes it): written as they are queued, in chunks of
``WRITE_AT`` (what is left at the end of a loop iteration goes then), and each reply is
handed to its caller as its bytes arrive, parsed by the connection's own hiredis reader in
the transport's callback (:class:`_Link`, the connection's protocol while the stream holds
it; a reader task woken for each batch cost a chain's node step a task and two loop
iterations, ``bench/README.md``). Writing
while the loop still works on the replies of earlier commands keeps both busy: Redis runs
the first chunk of an iteration's commands while the loop builds the rest. A batch written
whole at the next iteration and read whole left each idle while the other worked: a
worker's loop and its Redis added up to about one core between them on a machine with two
(``bench/README.md``, "Auto-pipelining"). A connection that fails (reset, closed, no reply
byte for ``socket_timeout`` while replies are awaited, a reply that says the server cannot
serve, such as ``LOADING``, bytes that are not the protocol, a reply no command awaited)
fails every command awaiting a reply on it, as a failed pipeline did, and the next command
connects it again; commands are never sent twice. ``WAIT``
(:meth:`CommandBatcher.script_acked`) blocks its connection, so it goes with its script on
a connection checked out for them, and so do the batches of other pools (``_may_hold_one``).

Otherwise (a cluster, a smaller or plain pool) the commands of one loop iteration go
together at the next iteration: a cluster's through redis-py's cluster pipeline, which
routes each to its node; one Redis's written and read on a connection checked out for the
batch, without redis-py's pipeline object. Several such batches may be in flight at once.

Scripts go as ``EVALSHA``; a command that meets ``NOSCRIPT`` (a restarted or flushed Redis)
loads its script and is sent again.

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
import contextlib
from collections import deque
from collections.abc import Coroutine
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.store.redis_client import NOT_ENOUGH_DATA, is_cluster, is_push, parses_with_hiredis

MAX_BATCH = 512  # commands per cluster pipeline; a larger burst goes as several
WRITE_AT = 4  # commands queued on one Redis that are written at once (4, 8, 16 measured: bench/README.md)
HOLD_POOL_MIN = 16  # a blocking pool this large lends a batcher one connection to hold
RETRY_PAUSE_S = 0.25  # between a cluster's attempts, as redis-py's cluster pipeline
Entry = tuple[tuple[Any, ...], dict[str, Any], "asyncio.Future[Any]"]  # a command, its options, its caller's future
Batch = list[Entry]


def _still_open(conn: Any) -> bool:
    """Whether a connection between two batches is ready for the next: writable (see
    :func:`_still_writable`) and nothing unread (redis-py's check of a connection its pool
    lends, ``can_read``: what came has already been received by the loop)."""
    return _still_writable(conn) and not getattr(conn._reader, "_buffer", b"")


class CommandBatcher:
    """Send commands together and hand each caller its own reply; see the module doc."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._pending: Batch = []
        self._flushes: set[asyncio.Task[None]] = set()
        self._stream = Stream(redis) if _may_hold_one(redis) else None

    def _queue(self, command: tuple[Any, ...], options: dict[str, Any] | None = None) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._stream is not None:
            self._stream.queue((command, options or {}, future))
            return future
        if not self._pending:  # the batch's sender starts at the next iteration and takes what is queued by then
            self._spawn(self._send_pending())
        self._pending.append((command, options or {}, future))
        return future

    async def aclose(self) -> None:
        """Close the batcher's own connection (one Redis); its client is the caller's to close."""
        if self._stream is not None:
            await self._stream.aclose()

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
            ran, acked = self._acked(("EVALSHA", script.sha, len(keys), *keys, *args),
                                     (("WAIT", replicas, timeout_ms), options))
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

    def _acked(self, command: tuple[Any, ...], wait: tuple[tuple[Any, ...], dict[str, Any]]
               ) -> tuple[asyncio.Future[Any], asyncio.Future[Any]]:
        """``command`` and the ``WAIT`` behind it on one connection: a cluster's pipeline,
        or on one Redis a pooled connection of their own (a ``WAIT`` on the stream would hold
        every command behind it until the replicas answer)."""
        if self._stream is None:
            return self._queue(command), self._queue(wait[0], dict(wait[1]))
        loop = asyncio.get_running_loop()
        batch: Batch = [(command, {}, loop.create_future()), (wait[0], {}, loop.create_future())]
        self._spawn(self._send(batch))
        return batch[0][2], batch[1][2]

    async def script(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """Run a registered script by its SHA (loaded again if Redis lost it)."""
        try:
            return await self._queue(("EVALSHA", script.sha, len(keys), *keys, *args))
        except NoScriptError:
            script.sha = await self.redis.script_load(script.script)
            return await self._queue(("EVALSHA", script.sha, len(keys), *keys, *args))

    def _spawn(self, sending: Coroutine[Any, Any, None]) -> None:
        _keep(self._flushes, sending)

    async def _send_pending(self) -> None:
        """Send what was queued (in pipelines of at most ``MAX_BATCH``, the first in this
        task): one task per batch, started when its first command is queued (a callback
        that then started the task cost each batch a loop iteration more)."""
        batch, self._pending = self._pending, []
        for start in range(MAX_BATCH, len(batch), MAX_BATCH):
            self._spawn(self._send(batch[start:start + MAX_BATCH]))
        await self._send(batch[:MAX_BATCH])

    async def _pipeline(self, batch: Batch) -> list[Any]:
        """The batch's replies (a reply error in its command's place): a cluster's through
        its pipeline, which routes each command to its node; on one Redis (a script and its
        ``WAIT``) on a pooled connection, written at once and read back."""
        if is_cluster(self.redis):
            pipe = self.redis.pipeline(transaction=False)
            for command, options, _ in batch:
                pipe.execute_command(*command, **options)
            return list(await pipe.execute(raise_on_error=False))
        pool: Any = self.redis.connection_pool
        conn = await pool.get_connection()
        try:
            if not _still_open(conn):  # its write connects it again
                await conn.disconnect()
            await conn.send_packed_command(conn.pack_commands([command for command, _, _ in batch]))
            return [await _reply(self.redis, conn, command, options) for command, options, _ in batch]
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)

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
            _fail(batch, exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, _, future), reply in zip(batch, replies, strict=True):
            _answer(future, reply)


class _Link(asyncio.Protocol):
    """One connection of a stream and the commands written on it that await their reply:
    while the stream holds the connection this is its transport's protocol, and each reply
    goes to its caller in the callback that received its last bytes (parsed by the
    connection's hiredis reader, which redis-py set up at connect with its error classes
    and decoding). What the connection's own protocol (asyncio's stream protocol, which
    redis-py's reader and writer stand on) must still see, it is told: the end of the
    connection (so closing it completes) and write pauses."""

    def __init__(self, redis: Redis, conn: Any) -> None:
        self.redis, self.conn = redis, conn
        self.waiting: deque[Entry] = deque()
        self.lost = False  # the connection ended or failed: the next batch connects again
        self.loop = asyncio.get_running_loop()
        self.replies: Any = conn._parser._reader  # hiredis.Reader
        self.timeout_s: float | None = conn.socket_timeout or None
        self.since = 0.0  # last reply byte, or the write that began the wait (loop time)
        self.timer: asyncio.TimerHandle | None = None
        self.transport: Any = conn._writer.transport
        self.own: Any = self.transport.get_protocol()  # the connection's stream protocol
        self.transport.set_protocol(self)

    def expect(self, batch: Batch) -> None:
        """``batch`` was written: its replies are awaited, each within ``socket_timeout``
        of the last reply byte (one timer for the link, not one per batch)."""
        if not self.waiting:
            self.since = self.loop.time()
        self.waiting.extend(batch)
        if self.timer is None and self.timeout_s is not None:
            self.timer = self.loop.call_at(self.since + self.timeout_s, self._check_time)

    def data_received(self, data: bytes) -> None:
        self.since = self.loop.time()
        try:
            self.replies.feed(data)
            self._answer_waiting()
        except Exception as exc:  # not the protocol (redis-py's InvalidResponse): nothing more is read here
            self.fail(exc)

    def _answer_waiting(self) -> None:
        waiting, gets = self.waiting, self.replies.gets
        while waiting:
            reply = gets()
            if reply is NOT_ENOUGH_DATA:
                return
            if isinstance(reply, RedisConnectionError):  # e.g. LOADING: this connection serves nothing
                self.fail(reply)
                return
            if is_push(reply):  # a RESP3 push message answers no command
                continue
            command, options, future = waiting.popleft()
            _answer(future, self._parsed(command, options, reply))
        if gets() is not NOT_ENOUGH_DATA:  # a reply to no command: the stream is out of step
            self.fail(RedisConnectionError("a reply came that no command awaited"))

    def _parsed(self, command: tuple[Any, ...], options: dict[str, Any], reply: Any) -> Any:
        """``reply`` as redis-py's ``parse_response`` returns it (its response callback applied;
        a reply error as the value: its caller alone sees it)."""
        if isinstance(reply, Exception):
            return reply
        callback = self.redis.response_callbacks.get(command[0])
        return reply if callback is None else callback(reply, **options)

    def _check_time(self) -> None:
        self.timer = None
        if not self.waiting:
            return
        due = self.since + (self.timeout_s or 0.0)
        if self.loop.time() >= due:
            self.fail(RedisTimeoutError("Timeout reading from socket"))
        else:
            self.timer = self.loop.call_at(due, self._check_time)

    def fail(self, exc: BaseException) -> None:
        """Fail every command awaiting a reply here with ``exc`` and close the connection."""
        self.fail_waiting(exc)
        self.transport.abort()

    def fail_waiting(self, exc: BaseException) -> None:
        """Fail every command awaiting a reply here with ``exc``; the link is done."""
        self.lost = True
        failed, self.waiting = self.waiting, deque()
        _fail(failed, exc)

    def eof_received(self) -> bool:
        self.own.eof_received()
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.fail_waiting(RedisConnectionError(f"Connection closed by server: {exc}" if exc
                                                else "Connection closed by server."))
        self.own.connection_lost(exc)

    def pause_writing(self) -> None:
        self.own.pause_writing()

    def resume_writing(self) -> None:
        self.own.resume_writing()


class Stream:
    """One connection of the client's pool, held by a batcher: written as commands come and
    answered as replies arrive (the module doc). Closing the client closes it."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.pending: Batch = []  # queued, not yet written
        self.conn: Any = None  # held from the pool until aclose
        self.link: _Link | None = None  # the connection as now connected, and what awaits its replies
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def queue(self, entry: Entry) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # a connection serves the loop it was made on
            self._forget(loop)
        self.pending.append(entry)
        if len(self.pending) == 1:
            loop.call_soon(self.flush)
        elif len(self.pending) >= WRITE_AT:
            self.flush()

    def flush(self) -> None:
        """Write what is queued, connecting first when the connection is not open."""
        if not self.pending or self.connecting is not None:
            return
        link = self.link
        if link is None or link.lost or link.conn is not self.conn or not _still_writable(link.conn):
            old, self.link = link, None
            self.connecting = self._spawn(self._connect(old))
            return
        batch, self.pending = self.pending, []
        self.write(link.conn, link.conn.pack_commands([command for command, _, _ in batch]))
        link.expect(batch)

    @staticmethod
    def write(conn: Any, packed: list[bytes]) -> None:
        """Hand ``packed`` commands to the connection's transport now (it sends what the
        socket takes at once and buffers the rest): no await, so the write happens in the
        loop iteration that queued the commands."""
        conn._writer.writelines(packed)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return _keep(self.tasks, work)

    async def _connect(self, old: _Link | None) -> None:
        """The held connection, connected (again): taken from the pool the first time, and
        connected anew after a link that failed or belonged to another loop."""
        try:
            if self.conn is None:
                pool: Any = self.redis.connection_pool
                self.conn = await pool.get_connection()
            elif old is None or old.lost or not _still_writable(self.conn):
                # old is None: the loop changed. The old transport closes through its own
                # loop, which may be closed: not waited for (uvloop's would never answer),
                # and redis-py forgets it either way.
                with contextlib.suppress(RuntimeError):
                    await self.conn.disconnect(nowait=old is None)
                await self.conn.connect()
            link = _Link(self.redis, self.conn)
        except BaseException as exc:
            self.connecting = None
            batch, self.pending = self.pending, []
            _fail(batch, exc)
            if not isinstance(exc, Exception):
                raise
            return
        self.link, self.connecting = link, None
        self.flush()

    def _forget(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start afresh on ``loop``: what the old loop's connection still awaited is lost
        with that loop (the connection is connected again on this one)."""
        link, self.link, self.connecting, self.loop = self.link, None, None, loop
        lost = ConnectionError("the event loop of this Redis connection changed")
        if link is not None:
            link.fail_waiting(lost)
        _fail(self.pending, lost)
        self.pending = []

    async def aclose(self) -> None:
        """Stop reading and give the connection back to the pool, closed."""
        conn, self.conn, self.link = self.conn, None, None
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if conn is not None:
            await conn.disconnect()
            await self.redis.connection_pool.release(conn)


def _may_hold_one(redis: Redis) -> bool:
    """Whether a batcher may hold one connection of ``redis``'s pool for its stream: one
    Redis whose replies hiredis parses (a dependency: the stream parses with its reader),
    and a blocking pool of ``HOLD_POOL_MIN`` or more (the workers' and the API's:
    a caller waits for a connection while all are lent). A plain pool at its size fails a
    caller instead (redis-py's default holds 100), so there each batch checks a connection
    out and gives it back."""
    if is_cluster(redis):
        return False
    pool: Any = redis.connection_pool
    return isinstance(pool, BlockingConnectionPool) and int(pool.max_connections or 0) >= HOLD_POOL_MIN \
        and parses_with_hiredis(pool)


def _still_writable(conn: Any) -> bool:
    """Whether the stream's connection may take more commands: connected and not closed by
    the server (its reader, when one runs, meets the end and fails what awaits it)."""
    reader = getattr(conn, "_reader", None)
    return bool(conn.is_connected and reader is not None and not reader.at_eof())


def _fail(entries: Any, exc: BaseException) -> None:
    """Raise ``exc`` (a cancellation as a connection error) to every caller of ``entries``
    still waiting."""
    for _, _, future in entries:
        if not future.done():
            future.set_exception(exc if isinstance(exc, Exception) else ConnectionError(str(exc)))


def _answer(future: asyncio.Future[Any], reply: Any) -> None:
    """Hand ``reply`` (a reply error raises to the caller) to a caller still waiting."""
    if future.done():
        return  # its caller was cancelled
    if isinstance(reply, Exception):
        future.set_exception(reply)
    else:
        future.set_result(reply)


def _keep(tasks: set[asyncio.Task[None]], work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """``work`` as a task referenced from ``tasks`` until it ends (so it is not collected mid-flight)."""
    task = asyncio.ensure_future(work)
    tasks.add(task)
    task.add_done_callback(tasks.discard)
    return task


async def _reply(redis: Redis, conn: Any, command: tuple[Any, ...], options: dict[str, Any]) -> Any:
    """The next reply on ``conn``, parsed for ``command`` (a reply error as the value:
    its caller alone sees it)."""
    try:
        return await redis.parse_response(conn, command[0], **options)
    except ResponseError as exc:
        return exc
