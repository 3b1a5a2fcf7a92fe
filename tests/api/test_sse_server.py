"""Event streams served by a real ``orchestrator serve`` (a subprocess), where the run's
reader writes to each connection itself: a client that stops reading is cut once it
takes nothing of a bounded buffer for ``api_send_stall_s`` while another gets every
event, a client that reads slowly keeps its stream through a burst, a client that leaves
leaves no stream behind, idle streams get keep-alive comments, and a shutdown ends open
streams."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.kernel.compile import compile_run
from orchestrator.kernel.protocol import NodeEvent
from orchestrator.kernel.store import RunRecord, RunStatus
from orchestrator.kernel.validation import validate_graph
from orchestrator.local.embedded_redis import EmbeddedRedis, free_port
from orchestrator.store.redis_client import client
from orchestrator.store.redis_store import RedisRunStore
from tests.api.conftest import api_registry, chain, make_settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PING_S = 0.5
STALL_S = 1.0  # ORCH_API_SEND_STALL_S of the served API


class Server:
    def __init__(self, redis_server: EmbeddedRedis) -> None:
        self.prefix = "t" + secrets.token_hex(4)
        self.port = free_port()
        self.redis_url = redis_server.url
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
        env.update(REDIS_URL=redis_server.url, ORCH_KEY_PREFIX=self.prefix, ORCH_API_KEYS="",
                   ORCH_SSE_PING_S=str(PING_S), ORCH_API_RUN_SWEEPER="false",
                   ORCH_API_SEND_STALL_S=str(STALL_S))
        self.proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", "--port", str(self.port),
                                      "--log-level", "warning"], cwd=ROOT, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert self.proc.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def streams(self) -> float:
        """The server's open event streams (its ``/metrics`` gauge)."""
        return self._metric("orchestrator_sse_streams")

    def cut(self) -> float:
        """The connections the server cut for a client that took nothing (its ``/metrics`` counter)."""
        return self._metric("orchestrator_api_slow_clients_cut_total")

    def _metric(self, name: str) -> float:
        text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text
        found = re.search(rf"^{name} (\S+)$", text, re.M)
        assert found, f"no {name} in /metrics"
        return float(found.group(1))


@pytest.fixture(scope="module")
def server(redis_server: EmbeddedRedis) -> Iterator[Server]:
    served = Server(redis_server)
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture
async def store(server: Server, redis_server: EmbeddedRedis) -> AsyncIterator[RedisRunStore]:
    redis = client(redis_server.url, decode_responses=True)
    yield RedisRunStore(redis, make_settings(redis_server, key_prefix=server.prefix))
    await redis.aclose()


async def make_run(store: RedisRunStore) -> str:
    run_id = "r" + secrets.token_hex(4)
    vg = validate_graph(chain("g1"), api_registry())
    await store.create_run(compile_run(vg, run_id), RunRecord(run_id=run_id, status=RunStatus.RUNNING, graph_id="g1"))
    return run_id


async def until(check: object, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(check):  # type: ignore[arg-type]
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.05)


def request(run_id: str) -> bytes:
    return f"GET /runs/{run_id}/events HTTP/1.1\r\nHost: api\r\nAccept: text/event-stream\r\n\r\n".encode()


async def read_all(port: int, run_id: str, *, pause_s: float = 0.0, sock: socket.socket | None = None) -> bytes:
    """The stream's bytes up to its terminal event; ``pause_s`` between reads of 64 KiB."""
    if sock is None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    else:
        reader, writer = await asyncio.open_connection(sock=sock)
    received = bytearray()
    try:
        writer.write(request(run_id))
        while b"event: run_cancelled" not in received[-4096:]:
            chunk = await reader.read(1 << 16)
            assert chunk, "the stream ended before the terminal event"
            received += chunk
            if pause_s:
                await asyncio.sleep(pause_s)
    finally:  # (a socket left open is a ResourceWarning in whichever test runs next)
        writer.close()
    return bytes(received)


async def test_a_client_that_stops_reading_is_cut_while_another_gets_every_event(
    server: Server, store: RedisRunStore
) -> None:
    run_id = await make_run(store)
    cut_before = await asyncio.to_thread(server.cut)
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect(("127.0.0.1", server.port))
    stalled.sendall(request(run_id))
    reader = asyncio.create_task(read_all(server.port, run_id))
    await until(lambda: server.streams() == 2, "both streams open")
    pad = "x" * 65_536
    for i in range(200):  # ~13 MB: past the socket buffers and the server's bound
        await store.append_event(NodeEvent(run_id, "b", "relay", "progress", {"i": i, "pad": pad}))
    await store.finish_run(run_id, RunStatus.CANCELLED)
    received = await asyncio.wait_for(reader, 30)
    assert received.count(b"event: progress") == 200
    await until(lambda: server.streams() == 0, "both streams ended")
    # It took nothing for STALL_S, the rest still unsent: cut (what it had not read dropped).
    await until(lambda: server.cut() > cut_before, "the stalled client was cut", timeout_s=10 * STALL_S)
    stalled.settimeout(5)
    got = b""
    try:
        while chunk := stalled.recv(1 << 16):
            got += chunk
    except ConnectionResetError:
        pass  # cut: what it had not read is gone
    stalled.close()
    assert b"event: run_cancelled" not in got
    assert got.count(b"event: progress") < 200


