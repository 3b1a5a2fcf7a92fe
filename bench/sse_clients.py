"""Thousands of concurrent SSE clients on one API process, all following one run's stream.

    .venv/bin/python bench/sse_clients.py [--clients 1000] [--events 100] [--interval-ms 50]
                                          [--client-processes 4]

Starts its own redis-server, one Celery worker and one API process (`orchestrator
serve`, one uvicorn process), stopped by pid at the end. The run's ticker node starts
its events ``--start-delay-s`` after every client is connected (the bench then creates
the file the node waits for).

The clients are made as cheap as possible so that the 2 cores measure the server, not
them: ``--client-processes`` processes, each holding its share of the connections as
raw asyncio protocols speaking HTTP/1.0 (the body ends when the server closes). At
receipt a client only appends ``(time.time(), bytes)``; frames are parsed after the run.
Each client process reports its CPU time while events flow, beside the API process's.

Then, in the same run, the same clients follow a *floor*: a bare asyncio server (no
framework, no Redis) that writes the same frames, each encoded once, with
``transport.write`` to every connection in turn: the least a Python server on this
machine can do, so the API's figures read against it (``--no-floor`` skips it).

Prints JSON (``api`` and ``floor``): time to connect every client, the API process's resident memory (idle,
peak, after), whether every client received every event in order, the delivery latency
(receipt time of the chunk that completed a frame minus the node's stamp) p50/p99 over
all deliveries, and the CPU seconds of the API and of the clients during the event phase.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from api_events import percentile, rss_mb, summary_ms, system, ticker_graph

CONNECT_PARALLELISM = 100  # connections being opened at once, per client process
CONNECT_TIMEOUT_S = 300.0  # for every client to be connected


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's soft open-file limit (children inherit it); the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def cpu_s(pid: int | None = None) -> float:
    """User + system CPU seconds of a process (this one by default)."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- a client process -------------------------------------------------------------------


class Connection(asyncio.Protocol):
    """One SSE connection; at receipt only the time and the bytes are kept."""

    def __init__(self, request: bytes, done: asyncio.Future[None]) -> None:
        self.request = request
        self.done = done
        self.chunks: list[tuple[float, bytes]] = []
        self.headers_seen = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.chunks.append((time.time(), data))
        if not self.headers_seen.done():
            self.headers_seen.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.headers_seen.done():
            self.headers_seen.set_exception(ConnectionError(f"closed before the response: {exc}"))
        if not self.done.done():
            self.done.set_result(None)


def parse(chunks: list[tuple[float, bytes]]) -> dict[str, Any]:
    """Status, progress indices, latencies and terminal event type of one connection."""
    buffer, status, head_done = b"", b"", False
    indices: list[int] = []
    latencies: list[float] = []
    terminal = ""
    for received, data in chunks:
        buffer += data
        if not head_done:
            head, sep, rest = buffer.partition(b"\r\n\r\n")
            if not sep:
                continue
            status, head_done, buffer = head.split(b"\r\n", 1)[0], True, rest
        *frames, buffer = buffer.replace(b"\r\n", b"\n").split(b"\n\n")
        for frame in frames:
            event_type, data_line = "message", ""
            for line in frame.decode().split("\n"):
                if line.startswith("event:"):
                    event_type = line[6:].strip()
                elif line.startswith("data:"):
                    data_line = line[5:].strip()
            if not data_line:
                continue  # a comment (keep-alive)
            if event_type == "progress":
                body = json.loads(data_line)["data"]
                indices.append(int(body["i"]))
                latencies.append(received - float(body["sent"]))
            else:
                terminal = event_type
    return {"status": status.decode(errors="replace"), "indices": indices, "latencies": latencies,
            "terminal": terminal}


