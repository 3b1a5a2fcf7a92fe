"""1,000 concurrent SSE clients on one API process, all following one run's stream.

    .venv/bin/python bench/sse_clients.py [--clients 1000] [--events 100] [--interval-ms 50]

Starts its own redis-server, one Celery worker and one API process (`orchestrator
serve`, one uvicorn process), stopped by pid at the end. The clients are raw asyncio
sockets speaking HTTP/1.0 (the body ends when the server closes), lighter than an HTTP
library so that the 2 cores measure the API more than the clients. The run's ticker node
waits ``--start-delay-s`` so every client is connected before the first event.

Prints JSON: time to connect every client, the API process's resident memory (idle,
peak, after), whether every client received every event in order, and the delivery
latency (receive time minus the node's stamp) p50/p99 over all deliveries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from api_events import rss_mb, summary_ms, system, ticker_graph

CONNECT_PARALLELISM = 100  # connections being opened at once


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's soft open-file limit (children inherit it); the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Client:
    """One SSE connection: connect time, the progress indices seen, the latencies."""

    def __init__(self) -> None:
        self.connect_s = 0.0
        self.indices: list[int] = []
        self.latencies: list[float] = []
        self.terminal = ""
        self.error = ""

    async def follow(self, host: str, port: int, path: str, gate: asyncio.Semaphore,
                     connected: asyncio.Event, counter: list[int], total: int) -> None:
        try:
            async with gate:
                started = time.monotonic()
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode())
                await writer.drain()
                status = await reader.readline()
                if b" 200 " not in status:
                    raise RuntimeError(f"status {status!r}")
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # response headers
                self.connect_s = time.monotonic() - started
            counter[0] += 1
            if counter[0] == total:
                connected.set()
            await self.read(reader)
            writer.close()
        except (OSError, RuntimeError, asyncio.IncompleteReadError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    async def read(self, reader: asyncio.StreamReader) -> None:
        event_type, data = "message", ""
        while True:
            raw = await reader.readline()
            if not raw:
                return
            line = raw.decode().rstrip("\r\n")
            if line == "":
                if data and event_type == "progress":
                    body = json.loads(data)["data"]
                    self.indices.append(int(body["i"]))
                    self.latencies.append(time.time() - float(body["sent"]))
                elif data:
                    self.terminal = event_type
                event_type, data = "message", ""
            elif line.startswith("data:"):
                data = line[5:].lstrip()
            elif line.startswith("event:"):
                event_type = line[6:].strip()


async def sample_rss(pid: int, stop: asyncio.Event, peak: list[float]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mb(pid))
        await asyncio.sleep(0.25)


async def start_run_directly(redis_url: str, pack: Path, g: dict[str, Any]) -> str:
    """Start a run the way the API does (``runs.start_run`` + Celery dispatch), in this
    process: the API under test then only serves the event stream."""
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    store, app = RedisRunStore.from_url(redis_url, Settings()), make_celery(redis_url, Settings())
    try:
        registry = load_registry(Settings(node_paths=str(pack)))
        run_id: str = await start_run(store, registry, g, RunRequest({}), dispatch=make_dispatch(app))
        return run_id
    finally:
        app.close()
        await store.close()


async def measure(api: Any, redis_url: str, pack: Path, clients: int, events: int, interval_ms: float,
                  start_delay_s: float) -> dict[str, Any]:
    host, port = "127.0.0.1", api.port
    warmup = await start_run_directly(redis_url, pack, ticker_graph("warmup", 10, 0, 0))
    async with httpx.AsyncClient(timeout=30) as http:
        async with http.stream("GET", f"{api.base_url}/runs/{warmup}/events") as response:
            async for _ in response.aiter_lines():
                pass  # the API's imports and pools are warm
    idle_mb = rss_mb(api.pid)
    run_id = await start_run_directly(redis_url, pack, ticker_graph("fanout", events, interval_ms, start_delay_s))
    path = f"/runs/{run_id}/events"
    gate, connected, counter = asyncio.Semaphore(CONNECT_PARALLELISM), asyncio.Event(), [0]
    stop_sampling, peak = asyncio.Event(), [idle_mb]
    sampler = asyncio.create_task(sample_rss(api.pid, stop_sampling, peak))
    followers = [Client() for _ in range(clients)]
    started = time.monotonic()
    tasks = [asyncio.create_task(c.follow(host, port, path, gate, connected, counter, clients)) for c in followers]
    connect_all_s = float("nan")
    try:
        await asyncio.wait_for(connected.wait(), start_delay_s + 60)
        connect_all_s = time.monotonic() - started
        connected_mb = rss_mb(api.pid)
    except TimeoutError:
        connected_mb = rss_mb(api.pid)
    await asyncio.wait_for(asyncio.gather(*tasks), start_delay_s + 120 + events * interval_ms / 1000)
    stop_sampling.set()
    await sampler
    expected = list(range(events))
    complete = [c for c in followers if c.indices == expected and c.terminal == "run_completed"]
    errors = sorted({c.error for c in followers if c.error})
    latencies = [lat for c in followers for lat in c.latencies]
    return {
        "clients": clients,
        "events_per_client": events,
        "interval_ms": interval_ms,
        "clients_with_every_event_in_order": len(complete),
        "deliveries": len(latencies),
        "errors": errors[:5],
        "connect_all_s": round(connect_all_s, 2),
        "connect_s": summary_ms([c.connect_s for c in followers if not c.error]),
        "connected_before_first_event": connect_all_s < start_delay_s,
        "api_rss_mb": {"idle": idle_mb, "all_connected": connected_mb, "peak": peak[0],
                       "after": rss_mb(api.pid)},
        "delivery": summary_ms(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--interval-ms", type=float, default=50.0)
    parser.add_argument("--api-redis-max-connections", type=int, default=0,
                        help="the API's Redis pool size, set in its REDIS_URL (default 0: the API's own "
                             "pool, Settings.redis_max_connections; SSE streams hold no pooled connection). "
                             "With a value the API cannot dispatch (kombu rejects the URL option), so this "
                             "script starts the run itself.")
    parser.add_argument("--start-delay-s", type=float, default=20.0,
                        help="the node waits this long before its first event (clients connect meanwhile)")
    args = parser.parse_args()
    # Each client costs one socket here and one in the API (the API reads each run once).
    fd_limit = raise_fd_limit(4 * args.clients + 1024)
    started = time.monotonic()
    # Every client connects from 127.0.0.1: the API's per-client connection bound
    # (ORCH_API_MAX_CONNECTIONS_PER_CLIENT, 100 by default) would refuse all but 100.
    per_client = {"ORCH_API_MAX_CONNECTIONS_PER_CLIENT": str(args.clients + 100)}
    with system(workers=1, concurrency=1, api_redis_max_connections=args.api_redis_max_connections or None,
                api_env=per_client) as sys_:
        result = asyncio.run(measure(sys_["api"], sys_["redis"].url, sys_["pack"], args.clients,
                                     args.events, args.interval_ms, args.start_delay_s))
        result["api_redis_url"] = sys_["api"].redis_url
    result["fd_limit"] = fd_limit
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