async def test_a_client_that_reads_slowly_through_a_burst_keeps_its_stream(
    server: Server, store: RedisRunStore
) -> None:
    """10 MB of events, one every 10 ms, to a client that takes 64 KiB every 25 ms: once the
    kernel's buffers are full, more than the 1 MiB bound waits for it for seconds (past
    ``STALL_S``) while events keep coming, but it keeps taking some, so it is not cut and
    gets every event (a bound on unsent bytes alone cut it at a write)."""
    run_id = await make_run(store)
    cut_before = await asyncio.to_thread(server.cut)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # the kernel holds little of the burst
    sock.connect(("127.0.0.1", server.port))
    reader = asyncio.create_task(read_all(server.port, run_id, pause_s=0.025, sock=sock))
    await until(lambda: server.streams() == 1, "the stream open")
    pad = "x" * 65_536
    began = time.monotonic()
    for i in range(160):  # each its own write, faster than the client takes them
        await store.append_event(NodeEvent(run_id, "b", "relay", "progress", {"i": i, "pad": pad}))
        await asyncio.sleep(0.01)
    await store.finish_run(run_id, RunStatus.CANCELLED)
    received = await asyncio.wait_for(reader, 60)
    assert received.count(b"event: progress") == 160
    assert time.monotonic() - began > STALL_S, "the client was behind for longer than the stall bound"
    assert await asyncio.to_thread(server.cut) == cut_before


async def test_a_client_that_reads_takes_a_history_larger_than_the_unsent_bound(
    server: Server, store: RedisRunStore
) -> None:
    """A run's history of 2.5 MB goes to a new client in one read of the stream, past the
    1 MiB a slow client may leave unsent: one that reads takes it, and every later event."""
    run_id = await make_run(store)
    pad = "x" * 65_536
    for i in range(40):
        await store.append_event(NodeEvent(run_id, "b", "relay", "progress", {"i": i, "pad": pad}))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)  # the kernel takes less of the burst
    sock.connect(("127.0.0.1", server.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(request(run_id))
    received = b""
    while received.count(b"event: progress") < 40:
        chunk = await asyncio.wait_for(reader.read(1 << 16), 30)
        assert chunk, "the stream ended before the history was read"
        received += chunk
    await store.finish_run(run_id, RunStatus.CANCELLED)
    while b"event: run_cancelled" not in received:
        chunk = await asyncio.wait_for(reader.read(1 << 16), 30)
        assert chunk, "the stream ended before the terminal event"
        received += chunk
    writer.close()


async def test_clients_that_leave_an_idle_stream_leave_no_stream_behind(server: Server, store: RedisRunStore) -> None:
    run_id = await make_run(store)
    socks = []
    for _ in range(20):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(request(run_id))
        socks.append(sock)
    await until(lambda: server.streams() == 20, "20 streams open")
    for sock in socks:
        sock.close()
    # No event flows: only the connections' close tells the server.
    await until(lambda: server.streams() == 0, "every stream closed", timeout_s=5)
    await store.finish_run(run_id, RunStatus.CANCELLED)


async def test_an_idle_stream_gets_keep_alive_comments(server: Server, store: RedisRunStore) -> None:
    run_id = await make_run(store)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(request(run_id))
    received = b""
    began = time.monotonic()
    while received.count(b": ping") < 2:
        assert time.monotonic() - began < 10 * PING_S, f"fewer than 2 pings in {10 * PING_S} s: {received!r}"
        received += await asyncio.wait_for(reader.read(4096), 10 * PING_S)
    writer.close()
    await store.finish_run(run_id, RunStatus.CANCELLED)


async def test_a_shutdown_ends_open_streams_and_the_server_exits(redis_server: EmbeddedRedis) -> None:
    own = Server(redis_server)
    try:
        redis = client(redis_server.url, decode_responses=True)
        run_id = await make_run(RedisRunStore(redis, make_settings(redis_server, key_prefix=own.prefix)))
        await redis.aclose()
        reader, writer = await asyncio.open_connection("127.0.0.1", own.port)
        writer.write(request(run_id))
        assert b"200" in await asyncio.wait_for(reader.readline(), 10)
        began = time.monotonic()
        own.proc.send_signal(signal.SIGTERM)
        while await asyncio.wait_for(reader.read(4096), 10):
            pass  # the stream ends (chunked body closed, then the connection)
        writer.close()
        assert await asyncio.to_thread(own.proc.wait, 10) is not None
        assert time.monotonic() - began < 10
    finally:
        if own.proc.poll() is None:
            own.stop()


async def test_the_chat_format_streams_each_events_messages_with_the_stream_id_on_the_last(
    server: Server, store: RedisRunStore
) -> None:
    from orchestrator.api.events import chat_events

    run_id = await make_run(store)
    for i in range(3):
        await store.append_event(NodeEvent(run_id, "b", "relay", "progress", {"i": i}))
    await store.finish_run(run_id, RunStatus.CANCELLED)
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(f"http://127.0.0.1:{server.port}/runs/{run_id}/events?format=chat")
    assert response.status_code == 200 and response.headers["transfer-encoding"] == "chunked"
    frames = [block for block in response.text.split("\r\n\r\n") if "event:" in block]
    stored = await store.read_events(run_id)
    expected = [str(m.get("type", "message")) for _, event in stored for m in chat_events(event)]
    assert [re.search(r"^event: ([^\r\n]*)", f, re.M).group(1) for f in frames] == expected  # type: ignore[union-attr]
    assert re.search(r"^id: ([^\r\n]*)", frames[-1], re.M).group(1) == stored[-1][0]  # type: ignore[union-attr]