async def client_process(host: str, port: int, path: str, count: int) -> None:
    """Open ``count`` connections, say so on stdout, read until the server closes them all,
    then print what each received (parsed only now) and this process's CPU."""
    loop = asyncio.get_running_loop()
    request = f"GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode()
    gate = asyncio.Semaphore(CONNECT_PARALLELISM)
    connections: list[Connection] = []
    errors: list[str] = []

    async def open_one() -> None:
        done: asyncio.Future[None] = loop.create_future()
        async with gate:
            try:
                _, protocol = await loop.create_connection(lambda: Connection(request, done), host, port)
                connections.append(protocol)
                await protocol.headers_seen
            except (OSError, ConnectionError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    await asyncio.gather(*(open_one() for _ in range(count)))
    connected_cpu = cpu_s()
    print(json.dumps({"connected": len(connections), "errors": errors[:3]}), flush=True)
    await asyncio.gather(*(c.done for c in connections))
    receive_cpu = cpu_s() - connected_cpu
    parsed = [parse(c.chunks) for c in connections]
    print(json.dumps({"clients": parsed, "errors": errors[:5], "receive_cpu_s": receive_cpu,
                      "connect_cpu_s": connected_cpu}), flush=True)


# -- the floor: the least a Python asyncio server can do for the same stream -------------


async def floor_server(events: int, interval_ms: float, start_delay_s: float) -> None:
    """A bare asyncio server: answers any request with SSE headers, then, ``start_delay_s``
    after a line on stdin (the bench: every client is connected), writes the same frames
    as the ticker run (each encoded once, ``transport.write`` to every connection in turn),
    closes every connection, and exits at the end of stdin. No framework, no Redis: the
    same-run floor under the API's figures."""
    loop = asyncio.get_running_loop()
    followers: list[asyncio.Transport] = []

    class Follower(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.head = b""

        def data_received(self, data: bytes) -> None:
            self.head += data
            if b"\r\n\r\n" in self.head and self.transport not in followers:
                self.transport.write(b"HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")  # type: ignore[attr-defined]
                followers.append(self.transport)  # type: ignore[arg-type]

    server = await loop.create_server(Follower, "127.0.0.1", 0, backlog=4096)
    print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    await asyncio.sleep(start_delay_s)
    for i in range(events):
        body = json.dumps({"data": {"i": i, "sent": time.time()}})
        frame = f"id: {i}\r\nevent: progress\r\ndata: {body}\r\n\r\n".encode()
        for transport in followers:
            transport.write(frame)
        await asyncio.sleep(interval_ms / 1000)
    for transport in followers:
        transport.write(b"event: run_completed\r\ndata: {}\r\n\r\n")
        transport.close()
    await asyncio.to_thread(sys.stdin.read)


# -- the bench ---------------------------------------------------------------------------


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


async def sample_rss(pid: int, stop: asyncio.Event, peak: list[float]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mb(pid))
        await asyncio.sleep(0.25)


async def read_line(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    line = await proc.stdout.readline()
    if not line:
        raise RuntimeError(f"client process {proc.pid} ended early (exit {await proc.wait()})")
    result: dict[str, Any] = json.loads(line)
    return result


async def measure(api: Any, redis_url: str, pack: Path, args: argparse.Namespace) -> dict[str, Any]:
    warmup = await start_run_directly(redis_url, pack, ticker_graph("warmup", 10, 0, 0))
    async with httpx.AsyncClient(timeout=30) as http:
        async with http.stream("GET", f"{api.base_url}/runs/{warmup}/events") as response:
            async for _ in response.aiter_lines():
                pass  # the API's imports and pools are warm
    idle_mb = rss_mb(api.pid)
    gate = pack.parent / "clients-connected"
    run_id = await start_run_directly(redis_url, pack, ticker_graph("fanout", args.events, args.interval_ms,
                                                                    args.start_delay_s, str(gate)))
    stop_sampling, peak = asyncio.Event(), [idle_mb]
    sampler = asyncio.create_task(sample_rss(api.pid, stop_sampling, peak))
    result = await follow(api.port, f"/runs/{run_id}/events", api.pid, args, connected=gate.touch)
    stop_sampling.set()
    await sampler
    result["api_rss_mb"] = {"idle": idle_mb, "all_connected": result.pop("rss_connected_mb"), "peak": peak[0],
                            "after": rss_mb(api.pid)}
    return result


async def measure_floor(args: argparse.Namespace) -> dict[str, Any]:
    """The same clients against :func:`floor_server`, in the same run."""
    server = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--floor-server", "--events", str(args.events), "--interval-ms",
        str(args.interval_ms), "--start-delay-s", str(args.start_delay_s), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)
    stdin = server.stdin
    assert stdin is not None
    try:
        port = (await read_line(server))["port"]
        result = await follow(port, "/", server.pid, args, connected=lambda: stdin.write(b"go\n"))
        result.pop("rss_connected_mb")
        return result
    finally:
        stdin.close()
        try:
            await asyncio.wait_for(server.wait(), 10)
        except TimeoutError:
            server.kill()
            await server.wait()


async def follow(port: int, path: str, server_pid: int, args: argparse.Namespace,
                 connected: Callable[[], None] | None = None) -> dict[str, Any]:
    """``args.clients`` clients in ``args.client_processes`` processes follow ``path`` to its
    end (``connected`` is called once all are); what they received, the server's and their CPU."""
    clients, events = args.clients, args.events
    shares = [clients // args.client_processes + (1 if i < clients % args.client_processes else 0)
              for i in range(args.client_processes)]
    started = time.monotonic()
    server_cpu_start = cpu_s(server_pid)
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client-of", f"127.0.0.1:{port}{path}", "--clients", str(n),
        stdout=asyncio.subprocess.PIPE, limit=1 << 30) for n in shares if n]
    deadline_s = args.start_delay_s + 120 + events * args.interval_ms / 1000
    connects = await asyncio.wait_for(asyncio.gather(*(read_line(p) for p in procs)), CONNECT_TIMEOUT_S)
    connect_all_s = time.monotonic() - started
    if connected is not None:
        connected()
    connected_mb = rss_mb(server_pid)
    server_cpu_connected = cpu_s(server_pid)
    reports = await asyncio.wait_for(asyncio.gather(*(read_line(p) for p in procs)), deadline_s)
    server_cpu_end = cpu_s(server_pid)
    for proc in procs:
        await proc.wait()
    followers = [c for r in reports for c in r["clients"]]
    expected = list(range(events))
    complete = [c for c in followers if c["indices"] == expected and c["terminal"] == "run_completed"]
    latencies = [lat for c in followers for lat in c["latencies"]]
    per_client_p50 = [percentile(c["latencies"], 50) for c in followers if c["latencies"]]
    # Per event: the first client's latency (the way to the server and its first write) and
    # the last one's (plus the whole fan-out).
    by_event: dict[int, list[float]] = {}
    for c in followers:
        for index, latency in zip(c["indices"], c["latencies"], strict=True):
            by_event.setdefault(index, []).append(latency)
    receive_cpu = sum(r["receive_cpu_s"] for r in reports)
    streaming_cpu = server_cpu_end - server_cpu_connected
    return {
        "clients": clients,
        "connected": sum(c["connected"] for c in connects),
        "client_processes": len(procs),
        "events_per_client": events,
        "interval_ms": args.interval_ms,
        "clients_with_every_event_in_order": len(complete),
        "deliveries": len(latencies),
        "errors": sorted({e for r in [*connects, *reports] for e in r["errors"]})[:5],
        "statuses": sorted({c["status"] for c in followers}),
        "connect_all_s": round(connect_all_s, 2),
        "rss_connected_mb": connected_mb,
        "delivery": summary_ms(latencies),
        "client_p50_spread_ms": summary_ms(per_client_p50),
        "first_client_per_event_ms": summary_ms([min(v) for v in by_event.values()]),
        "last_client_per_event_ms": summary_ms([max(v) for v in by_event.values()]),
        # From all connected to every stream closed (includes the start delay's idle time).
        "cpu_s_while_streaming": {"server": round(streaming_cpu, 2), "clients": round(receive_cpu, 2)},
        "server_cpu_s_connecting": round(server_cpu_connected - server_cpu_start, 2),
        "server_cpu_us_per_delivery": round(streaming_cpu / max(1, len(latencies)) * 1e6, 1),
        "client_cpu_us_per_delivery": round(receive_cpu / max(1, len(latencies)) * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--interval-ms", type=float, default=50.0)
    parser.add_argument("--client-processes", type=int, default=4)
    parser.add_argument("--start-delay-s", type=float, default=2.0,
                        help="from every client connected to the node's first event")
    parser.add_argument("--no-floor", action="store_true",
                        help="skip the same-run floor (a bare asyncio server writing the same frames)")
    parser.add_argument("--client-of", help=argparse.SUPPRESS)  # host:port/path: run as a client process
    parser.add_argument("--floor-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    # Each client costs one socket here and one in the API (the API reads each run once).
    fd_limit = raise_fd_limit(4 * args.clients + 1024)
    if args.client_of:
        address, _, path = args.client_of.partition("/")
        host, _, port = address.partition(":")
        asyncio.run(client_process(host, int(port), "/" + path, args.clients))
        return
    if args.floor_server:
        asyncio.run(floor_server(args.events, args.interval_ms, args.start_delay_s))
        return
    started = time.monotonic()
    # Every client connects from 127.0.0.1: the API's per-client connection bound
    # (ORCH_API_MAX_CONNECTIONS_PER_CLIENT, 100 by default) would refuse all but 100.
    per_client = {"ORCH_API_MAX_CONNECTIONS_PER_CLIENT": str(args.clients + 100)}
    with system(workers=1, concurrency=1, api_env=per_client) as sys_:
        result: dict[str, Any] = {"api": asyncio.run(measure(sys_["api"], sys_["redis"].url, sys_["pack"], args))}
    if not args.no_floor:
        result["floor"] = asyncio.run(measure_floor(args))
    result["fd_limit"] = fd_limit
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["cpus"] = os.cpu_count()
    result["load_average"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
