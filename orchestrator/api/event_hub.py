"""``EventHub``: one Redis Stream reader per run per API process, fanned out in memory.

One hub lives on ``app.state`` for the life of the process. Contract:

* For each run with at least one live subscriber, ONE reader task does ``XREAD BLOCK``
  on the run's stream (``Keys.events``) from the last id it saw, on a connection of its
  own (never one of the shared pool, so any number of streams leaves the pool free for
  short calls), and puts every entry into each subscriber's bounded queue. The reader
  stops when its last subscriber leaves, after the run's terminal event, or once the run
  is over (or gone) and nothing is left to read; its subscribers' streams then end.
* :meth:`EventHub.subscribe` yields ``Delivery`` items (stream id, event, JSON, SSE frame;
  each encoded once for all subscribers) after a given stream id, each exactly once and
  in stream order, until the terminal event; :meth:`EventHub.subscribe_batches` the same
  in the batches they arrive in (a stream writes a batch at once). :meth:`EventHub.feed`
  pushes the same batches into a synchronous ``Sink`` instead: after the replay, the
  reader itself calls each feed's sink as a batch arrives, so thousands of subscribers of
  a run cost one call each per batch, with no task woken per subscriber.
  It joins race-free: the queue is registered first, the reader's start id is known
  before the history is read, history is replayed with short ``XRANGE`` pages (a pooled
  connection only for the call), then the queue is drained skipping ids <= the last
  replayed one. Replay and tail therefore meet with no gap and no duplicate.
* A subscriber whose queue overflows (it reads slower than the run writes) is dropped:
  its iteration ends early, without the terminal event. An SSE client then reconnects
  with ``Last-Event-ID`` and loses nothing, since the stream is the source of truth.
* A Redis error in a reader ends its subscribers' iterations the same way (reconnect).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError
from sse_starlette import ServerSentEvent

from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.store import redis_client
from orchestrator.store.keys import Keys

log = logging.getLogger(__name__)

# One XREAD waits at most this long before the run status is re-checked; below the
# Redis client's socket timeout (5 s by default), which would cut a longer block.
BLOCK_MS = 2_000
BATCH = 200
# Deliveries a subscriber may fall behind before it is dropped. Items are shared
# between subscribers, so a full queue costs pointers, not copies.
QUEUE_SIZE = 2_000



@dataclass(frozen=True)
class HubConfig:
    """How the hub reads a run's stream (``block_ms`` per XREAD, ``batch`` entries per
    read) and how far a subscriber may fall behind before it is dropped (``queue_size``)."""

    queue_size: int = QUEUE_SIZE
    block_ms: int = BLOCK_MS
    batch: int = BATCH


RunOver = Callable[[str], Awaitable[bool]]  # run id -> is it over (terminal or gone)?
Allowed = Callable[[], bool]  # may this subscriber go on (e.g. its API key is still known)?
# Writes a batch of deliveries now; False: this subscriber stops (its client is gone, too
# slow, or no longer allowed). Called by the reader's fan-out: it must not block or raise.
Sink = Callable[[list["Delivery"]], bool]


@dataclass(frozen=True)
class Delivery:
    """One stream entry as every subscriber of the run receives it (the same object)."""

    stream_id: str
    event: NodeEvent
    # Other encodings a stream derives once for every subscriber (e.g. the chat frames).
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @cached_property
    def json(self) -> str:
        """The event's JSON, serialized once however many subscribers send it."""
        return json.dumps(self.event.to_json())

    @cached_property
    def frame(self) -> bytes:
        """The event as one SSE frame (``id:``, ``event:``, ``data:``), encoded once however
        many subscribers send it."""
        return ServerSentEvent(data=self.json, event=self.event.event_type, id=self.stream_id).encode()

    @property
    def terminal(self) -> bool:
        return self.event.event_type in EventType.TERMINAL


class _End:
    """Queued after the last delivery of a channel: the iteration ends here."""


END = _End()


