"""The slow-client rule of a response written through a ``BodyWriter`` (the event
stream's), on uvicorn's own protocol object with a transport whose socket takes what the
test says: past 1 MiB unsent a client must take 1 MiB within ``send_stall_s`` (one that
takes a trickle is cut as one that takes nothing), and no client may leave more than
16 MiB unsent. (tests/api/test_sse_server.py shows the same against a served API and real
sockets.)"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from orchestrator.api.connections import BURST_FACTOR, MAX_UNSENT_BYTES, ConnectionLimits, GuardedHttpToolsProtocol

STALL_S = 0.5


class Socket:
    """A transport whose buffer holds what was written until the test lets the socket take it."""

    def __init__(self) -> None:
        self.unsent = 0
        self.aborted = False
        self.aborted_at = 0.0
        self.closing = False

    def write(self, data: bytes) -> None:
        self.unsent += len(data)

    def take(self, nbytes: int) -> None:
        self.unsent = max(0, self.unsent - nbytes)

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def abort(self) -> None:
        self.aborted = self.closing = True
        self.aborted_at = time.monotonic()

    def close(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def set_write_buffer_limits(self, *args: Any, **kwargs: Any) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def connection() -> tuple[GuardedHttpToolsProtocol, Socket]:
    config = Config(app=lambda scope, receive, send: None, log_config=None)
    config.load()
    protocol = GuardedHttpToolsProtocol(config=config, server_state=ServerState(), app_state={},
                                  _loop=asyncio.get_running_loop(),
                                  limits=ConnectionLimits(15.0, 60.0, 0, send_stall_s=STALL_S))
    sock = Socket()
    protocol.connection_made(sock)  # type: ignore[arg-type]
    return protocol, sock


def hand(protocol: GuardedHttpToolsProtocol, sock: Socket, nbytes: int) -> bool:
    sock.write(b"x" * nbytes)
    return protocol.handed(nbytes)


async def aborted(sock: Socket) -> bool:
    """Whether the connection is aborted within 10 stall bounds (a busy machine's slack)."""
    deadline = time.monotonic() + 10 * STALL_S
    while not sock.aborted and time.monotonic() < deadline:
        await asyncio.sleep(STALL_S / 10)
    return sock.aborted


async def test_a_client_that_takes_nothing_past_the_bound_is_cut_after_the_stall_bound() -> None:
    protocol, sock = connection()
    handed_at = time.monotonic()
    assert hand(protocol, sock, 2 * MAX_UNSENT_BYTES)
    assert await aborted(sock), "a client that took nothing for the stall bound keeps its connection"
    assert sock.aborted_at - handed_at >= STALL_S, "cut before the stall bound"
    protocol.connection_lost(None)


async def test_a_client_that_keeps_taking_its_share_is_never_cut_however_far_behind() -> None:
    protocol, sock = connection()
    for _ in range(12):  # 3 stall bounds long: 640 KiB handed, 512 KiB taken (1 MiB a half bound)
        assert hand(protocol, sock, 640 * 1024)
        await asyncio.sleep(STALL_S / 4)
        sock.take(512 * 1024)
    assert sock.unsent > MAX_UNSENT_BYTES and not sock.aborted
    protocol.connection_lost(None)


async def test_a_client_that_takes_a_trickle_is_cut_as_one_that_takes_nothing() -> None:
    """A slow reader (a byte now and then) must not hold a full buffer for ever."""
    protocol, sock = connection()
    handed_at = time.monotonic()
    assert hand(protocol, sock, 4 * MAX_UNSENT_BYTES)
    for _ in range(40):
        if sock.aborted:
            break
        sock.take(1024)
        await asyncio.sleep(STALL_S / 8)
    assert sock.aborted and sock.aborted_at - handed_at >= STALL_S
    protocol.connection_lost(None)


async def test_a_stalled_client_is_cut_after_the_response_s_last_write_too() -> None:
    protocol, sock = connection()
    assert hand(protocol, sock, 3 * MAX_UNSENT_BYTES)
    sock.close()  # the response ended; the transport waits to send what it holds
    assert await aborted(sock)
    protocol.connection_lost(None)


async def test_a_client_that_catches_up_is_not_watched_and_one_past_the_memory_bound_is_cut_at_once() -> None:
    protocol, sock = connection()
    assert hand(protocol, sock, 2 * MAX_UNSENT_BYTES)
    sock.take(2 * MAX_UNSENT_BYTES)
    await asyncio.sleep(STALL_S * 2.5)
    assert not sock.aborted
    assert not hand(protocol, sock, BURST_FACTOR * MAX_UNSENT_BYTES + 1), "more than 16 MiB unsent is kept"
    assert sock.aborted
    protocol.connection_lost(None)
