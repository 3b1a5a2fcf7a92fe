"""Starts per second of ONE API process: ``POST /graphs/{id}/runs`` of a stored graph.

    .venv/bin/python bench/starts.py [--clients 50] [--seconds 4]

Starts its own redis-server and one API process (``orchestrator serve``, one uvicorn
process), stopped by pid at the end; no worker (the runs stay queued: the bench measures
the start, and back-pressure is off, ``ORCH_MAX_QUEUED_NODES=0``, unless ``--queue-bound``
sets a bound, for starts with admission's queue check on; so is the API's sweeper,
``ORCH_API_RUN_SWEEPER=false``, which would otherwise send every unclaimed start node
again after its grace and scan the thousands of queued runs: work no worker means, not
the start's). Stores a 1-node and a
52-node graph (a trigger and 51 set_fields in a chain), then for each: ``--clients`` keep-alive
HTTP/1.1 connections (raw asyncio sockets, lighter than an HTTP library, so the 2 cores
measure the API more than the clients) send starts back to back for ``--seconds``. The
same-run baseline is ``GET /health`` from the same clients, measured between the two.

Prints JSON: requests/s, p50/p99 latency (ms), the API process's CPU per request and
Redis's time per request (its own count, ``INFO commandstats``: what the create script
and the publish cost the server, which shares the 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from api_events import ApiProcess, percentile
from chain import chain_graph

from orchestrator.local.embedded_redis import EmbeddedRedis

TICKS_S = os.sysconf("SC_CLK_TCK")


def one_node() -> dict[str, Any]:
    return {"id": "one", "nodes": [{"id": "t", "type": "manual_trigger", "name": "Start"}], "edges": []}


def wide(length: int = 52) -> dict[str, Any]:
    return {**chain_graph(length), "id": "wide"}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_S


async def client_loop(host: str, port: int, request: bytes, until: float, latencies: list[float],
                      statuses: dict[int, int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.monotonic() < until:
            t0 = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            length = next(int(v) for k, _, v in (line.partition(":") for line in lines[1:])
                          if k.lower() == "content-length")
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            statuses[status] = statuses.get(status, 0) + 1
    finally:
        writer.close()


async def load(api: ApiProcess, method: str, path: str, body: bytes, clients: int, seconds: float) -> dict[str, Any]:
    request = (f"{method} {path} HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    stats = redis.Redis.from_url(api.redis_url)
    stats.config_resetstat()
    cpu0, t0 = cpu_s(api.pid), time.monotonic()
    await asyncio.gather(*(client_loop("127.0.0.1", api.port, request, t0 + seconds, latencies, statuses)
                           for _ in range(clients)))
    elapsed, cpu = time.monotonic() - t0, cpu_s(api.pid) - cpu0
    redis_us = sum(int(c["usec"]) for c in stats.info("commandstats").values())
    stats.close()
    ms = sorted(x * 1000 for x in latencies)
    return {"per_s": round(len(latencies) / elapsed), "p50_ms": round(percentile(ms, 50), 1),
            "p99_ms": round(percentile(ms, 99), 1), "api_cpu_ms_per_request": round(cpu * 1000 / len(ms), 3),
            "redis_us_per_request": round(redis_us / len(ms), 1), "statuses": statuses}


async def measure(api: ApiProcess, clients: int, seconds: float) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as http:
        for g in (one_node(), wide()):
            assert (await http.post("/graphs", json=g)).status_code == 201
            assert (await http.post(f"/graphs/{g['id']}/runs", json={})).status_code == 202  # warm
    body = json.dumps({"input": {"x": 1}}).encode()
    out: dict[str, Any] = {}
    out["start_1_node"] = await load(api, "POST", "/graphs/one/runs", body, clients, seconds)
    out["health_baseline"] = await load(api, "GET", "/health", b"", clients, seconds)
    out["start_52_nodes"] = await load(api, "POST", "/graphs/wide/runs", body, clients, seconds)
    for name in ("start_1_node", "start_52_nodes"):
        out[f"{name}_vs_health"] = round(out[name]["per_s"] / out["health_baseline"]["per_s"], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--queue-bound", type=int, default=0,
                        help="ORCH_MAX_QUEUED_NODES: 0 (default) turns admission's queue check off; a bound "
                             "above what the runs queue (e.g. 1000000) measures starts with the check on")
    args = parser.parse_args()
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"orc-starts-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    with EmbeddedRedis(unix_socket=False) as server:
        env = {"ORCH_MAX_QUEUED_NODES": str(args.queue_bound), "ORCH_API_RUN_SWEEPER": "false"}
        api = ApiProcess(server.url, env, workdir)
        try:
            api.wait_ready()
            result = asyncio.run(measure(api, args.clients, args.seconds))
        finally:
            api.stop()
    result["config"] = {"clients": args.clients, "seconds": args.seconds}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
