"""The API server's guard against slow clients: header and body read deadlines, a bound
on header bytes and on connections per client address, in uvicorn's httptools protocol.

Contract (``orchestrator serve`` passes :data:`PROTOCOL` as uvicorn's ``http``; the app
factory, run in each server process before it serves, hands it the settings with
:func:`configure`):

* a request's headers must arrive within ``Settings.api_header_timeout_s`` of the moment
  the server waits for them (the connection opened, or the previous response ended);
* its body, within ``Settings.api_body_timeout_s`` of its headers;
* past either deadline the connection is closed (a client that sent part of its headers
  gets ``408 Request Timeout`` first); a response being sent, however long (an event
  stream), is never cut by them;
* a request's line and headers are at most :data:`MAX_HEADER_BYTES` (16 KiB, h11's
  default): past it the client gets ``431 Request Header Fields Too Large`` and the
  connection is closed (httptools itself sets no bound); an HTTP/1.1 request without a
  ``Host`` header gets ``400`` (h11 refused it too; httptools does not);
* one client address holds at most ``Settings.api_max_connections_per_client``
  connections to one API process (0: no bound); a connection past the bound is closed at
  once, before anything is read from it.

Why hand-written: uvicorn has no read timeout. Its ``timeout_keep_alive`` runs only
between requests and is cancelled by the first byte of the next one, so a client sending
one header byte at a time held a connection for ever (800 of them stayed open 45 s in a
test); ``limit_concurrency`` answers 503 to everybody once the slow clients fill it; an
ASGI middleware runs only after the headers are complete. Gunicorn's and hypercorn's
timeouts would mean another server. The guard sits where the bytes are read: a subclass of
uvicorn's httptools protocol (httptools: llhttp's C parser, about twice the requests per
second of the pure-Python h11 one this guard first sat on: bench/README.md) that follows
the parser's callbacks (a message begun, its headers complete, the message complete) and
the responses completed. Behind a reverse proxy every connection comes from the proxy's
address: raise the per-client bound above the proxy's own connection count (or set 0) and
let the proxy bound its clients (docs/deployment.md, "Exposing the API").

The protocol also offers each request a :class:`BodyWriter` (the ASGI scope extension
:data:`BODY_WRITER`): a response that writes to thousands of connections at once (an
event stream's fan-out) writes its body straight to the connection, one synchronous call,
instead of one ``await send`` through every ASGI layer per connection and write. A client
that stops reading such a response is cut by progress, as nginx's ``send_timeout``: once
more than ``MAX_UNSENT_BYTES`` wait for it, it must take that many within
``Settings.api_send_stall_s``, and it may never leave more than ``BURST_FACTOR`` times
that unsent (the memory a connection may hold).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from orchestrator.settings import ApiSettings
from orchestrator.telemetry import metrics

logger = logging.getLogger("uvicorn.error")

PROTOCOL = "orchestrator.api.connections:GuardedHttpToolsProtocol"  # uvicorn's ``http`` setting
BODY_WRITER = "orchestrator.body_writer"  # the scope extension holding the request's BodyWriter
# Unsent bytes past which a BodyWriter's client must show progress (take as many within
# api_send_stall_s) or be cut; it never holds more than BURST_FACTOR times this.
MAX_UNSENT_BYTES = 1 << 20
BURST_FACTOR = 16
MAX_HEADER_BYTES = 16 * 1024  # a request's line and headers (h11's default, which this bound replaces)


def _closing_answer(status: int, text: str) -> bytes:
    """A whole plain-text response that closes its connection, written below the app."""
    body = text.encode()
    return (b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (status, HTTPStatus(status).phrase.encode(), len(body), body))


TIMEOUT_RESPONSE = _closing_answer(408, "request read timed out")
TOO_LARGE_RESPONSE = _closing_answer(431, f"request headers larger than {MAX_HEADER_BYTES // 1024} KiB")
NO_HOST_RESPONSE = _closing_answer(400, "an HTTP/1.1 request needs a Host header")


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float
    body_timeout_s: float
    max_per_client: int  # 0: no bound
    send_stall_s: float = 15.0  # a BodyWriter's client past MAX_UNSENT_BYTES takes less than that this long: cut

    @classmethod
    def from_settings(cls, settings: ApiSettings) -> ConnectionLimits:
        return cls(settings.api_header_timeout_s, settings.api_body_timeout_s,
                   settings.api_max_connections_per_client, settings.api_send_stall_s)


_process_limits: list[ConnectionLimits] = []  # this server process's, set by configure()


def configure(settings: ApiSettings) -> None:
    """This server process's limits, from its settings: the app factory calls it (the
    protocol is built by uvicorn, per connection, with no way to pass them)."""
    _process_limits[:] = [ConnectionLimits.from_settings(settings)]


def process_limits() -> ConnectionLimits:
    """The limits :func:`configure` set; a RuntimeError if the process never built its app."""
    if not _process_limits:
        raise RuntimeError("GuardedHttpToolsProtocol needs the app factory (orchestrator.api:create_app) to run "
                           "first in this process: it passes the API settings (connections.configure)")
    return _process_limits[0]


_per_client: Counter[str] = Counter()  # open connections of this process, by client address


class BodyWriter:
    """Writes one response's body straight to its connection, below the ASGI layers.

    Contract: the response is started through ASGI (``http.response.start``) before the
    first :meth:`write`, and completed through ASGI (the last ``http.response.body``).
    :meth:`write` frames the bytes as the response's own ``send`` would (chunked when its
    headers said so, as they do for a body of unknown length; as they are within a
    Content-Length; nothing for a HEAD) and hands them to the transport now; it answers
    False, writing nothing, once the connection is gone, the response complete, or the
    server shutting down. A client that does not read costs a bounded buffer, then its
    connection (the protocol's :meth:`GuardedHttpToolsProtocol.handed`): a write that
    leaves more than ``BURST_FACTOR`` times ``MAX_UNSENT_BYTES`` unsent cuts it at once
    (answering False). :meth:`on_close` callbacks run once, when the connection is lost or
    the server shuts down (a stream should then end)."""

    def __init__(self, protocol: GuardedHttpToolsProtocol, cycle: RequestResponseCycle) -> None:
        self._protocol = protocol
        self._cycle = cycle
        self._callbacks: list[Callable[[], None]] = []
        self.closed = False

    def write(self, data: bytes) -> bool:
        cycle = self._cycle
        if self.closed or cycle.disconnected or cycle.response_complete or not cycle.response_started:
            return False
        if not data or cycle.scope["method"] == "HEAD":
            return True
        if cycle.chunked_encoding:
            framed = b"%x\r\n%b\r\n" % (len(data), data)
        else:  # within the Content-Length the response declared, as its send checks
            if len(data) > cycle.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            cycle.expected_content_length -= len(data)
            framed = data
        self._protocol.transport.write(framed)
        return self._protocol.handed(len(framed))

    def on_close(self, callback: Callable[[], None]) -> None:
        if self.closed:
            callback()
        else:
            self._callbacks.append(callback)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


class _Refused(Exception):
    """Raised from a parser callback: the request is answered with the protocol's ``_refusal``."""


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and the bounds of the module docstring.

    What the server waits for from the client follows the parser's callbacks: while a
    request is partly read, its headers (from its first byte) or its body (from its
    headers' end); once every request read was answered, the next request's headers (from
    the connection's opening or the last response's end); while a request is being
    answered, nothing (a pipelined request's bytes wait with the parser, unwatched, as the
    answer may take any time)."""

    def __init__(self, *args: Any, limits: ConnectionLimits | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits or process_limits()
        self._phase: str | None = None  # "headers", "body" or None (the server's turn)
        self._deadline: asyncio.TimerHandle | None = None
        self._address: str | None = None
        self._writer: BodyWriter | None = None
        self._reading: str | None = None  # "headers" or "body" while a request is partly read
        self._received = 0  # requests read whole
        self._answered = 0  # responses completed
        self._unfinished_bytes = 0  # read while a request's headers are incomplete (see data_received)
        self._boundary = False  # the current read began or ended a request's headers
        self._refusal: bytes | None = None  # the answer to a request refused while it was parsed
        # Progress of what BodyWriters handed the transport (see handed): how much, how much
        # the socket had taken of it at its last progress (a bound's worth) and when, and
        # the stall watchdog.
        self._handed = 0
        self._taken = 0
        self._taken_at = 0.0
        self._watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._address = self.client[0] if self.client else None
        if self._address is not None:
            _per_client[self._address] += 1
            bound = self.limits.max_per_client
            if bound and _per_client[self._address] > bound:
                logger.warning("%s: more than %d connections from one client; closing the new one",
                               self._address, bound)
                self.transport.close()
                return
        self._track()

    def connection_lost(self, exc: Exception | None) -> None:
        self._arm(None)
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._writer is not None:
            self._writer.close()
        if self._address is not None:
            _per_client[self._address] -= 1
            if _per_client[self._address] <= 0:
                del _per_client[self._address]
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._boundary = False
        super().data_received(data)
        if self._reading == "headers" and not self._boundary and not self.transport.is_closing():
            # Headers still incomplete, which the parser holds until they are (a value that
            # never ends too): bounded by the bytes read meanwhile. A read that began or
            # ended them is not counted (part of it may be another request's, or the body);
            # on_headers_complete counts the headers themselves exactly.
            self._unfinished_bytes += len(data)
            if self._unfinished_bytes > MAX_HEADER_BYTES:
                self._refuse(TOO_LARGE_RESPONSE)
        self._track()

    # -- the parser's callbacks ---------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading, self._unfinished_bytes, self._boundary = "headers", 0, True

    def on_headers_complete(self) -> None:
        # The request line's target and the headers, as the parser reports them ("name: value"
        # and CRLF each), counted once they are complete (what data_received counts bounds
        # the memory they take meanwhile); past the bound the request is refused before
        # the app sees it, as is an HTTP/1.1 request without a Host header (RFC 9112 3.2,
        # which h11 enforced and httptools does not).
        size, host = len(self.url), False
        for name, value in self.headers:
            size += len(name) + len(value) + 4
            host = host or name == b"host"
        if size > MAX_HEADER_BYTES:
            self._refusal = TOO_LARGE_RESPONSE
        elif not host and self.parser.get_http_version() == "1.1":
            self._refusal = NO_HOST_RESPONSE
        if self._refusal is not None:
            raise _Refused  # the parser fails the feed: send_400_response sends the refusal
        cycle = self.cycle
        super().on_headers_complete()
        self._reading, self._boundary = "body", True
        if self.cycle is not cycle and self.cycle is not None:  # a request came: its task has not run yet
            if self._writer is not None:
                self._writer.close()
            self._writer = BodyWriter(self, self.cycle)
            extensions: dict[str, Any] = self.cycle.scope.setdefault("extensions", {})  # type: ignore[assignment]
            extensions[BODY_WRITER] = self._writer

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._reading = None
        self._received += 1

    def on_response_complete(self) -> None:
        self._answered += 1
        super().on_response_complete()
        self._track()

    def send_400_response(self, msg: str) -> None:
        if self._refusal is not None:
            self._refuse(self._refusal)  # the parse failed in on_headers_complete
        else:
            super().send_400_response(msg)

    def _refuse(self, answer: bytes) -> None:
        self._refusal = answer
        logger.info("%s: %s; closing the connection", self._address or "client",
                    answer.rsplit(b"\r\n\r\n", 1)[-1].decode())
        self.transport.write(answer)
        self.transport.close()

    def shutdown(self) -> None:
        """The server stops: a response streaming through a BodyWriter is told to end (an
        endless stream would otherwise hold the shutdown)."""
        super().shutdown()
        if self._writer is not None:
            self._writer.close()

    def handed(self, nbytes: int) -> bool:
        """A :class:`BodyWriter` handed ``nbytes`` to the transport: False (the connection
        aborted) when more than ``BURST_FACTOR`` times ``MAX_UNSENT_BYTES`` now wait unsent;
        past ``MAX_UNSENT_BYTES`` the stall watchdog starts (:meth:`_check_progress`)."""
        self._handed += nbytes
        unsent = self.transport.get_write_buffer_size()
        if unsent > MAX_UNSENT_BYTES * BURST_FACTOR:
            self._cut(unsent)
            return False
        if unsent > MAX_UNSENT_BYTES and self._watchdog is None:
            self._taken, self._taken_at = self._handed - unsent, self.loop.time()
            self._watchdog = self.loop.call_later(self.limits.send_stall_s / 2, self._check_progress)
        return True

    def _check_progress(self) -> None:
        """The stall watchdog, every half of ``send_stall_s`` while more than
        ``MAX_UNSENT_BYTES`` wait (also after the response's last write: a stalled client
        is cut whether or not more comes): the connection is aborted once the socket took
        less than ``MAX_UNSENT_BYTES`` of it in ``send_stall_s`` (about 70 KB/s at the
        defaults; nginx's ``send_timeout`` with a floor, so that a client taking a byte now
        and then cannot hold a full buffer for ever); one that catches up stops it."""
        self._watchdog = None  # (a closing transport is watched too: it waits to send what it holds)
        unsent, now = self.transport.get_write_buffer_size(), self.loop.time()
        if unsent <= MAX_UNSENT_BYTES:
            return  # caught up: watched again when it falls behind again
        if self._handed - unsent - self._taken >= MAX_UNSENT_BYTES:
            self._taken, self._taken_at = self._handed - unsent, now  # it took a bound's worth: progress
        if now - self._taken_at >= self.limits.send_stall_s:
            self._cut(unsent)
            return
        self._watchdog = self.loop.call_later(self.limits.send_stall_s / 2, self._check_progress)

    def _cut(self, unsent: int) -> None:
        logger.warning("%s: a response's client took too little of %d unsent bytes within %s s, or left more than %d; "
                       "closing the connection", self._address or "client", unsent, self.limits.send_stall_s,
                       MAX_UNSENT_BYTES * BURST_FACTOR)
        metrics.SLOW_CLIENTS_CUT.inc()
        self.transport.abort()  # connection_lost follows: the writer's callbacks run there

    def _track(self) -> None:
        """Arm the deadline of what the server now waits for from the client, if anything."""
        if self.transport.is_closing():
            self._arm(None)
            return
        if self._received > self._answered:
            self._arm(None)  # the server's turn: a request read whole is being answered
        else:
            self._arm(self._reading or "headers")

    def _arm(self, phase: str | None) -> None:
        if phase == self._phase:
            return  # a deadline runs from when the phase began, not from the last byte
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None:
            limit_s = self.limits.header_timeout_s if phase == "headers" else self.limits.body_timeout_s
            self._deadline = self.loop.call_later(limit_s, self._timed_out, phase, limit_s)

    def _timed_out(self, phase: str, limit_s: float) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        logger.info("%s: request %s not received within %s s; closing the connection",
                    self._address or "client", phase, limit_s)
        if phase == "headers" and self._reading == "headers":
            self.transport.write(TIMEOUT_RESPONSE)  # part of a request arrived: say why
        self.transport.close()
