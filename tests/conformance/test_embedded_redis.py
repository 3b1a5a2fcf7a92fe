"""The embedded redis-server: it answers once started, and stop leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import redis
from kombu import Connection

from orchestrator.local.embedded_redis import EmbeddedRedis, free_port, redis_server_binary


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_unix_socket_server_serves_redis_py_and_kombu_then_stops_cleanly() -> None:
    server = EmbeddedRedis().start()
    try:
        assert server.url.startswith("unix://") and server.broker_url.startswith("redis+socket://")
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        client.close()
        with Connection(server.broker_url) as conn:
            queue = conn.SimpleQueue("probe")
            queue.put({"hello": 1})
            message = queue.get(timeout=2)
            assert message.payload == {"hello": 1}
            message.ack()
            queue.close()
    finally:
        server.stop()
    assert not _alive(server.pid)
    assert not server.dir.exists()


def test_tcp_server_listens_on_the_port_it_reports() -> None:
    port = free_port()
    with EmbeddedRedis(port=port, unix_socket=False) as server:
        assert server.url == f"redis://127.0.0.1:{port}/0"
        client = redis.Redis(port=port)
        assert client.ping()
        client.close()
        pid = server.pid
    assert not _alive(pid)


def test_append_only_server_writes_its_log_into_a_given_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / ("deep" * 30) / "data"  # too long for a socket path: still works
    with EmbeddedRedis(appendonly=True, dir=data_dir) as server:
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        client.close()
    assert any(p.name.startswith("appendonly") for p in data_dir.iterdir())  # kept: caller's dir


def test_the_bundled_binary_is_found() -> None:
    assert os.access(redis_server_binary(), os.X_OK)