class _Mailbox:
    """A subscriber's bounded queue. Waiting on it costs a future (and, with a timeout,
    one timer), not a task: with thousands of subscribers, a task per wait was a third of
    the cost of a delivery."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: deque[Delivery | _End] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put(self, item: Delivery) -> bool:
        """Queue ``item``; False (nothing queued) when the mailbox is full."""
        if len(self.items) >= self.size:
            return False
        self.items.append(item)
        self._wake()
        return True

    def end(self) -> None:
        """Queue the end of the iteration (always fits: one past the bound at most)."""
        self.items.append(END)
        self._wake()

    def take_all(self) -> list[Delivery | _End]:
        items = list(self.items)
        self.items.clear()
        return items

    async def wait(self, timeout_s: float | None = None) -> None:
        """Until something is queued, or ``timeout_s`` passed."""
        if self.items:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        timer = loop.call_later(timeout_s, _release, waiter) if timeout_s is not None else None
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _wake(self) -> None:
        if self._waiter is not None:
            _release(self._waiter)


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass(eq=False)
class _Subscriber:
    mailbox: _Mailbox
    dropped: bool = False
    # Set once a feed's replay is done: the reader then writes batches through it.
    sink: Sink | None = None
    # Until the reader passes it, the last stream id the feed already wrote (its replay may
    # have read further than the reader had).
    floor: _StreamIdFloor | None = None

    def fresh(self, batch: list[Delivery]) -> list[Delivery]:
        """``batch`` without what this subscriber already had."""
        floor = self.floor
        if floor is None:
            return batch
        fresh = [d for d in batch if floor.passes(d.stream_id)]
        if fresh:
            self.floor = None  # the reader is past the replay: everything after is new
        return fresh


class Feed:
    """A push subscription (:meth:`EventHub.feed`): :meth:`run` replays the stream after
    ``after`` into ``sink``, then lets the run's reader call ``sink`` with each batch as it
    arrives, and returns once the stream is over for this subscriber: after the terminal
    event, when the sink answers False, when the reader ends or drops it, or on
    :meth:`stop` (callable from anywhere, e.g. a connection-lost callback)."""

    def __init__(self, hub: EventHub, run_id: str, after: str, sink: Sink) -> None:
        self._hub = hub
        self.run_id = run_id
        self.after = after
        self.sink = sink
        self._subscriber = _Subscriber(_Mailbox(hub.queue_size))
        self.stopped = False

    def stop(self) -> None:
        """End :meth:`run` now; nothing more is written to the sink."""
        self.stopped = True
        self._subscriber.sink = None
        self._subscriber.mailbox.end()

    async def run(self) -> None:
        hub, subscriber = self._hub, self._subscriber
        channel = hub._join(self.run_id, subscriber)
        try:
            await asyncio.shield(channel.started)  # the reader's start id is fixed first
            last = self.after
            async for page in hub._replay(self.run_id, self.after):
                page = _through_terminal(page)
                if self.stopped or not self.sink(page) or page[-1].terminal:
                    return
                last = page[-1].stream_id
            if self.stopped:
                return
            # What the reader queued meanwhile, past the replay; then the reader writes.
            floor = _StreamIdFloor(last)
            items = subscriber.mailbox.take_all()
            batch = _through_terminal([i for i in items if isinstance(i, Delivery) and floor.passes(i.stream_id)])
            if batch and (not self.sink(batch) or batch[-1].terminal):
                return
            if any(isinstance(i, _End) for i in items):
                return
            subscriber.floor, subscriber.sink = floor, self.sink
            while not any(isinstance(i, _End) for i in subscriber.mailbox.take_all()):
                await subscriber.mailbox.wait()
        finally:
            subscriber.sink = None
            await hub._leave_and_wait(channel, subscriber)


@dataclass(eq=False)
class _Channel:
    run_id: str
    subscribers: set[_Subscriber] = field(default_factory=set)
    started: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    task: asyncio.Task[None] | None = None
    reads: int = 0  # XREAD calls made by this channel's reader


def stream_id_after(stream_id: str) -> str:
    """The smallest stream id greater than ``stream_id`` (an inclusive XRANGE start)."""
    ms, _, seq = stream_id.partition("-")
    return f"{int(ms)}-{int(seq or 0) + 1}"


def _through_terminal(batch: list[Delivery]) -> list[Delivery]:
    """``batch`` up to and including its first terminal delivery."""
    for i, delivery in enumerate(batch):
        if delivery.terminal:
            return batch[:i + 1]
    return batch


def _parse(entries: list[Any]) -> list[Delivery]:
    return [Delivery(entry_id, NodeEvent.from_json(json.loads(fields["e"]))) for entry_id, fields in entries]


class EventHub:
    """Fans each run's Redis Stream out to the subscribers in this process.

    ``redis`` is the app's client (``decode_responses=True``); its pool serves the short
    calls (XREVRANGE, XRANGE) and its connection settings the readers' own connections.
    ``run_over(run_id)`` answers whether a run is over (terminal status, or expired).
    """

    def __init__(self, redis: Redis, keys: Keys, run_over: RunOver, config: HubConfig = HubConfig()) -> None:
        self.redis = redis
        self.keys = keys
        self.run_over = run_over
        self.queue_size = config.queue_size
        self.block_ms = config.block_ms
        self.batch = config.batch
        self._channels: dict[str, _Channel] = {}
        self.dropped = 0  # subscribers dropped for falling behind, since start

    # -- introspection (metrics, tests) -----------------------------------------------

    @property
    def readers(self) -> int:
        """Reader tasks running now (one per run with subscribers)."""
        return sum(1 for c in self._channels.values() if c.task is not None and not c.task.done())

    def subscribers(self, run_id: str) -> int:
        channel = self._channels.get(run_id)
        return 0 if channel is None else len(channel.subscribers)

    def reads(self, run_id: str) -> int:
        """XREAD calls made by the run's current reader (0 when none)."""
        channel = self._channels.get(run_id)
        return 0 if channel is None else channel.reads

    # -- subscribing --------------------------------------------------------------------

    async def subscribe(self, run_id: str, after: str = "0-0") -> AsyncIterator[Delivery]:
        """Deliveries after stream id ``after``, in order, each once, to the terminal one."""
        async with aclosing(self.subscribe_batches(run_id, after)) as batches:
            async for batch in batches:
                for delivery in batch:
                    yield delivery

    async def subscribe_batches(self, run_id: str, after: str = "0-0", *, allowed: Allowed | None = None,
                                check_every_s: float = 2.0) -> AsyncGenerator[list[Delivery], None]:
        """:meth:`subscribe`'s deliveries in the batches they arrive in: a replayed page, or
        what the reader queued while the subscriber was away. A stream sends a batch as one
        write (with thousands of clients, a write per event was the cost).

        With ``allowed``, the iteration ends (without the terminal event) as soon as it
        answers False: checked before each batch and every ``check_every_s`` while idle."""
        subscriber = _Subscriber(_Mailbox(self.queue_size))
        channel = self._join(run_id, subscriber)
        try:
            await asyncio.shield(channel.started)  # the reader's start id is fixed first
            last = after
            async for page in self._replay(run_id, after):
                if allowed is not None and not allowed():
                    return
                page = _through_terminal(page)
                last = page[-1].stream_id
                yield page
                if page[-1].terminal:
                    return
            seen = _StreamIdFloor(last)
            idle_s = check_every_s if allowed is not None else None
            while True:
                await subscriber.mailbox.wait(idle_s)
                if allowed is not None and not allowed():
                    return
                items = subscriber.mailbox.take_all()
                if not items:
                    continue
                ended = any(isinstance(i, _End) for i in items)
                batch = _through_terminal([i for i in items if isinstance(i, Delivery) and seen.passes(i.stream_id)])
                if batch:
                    yield batch
                    if batch[-1].terminal:
                        return
                if ended:
                    return
        finally:
            await self._leave_and_wait(channel, subscriber)

    def feed(self, run_id: str, after: str, sink: Sink) -> Feed:
        """A push subscription to the run's deliveries after ``after`` (see :class:`Feed`);
        it starts with its ``run()``."""
        return Feed(self, run_id, after, sink)

    async def _leave_and_wait(self, channel: _Channel, subscriber: _Subscriber) -> None:
        reader = self._leave(channel, subscriber)
        if reader is not None and not reader.done():
            # The last one out waits for the reader to close its connection (not
            # cancellation-proof, and need not be: the reader closes it regardless);
            # bounded, since the reader ends within one block once it has no subscriber.
            await asyncio.wait([reader], timeout=2 * self.block_ms / 1000 + 1)

    def _join(self, run_id: str, subscriber: _Subscriber) -> _Channel:
        channel = self._channels.get(run_id)
        if channel is None:
            channel = _Channel(run_id)
            self._channels[run_id] = channel
            channel.task = asyncio.create_task(self._read(channel), name=f"event-hub:{run_id}")
        channel.subscribers.add(subscriber)
        return channel

    def _leave(self, channel: _Channel, subscriber: _Subscriber) -> asyncio.Task[None] | None:
        """Unregister; the reader (stopped) if this was its last subscriber."""
        # Synchronous: it runs in a generator's finally, where an await may be cancelled.
        channel.subscribers.discard(subscriber)
        if channel.subscribers:
            return None
        if self._channels.get(channel.run_id) is channel:
            del self._channels[channel.run_id]
            if channel.task is not None:
                channel.task.cancel()
        return channel.task

    async def _replay(self, run_id: str, after: str) -> AsyncIterator[list[Delivery]]:
        """The stream after ``after`` in non-empty pages of up to ``batch`` entries."""
        key, start = self.keys.events(run_id), stream_id_after(after)
        while True:
            entries: Any = await _cancellable(self.redis.xrange(key, min=start, max="+", count=self.batch))
            if entries:
                yield _parse(entries)
            if not entries or len(entries) < self.batch:
                return
            start = stream_id_after(entries[-1][0])

    # -- the reader ---------------------------------------------------------------------

    async def _read(self, channel: _Channel) -> None:
        key = self.keys.events(channel.run_id)
        client = self._dedicated_client()
        try:
            newest: Any = await self.redis.xrevrange(key, count=1)
            last = newest[0][0] if newest else "0-0"
            channel.started.set_result(None)
            block: int | None = None  # the first read never waits: a finished run ends at once
            while self._channels.get(channel.run_id) is channel:
                # Left by its last subscriber: stop, even if the cancellation that came with
                # it was swallowed inside the Redis call (redis-py's timeouts on Python 3.11
                # can), at the latest one block later.
                channel.reads += 1
                reply: Any = await client.xread({key: last}, count=self.batch, block=block)
                batch = _parse(reply[0][1]) if reply else []
                if batch:
                    last = batch[-1].stream_id
                    if self._fan_out(channel, batch):
                        return
                    block = None
                    continue
                if await self.run_over(channel.run_id):
                    # Over, and its terminal event is behind the cursor (or trimmed): drain and end.
                    reply = await client.xread({key: last}, count=self.batch)
                    self._fan_out(channel, _parse(reply[0][1]) if reply else [])
                    return
                block = self.block_ms
        except RedisError:
            log.warning(
                "event stream reader of run %s failed; its subscribers reconnect", channel.run_id, exc_info=True
            )
        finally:
            self._close(channel)
            await client.aclose()

    def _fan_out(self, channel: _Channel, batch: list[Delivery]) -> bool:
        """Write ``batch`` to every feed past its replay, queue it to every other
        subscriber; True once the run's terminal event passed."""
        batch = _through_terminal(batch)
        if not batch:
            return False
        for subscriber in list(channel.subscribers):
            sink = subscriber.sink
            if sink is None:
                for delivery in batch:
                    if not subscriber.mailbox.put(delivery):
                        self._drop(channel, subscriber)
                        break
                continue
            fresh = subscriber.fresh(batch)
            try:
                written = not fresh or sink(fresh)
            except Exception:
                log.exception("a subscriber of run %s failed to take a batch; ending it", channel.run_id)
                written = False
            if not written:
                self._end(channel, subscriber)
        return batch[-1].terminal

    def _end(self, channel: _Channel, subscriber: _Subscriber) -> None:
        """A feed whose sink refused a batch (client gone, too slow, not allowed) ends."""
        subscriber.sink = None
        channel.subscribers.discard(subscriber)
        subscriber.mailbox.end()

    def _drop(self, channel: _Channel, subscriber: _Subscriber) -> None:
        log.warning("dropping a subscriber of run %s: %d deliveries behind", channel.run_id, self.queue_size)
        self.dropped += 1
        subscriber.dropped = True
        channel.subscribers.discard(subscriber)
        subscriber.mailbox.take_all()
        subscriber.mailbox.end()

    def _close(self, channel: _Channel) -> None:
        """The reader is done: new subscribers get a new channel, current ones end."""
        if self._channels.get(channel.run_id) is channel:
            del self._channels[channel.run_id]
        if not channel.started.done():
            channel.started.set_result(None)
        for subscriber in list(channel.subscribers):
            subscriber.mailbox.end()

    def _dedicated_client(self) -> Redis:
        """A client with one connection of its own, for blocking reads."""
        return redis_client.sibling(self.redis, max_connections=1)  # cancellable writes, like every client

    async def close(self) -> None:
        """Stop every reader (app shutdown); their subscribers' iterations end."""
        tasks = [c.task for c in self._channels.values() if c.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _cancellable(call: Awaitable[Any]) -> Any:
    """Await a redis-py call so that cancelling the caller always cancels it.

    On Python 3.11 redis-py writes each command under ``asyncio.wait_for``, which loses a
    cancellation that arrives as the write completes (CPython gh-86296, fixed in 3.12):
    the cancelled caller carried on (a subscriber whose client had gone kept its stream,
    and its run's reader, alive). Shielded, the call runs to its end on its own and the
    caller's cancellation is raised at once."""
    task = asyncio.ensure_future(call)
    task.add_done_callback(_consume)
    return await asyncio.shield(task)


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an error nobody awaits any more is not logged twice


class _StreamIdFloor:
    """Passes stream ids strictly above the last one seen, raising the floor each time."""

    def __init__(self, last: str) -> None:
        self.floor = _key(last)

    def passes(self, stream_id: str) -> bool:
        key = _key(stream_id)
        if key <= self.floor:
            return False
        self.floor = key
        return True


def _key(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)
