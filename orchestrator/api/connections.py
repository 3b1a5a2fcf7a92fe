"""The API server's guard against slow clients: header and body read deadlines and a bound
on connections per client address, in uvicorn's h11 protocol.

Contract (``orchestrator serve`` passes :data:`PROTOCOL` as uvicorn's ``http``; the app
factory, run in each server process before it serves, hands it the settings with
:func:`configure`):

* a request's headers must arrive within ``Settings.api_header_timeout_s`` of the moment
  the server waits for them (the connection opened, or the previous response ended);
* its body, within ``Settings.api_body_timeout_s`` of its headers;
* past either deadline the connection is closed (a client that sent part of its headers
  gets ``408 Request Timeout`` first); a response being sent, however long (an event
  stream), is never cut by them;
* one client address holds at most ``Settings.api_max_connections_per_client``
  connections to one API process (0: no bound); a connection past the bound is closed at
  once, before anything is read from it.

Why hand-written: uvicorn has no read timeout. Its ``timeout_keep_alive`` runs only
between requests and is cancelled by the first byte of the next one, so a client sending
one header byte at a time held a connection for ever (800 of them stayed open 45 s in a
test); ``limit_concurrency`` answers 503 to everybody once the slow clients fill it; an
ASGI middleware runs only after the headers are complete. Gunicorn's and hypercorn's
timeouts would mean another server. The guard sits where the bytes are read: a subclass of
uvicorn's h11 protocol that watches the parser's state (``h11.Connection.their_state``:
IDLE while headers are awaited, SEND_BODY while the body is) after every read. Behind a
reverse proxy every connection comes from the proxy's address: raise the per-client bound
above the proxy's own connection count (or set 0) and let the proxy bound its clients
(docs/deployment.md, "Exposing the API").
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from orchestrator.settings import ApiSettings

logger = logging.getLogger("uvicorn.error")

PROTOCOL = "orchestrator.api.connections:GuardedH11Protocol"  # uvicorn's ``http`` setting
TIMEOUT_RESPONSE = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                    b"connection: close\r\ncontent-length: 22\r\n\r\nrequest read timed out")


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float
    body_timeout_s: float
    max_per_client: int  # 0: no bound

    @classmethod
    def from_settings(cls, settings: ApiSettings) -> ConnectionLimits:
        return cls(settings.api_header_timeout_s, settings.api_body_timeout_s,
                   settings.api_max_connections_per_client)


_process_limits: list[ConnectionLimits] = []  # this server process's, set by configure()


def configure(settings: ApiSettings) -> None:
    """This server process's limits, from its settings: the app factory calls it (the
    protocol is built by uvicorn, per connection, with no way to pass them)."""
    _process_limits[:] = [ConnectionLimits.from_settings(settings)]


def process_limits() -> ConnectionLimits:
    """The limits :func:`configure` set; a RuntimeError if the process never built its app."""
    if not _process_limits:
        raise RuntimeError("GuardedH11Protocol needs the app factory (orchestrator.api:create_app) to run "
                           "first in this process: it passes the API settings (connections.configure)")
    return _process_limits[0]


_per_client: Counter[str] = Counter()  # open connections of this process, by client address


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines and the bound of the module docstring."""

    def __init__(self, *args: Any, limits: ConnectionLimits | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits or process_limits()
        self._phase: str | None = None  # "headers", "body" or None (the server's turn)
        self._deadline: asyncio.TimerHandle | None = None
        self._address: str | None = None

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
        if self._address is not None:
            _per_client[self._address] -= 1
            if _per_client[self._address] <= 0:
                del _per_client[self._address]
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._track()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._track()

    def _track(self) -> None:
        """Arm the deadline of what the server now waits for from the client, if anything."""
        if self.transport.is_closing():
            self._arm(None)
            return
        state = self.conn.their_state
        self._arm("headers" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None)

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
        if phase == "headers" and self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
            self.transport.write(TIMEOUT_RESPONSE)  # part of a request arrived: say why
        self.transport.close()
