"""Slow clients against a real ``orchestrator serve`` (a subprocess): raw sockets trickling
header or body bytes are closed at the deadlines, a client address past its connection
bound is refused at once, and ordinary requests from elsewhere are served throughout."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis, free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HEADER_TIMEOUT_S = 3.0
BODY_TIMEOUT_S = 3.0
PER_CLIENT = 20
SLACK_S = 3.0  # scheduling on a busy machine; the deadlines are what is measured


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    with EmbeddedRedis(unix_socket=False) as redis_server:
        port = free_port()
        env = {**os.environ, "REDIS_URL": redis_server.url, "ORCH_API_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
               "ORCH_API_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
               "ORCH_API_MAX_CONNECTIONS_PER_CLIENT": str(PER_CLIENT), "ORCH_API_RUN_SWEEPER": "false"}
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", "--port", str(port),
                                 "--log-level", "warning"], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while health(port, "127.0.0.1") != 200:
                assert proc.poll() is None and time.monotonic() < deadline, "serve did not start"
                time.sleep(0.1)
            yield port
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def health(port: int, source: str) -> int | None:
    """GET /health from ``source`` (a loopback address: each is its own client)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5, source_address=(source, 0))
    try:
        conn.request("GET", "/health")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def connect(port: int, source: str, first: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    sock.setblocking(False)
    if first:
        sock.sendall(first)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """True once the server has closed ``sock`` (EOF or reset); reads what it sent first."""
    try:
        while True:
            if sock.recv(65536) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def trickle_until_closed(socks: list[socket.socket], limit_s: float, others: list[str], port: int) -> float:
    """Send one byte to each open socket every 0.2 s until the server has closed them all;
    meanwhile ``others`` (source addresses) must be served. Returns the seconds it took."""
    began = time.monotonic()
    open_socks = list(socks)
    while open_socks:
        elapsed = time.monotonic() - began
        assert elapsed < limit_s, f"{len(open_socks)} slow connections still open after {elapsed:.1f} s"
        for sock in list(open_socks):
            if closed_by_server(sock):
                open_socks.remove(sock)
                continue
            try:
                sock.send(b"x")
            except OSError:
                pass
        for source in others:
            assert health(port, source) == 200
        time.sleep(0.2)
    return time.monotonic() - began


def test_clients_trickling_headers_are_closed_at_the_header_deadline_while_others_are_served(server: int) -> None:
    sources = [f"127.0.0.{n}" for n in range(10, 15)]
    slow = [connect(server, source, b"GET /health HTTP/1.1\r\nHost: api\r\nX-Slow: ")
            for source in sources for _ in range(10)]
    try:
        took = trickle_until_closed(slow, HEADER_TIMEOUT_S + SLACK_S, ["127.0.0.2"], server)
        assert took >= HEADER_TIMEOUT_S - 0.5  # the deadline, not something sooner
    finally:
        for sock in slow:
            sock.close()


def test_a_client_trickling_its_body_is_closed_at_the_body_deadline(server: int) -> None:
    head = (b"POST /graphs/validate HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000\r\n\r\n{\"id\": ")
    slow = [connect(server, "127.0.0.20", head) for _ in range(5)]
    try:
        trickle_until_closed(slow, BODY_TIMEOUT_S + SLACK_S, ["127.0.0.2"], server)
    finally:
        for sock in slow:
            sock.close()


def test_connections_past_the_per_client_bound_are_closed_at_once(server: int) -> None:
    held = [connect(server, "127.0.0.30") for _ in range(PER_CLIENT)]
    try:
        extra = connect(server, "127.0.0.30")
        began = time.monotonic()
        while not closed_by_server(extra):
            assert time.monotonic() - began < 1.0, "the connection past the bound was kept"
            time.sleep(0.02)
        extra.close()
        assert health(server, "127.0.0.31") == 200  # another client is served
        assert not any(closed_by_server(sock) for sock in held)  # the first ones are kept
    finally:
        for sock in held:
            sock.close()
    began = time.monotonic()
    while health(server, "127.0.0.30") != 200:  # closed ones free the client's slots
        assert time.monotonic() - began < 5.0
        time.sleep(0.05)


def read_until_closed(sock: socket.socket, limit_s: float) -> bytes:
    """Everything the server sends on ``sock`` until it closes it (failing past ``limit_s``)."""
    sock.setblocking(True)
    sock.settimeout(limit_s)
    received = b""
    began = time.monotonic()
    while True:
        assert time.monotonic() - began < limit_s, f"still open after {limit_s} s: {received[:200]!r}"
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk


def test_request_headers_past_16_kib_get_431_whole_or_unfinished_and_smaller_ones_are_served(server: int) -> None:
    many = b"".join(b"X-Filler-%d: %s\r\n" % (n, b"v" * 200) for n in range(90))  # ~19 KB of whole headers
    sock = connect(server, "127.0.0.40", b"GET /health HTTP/1.1\r\nHost: api\r\n" + many + b"\r\n")
    assert read_until_closed(sock, 5.0).startswith(b"HTTP/1.1 431 ")
    sock.close()

    # One header value that never ends, sent fast: the parser holds it unfinished, and the
    # bound is on the bytes read, not on the headers reported.
    sock = connect(server, "127.0.0.41", b"GET /health HTTP/1.1\r\nHost: api\r\nX-Endless: ")
    sock.setblocking(True)
    answer = b""
    try:
        for _ in range(64):  # 256 KiB at most
            sock.sendall(b"v" * 4096)
            time.sleep(0.01)
    except OSError:  # closed by the server while sending: what it answered is still readable
        pass
    answer = read_until_closed(sock, 5.0)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]

    fits = b"".join(b"X-Filler-%d: %s\r\n" % (n, b"v" * 200) for n in range(50))  # ~11 KB
    sock = connect(server, "127.0.0.42", b"GET /health HTTP/1.1\r\nHost: api\r\nConnection: close\r\n" + fits + b"\r\n")
    assert read_until_closed(sock, 5.0).startswith(b"HTTP/1.1 200 ")
    sock.close()


def test_pipelined_requests_are_all_answered_and_a_kept_alive_connection_gets_the_header_deadline_again(
        server: int) -> None:
    request = b"GET /health HTTP/1.1\r\nHost: api\r\n\r\n"
    sock = connect(server, "127.0.0.43", request * 3)
    sock.setblocking(True)
    sock.settimeout(5.0)
    received = b""
    while received.count(b'{"status":"ok"}') < 3:  # three whole answers
        chunk = sock.recv(65536)
        assert chunk, f"closed after {received.count(b'HTTP/1.1 200 ')} answers"
        received += chunk
    assert received.count(b"HTTP/1.1 200 ") == 3
    # The same connection, now idle: part of a fourth request, then nothing. Closed at the
    # header deadline, counted from the last answer, with a 408 (part of a request came).
    began = time.monotonic()
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: ")
    answer = read_until_closed(sock, HEADER_TIMEOUT_S + SLACK_S)
    took = time.monotonic() - began
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
    assert took >= HEADER_TIMEOUT_S - 1.0


def test_an_http_1_1_request_without_a_host_header_is_refused_and_an_http_1_0_one_is_served(server: int) -> None:
    sock = connect(server, "127.0.0.44", b"GET /health HTTP/1.1\r\n\r\n")
    answer = read_until_closed(sock, 5.0)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.endswith(b"needs a Host header"), answer[:200]
    sock = connect(server, "127.0.0.44", b"GET /health HTTP/1.0\r\n\r\n")
    answer = read_until_closed(sock, 5.0)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
