"""``EventStreamResponse``: a run's events as Server-Sent Events, built for thousands of
clients per API process.

Contract (one response per client; ``events.py`` builds it):

* the body is the run's deliveries after a stream id, replayed then live, each batch of
  deliveries written as one piece of bytes (``encode(batch)``, the same bytes for every
  client of a format); it ends after the run's terminal event, when the hub ends the
  subscription (run over, client too slow, Redis error) or once ``allowed`` answers False
  (asked every ``Streams.check_s``);
* under our uvicorn protocol (``connections.BodyWriter`` in the scope) the run's reader
  writes each batch to every client's connection itself, one synchronous call per client
  (``EventHub.feed``): no task wakes, no ``await send`` passes the ASGI layers, no timer
  runs per client. Elsewhere (tests, another server) a task per client sends the batches
  through ASGI (and a server shutdown does not end those streams: give that server a
  graceful-shutdown timeout);
* a client that does not read is cut (memory stays bounded): under our protocol once more
  than ``MAX_UNSENT_BYTES`` wait for it and it takes fewer than that in
  ``Settings.api_send_stall_s``, or more than 16 times that wait (a client that reads
  keeps its stream through a burst); through ASGI once ``MAX_UNSENT_BYTES`` wait. It
  resumes with ``Last-Event-ID`` and loses nothing;
* a disconnect ends the subscription at once (the connection's close callback, or an
  ``http.disconnect``); a server shutdown ends every stream (clients reconnect elsewhere);
* keep-alive comments and the periodic ``allowed`` check come from ONE timer per process
  (:class:`Streams`), not one per client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from orchestrator.telemetry import metrics

from .connections import BODY_WRITER, MAX_UNSENT_BYTES, BodyWriter
from .event_hub import Allowed, Delivery, EventHub, Feed

log = logging.getLogger(__name__)

PING = b": ping\r\n\r\n"  # a comment: no id, so resuming is unaffected
Encode = Callable[[list[Delivery]], bytes]


class BatchEncoder:
    """A batch's bytes, joined from each delivery's (memoized) frame; the last batch is
    kept, so the thousands of clients the reader writes it to in a row join it once."""

    def __init__(self, frame: Callable[[Delivery], bytes]) -> None:
        self.frame = frame
        self._batch: list[Delivery] | None = None
        self._bytes = b""

    def __call__(self, batch: list[Delivery]) -> bytes:
        if batch is not self._batch:
            self._bytes = b"".join(self.frame(d) for d in batch)
            self._batch = batch
        return self._bytes


class _Stream:
    """One open response as the shared timer sees it."""

    def __init__(self, write: Callable[[bytes], bool], allowed: Allowed | None) -> None:
        self.write = write
        self.allowed = allowed
        self.feed: Feed | None = None

    def stop(self) -> None:
        if self.feed is not None:
            self.feed.stop()


class Streams:
    """The process's open event streams and the one timer serving them all: every
    ``check_s`` each stream's ``allowed`` is asked (a stream answered False ends), and every
    ``ping_s`` (0: never) each stream gets a keep-alive comment."""

    def __init__(self, ping_s: float, check_s: float) -> None:
        self.ping_s = ping_s
        self.check_s = check_s
        self._open: set[_Stream] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._next_ping = 0.0

    def __len__(self) -> int:
        return len(self._open)

    def add(self, stream: _Stream) -> None:
        self._open.add(stream)
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._next_ping = loop.time() + self.ping_s
            self._timer = loop.call_later(self._interval_s(), self._tick)

    def discard(self, stream: _Stream) -> None:
        self._open.discard(stream)
        if not self._open and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _interval_s(self) -> float:
        return min(self.check_s, self.ping_s) if self.ping_s > 0 else self.check_s

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        ping = self.ping_s > 0 and loop.time() >= self._next_ping - 0.001
        if ping:
            self._next_ping = loop.time() + self.ping_s
        for stream in list(self._open):
            if stream.allowed is not None and not stream.allowed():
                stream.stop()
            elif ping and not stream.write(PING):
                stream.stop()
        self._timer = loop.call_later(self._interval_s(), self._tick) if self._open else None


@dataclass(frozen=True)
class StreamRequest:
    """What one client streams: the run's deliveries from ``hub`` after stream id
    ``after``, each batch as ``encode`` writes it, for as long as ``allowed`` (None: to
    the end)."""

    hub: EventHub
    run_id: str
    after: str
    encode: Encode
    allowed: Allowed | None = None


class EventStreamResponse(Response):
    """The SSE response of the module docstring; ``start(sink)`` makes the hub's feed."""

    media_type = "text/event-stream"

    def __init__(self, request: StreamRequest, *, streams: Streams, headers: Mapping[str, str] | None = None,
                 status_code: int = 200) -> None:  # FastAPI's OpenAPI reads this default
        self.hub, self.run_id, self.after = request.hub, request.run_id, request.after
        self.encode, self.streams, self.allowed = request.encode, streams, request.allowed
        self.status_code = status_code
        self.background: BackgroundTask | None = None
        self.init_headers(headers)  # no body: no content-length

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        writer = scope.get("extensions", {}).get(BODY_WRITER)
        metrics.SSE_STREAMS.inc()
        try:
            if isinstance(writer, BodyWriter):
                complete = await self._direct(writer)
            else:
                complete = await self._through_asgi(receive, send)
        finally:
            metrics.SSE_STREAMS.dec()
        if complete:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _stream(self, write: Callable[[bytes], bool]) -> tuple[_Stream, Feed]:
        encode = self.encode

        def sink(batch: list[Delivery]) -> bool:
            # ``allowed`` is asked by the shared timer (within STREAM_KEY_CHECK_S), not
            # here: once per client per batch was a tenth of a delivery's cost.
            return write(encode(batch))

        stream = _Stream(write, self.allowed)
        stream.feed = self.hub.feed(self.run_id, self.after, sink)
        return stream, stream.feed

    async def _direct(self, writer: BodyWriter) -> bool:
        stream, feed = self._stream(writer.write)
        writer.on_close(feed.stop)  # disconnect or shutdown
        self.streams.add(stream)
        try:
            await feed.run()
        finally:
            self.streams.discard(stream)
        return True

    async def _through_asgi(self, receive: Receive, send: Send) -> bool:
        pending = _Pending(MAX_UNSENT_BYTES)
        stream, feed = self._stream(pending.write)
        listener = asyncio.ensure_future(_disconnect(receive))
        listener.add_done_callback(lambda _: feed.stop())
        runner = asyncio.ensure_future(feed.run())
        runner.add_done_callback(lambda _: pending.wake())
        self.streams.add(stream)
        try:
            while not pending.over:
                if pending.chunks:
                    await send({"type": "http.response.body", "body": pending.take(), "more_body": True})
                elif runner.done():
                    break
                else:
                    await pending.wait()
        finally:
            self.streams.discard(stream)
            disconnected = listener.done()
            feed.stop()
            listener.cancel()
            await asyncio.wait([runner])
        runner.result()
        return not pending.over and not disconnected


class _Pending:
    """Bytes waiting for the ASGI send of a stream served through ASGI; bounded."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.chunks: list[bytes] = []
        self.size = 0
        self.over = False
        self._waiter: asyncio.Future[None] | None = None

    def write(self, data: bytes) -> bool:
        if self.over:
            return False
        self.chunks.append(data)
        self.size += len(data)
        if self.size > self.max_bytes:
            log.warning("an event stream holds more than %d unsent bytes; ending it", self.max_bytes)
            self.over = True
            self.chunks.clear()
        self.wake()
        return not self.over

    def take(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        self.size = 0
        return data

    def wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
