"""Flow control: provider rate limits across 2 worker processes, against a provider that
enforces its quota with 429s.

A local OpenAI-compatible stub (the test suite's, ``tests/agents/openai_stub.py``) answers
at most ``--rpm`` chat requests in any sliding ``--window-s`` window and 429 beyond it, with
``Retry-After`` (seconds until the window's oldest request leaves it). ``--nodes`` model nodes
(``llm_completion``: an Agno Agent without session storage, one streamed call each; one run,
fanned out from one trigger, each with 3 attempts for infrastructure hiccups) call it
through the operator's endpoint, on 2 worker processes (threads pool,
``ORCH_NODE_CONCURRENCY`` 100 each). Phases, in one run of this script, on one embedded Redis:

* ``declared``: the quota is configured once for the endpoint (``ORCH_MODEL_LIMITS``
  ``{"<stub>": {"rpm": N}}``). Reported: provider 429s (goal 0), throughput as a share of the
  quota from the first to the last request (goal >= 95%), and the latency of a free node
  (one ``bench_sleep`` with 0 s, its own run) started while the model nodes make their first
  tries (each one runs once to learn it must wait: CPU) and again 40 s in (all of them parked
  on their reservations, no slot held), beside the same run on the idle cluster (baseline).
* ``adaptive``: no limit configured. The first burst meets 429s; each 429 blocks the key
  for every worker until ``Retry-After`` and teaches it a rate. Reported: 429s as a share of
  calls made after the first ``--window-s`` (goal < 5%), and over the whole phase.
* ``fairness``: workspace ``a`` starts ``--flood`` ``bench_sleep`` nodes of ``--flood-delay-s``
  (shape ``fanout``: two runs, each fanned out from its trigger; shape ``runs``: ``--flood``
  one-node runs), then workspace ``b`` starts one 3-node run (trigger -> sleep 0 -> sleep 0):
  the time from b's start to its end, beside the same run on the idle cluster (measured
  first) and the flood's own length; once with one broker queue (``ORCH_LANES=1``, the
  unfair baseline) and once with ``--lanes`` lanes, in the same run of the script.
* ``limiter``: one acquire of the GCRA script (``orchestrator/store/lua/limit.lua``) against
  a sliding-window log in a sorted set (the other usual design, written here for the
  comparison), same Redis, sequential calls: microseconds per acquire and the bytes one key
  holds at a 100k units-per-minute quota.

Scale: the issue's figures (1,000 agent nodes, 600 requests per minute) take about 100 s per
phase at 10 requests/s, so they are the defaults; ``--nodes`` and ``--rpm`` scale both
phases down together for a quick look (keep nodes/rpm*60 above the window for the adaptive
figure to mean anything).

    .venv/bin/python bench/flow_control.py [--nodes 1000] [--rpm 600] [--window-s 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.kernel.protocol import EventType  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerProcesses  # noqa: E402
from tests.agents.openai_stub import StubServer, _Handler  # noqa: E402

PACK = ROOT / "bench" / "pack"
RESULTS = ROOT / "bench" / "results"
WORKERS = 2
CONCURRENCY = 100
MODEL = "openai-like:bench-model"
LEASE_S = 10.0  # node leases (the workers' ORCH_NODE_LEASE_S): a node whose worker lost it is re-sent sooner
SWEEP_PERIOD_S = 1.0
STEADY_AFTER_S = 40.0  # the second free-node probe, this long after the model nodes started
START_BATCH = 50  # the flood's one-node runs are started this many at once


class _QuotaHandler(_Handler):
    server: QuotaStub

    def do_POST(self) -> None:
        stub = self.server
        with stub.lock:
            now = time.monotonic()
            while stub.window and stub.window[0] <= now - stub.window_s:
                stub.window.pop(0)
            refused = len(stub.window) >= stub.rpm
            if not refused:
                stub.window.append(now)
            stub.log.append((now, 429 if refused else 200))
            retry_after = stub.window[0] + stub.window_s - now if refused else 0.0
        if not refused:
            super().do_POST()
            return
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._send(429, {"error": {"message": "rate limit", "type": "rate_limit_exceeded"}},
                   {"Retry-After": f"{max(retry_after, 0.001):.3f}"})


class QuotaStub(StubServer):
    """The test stub behind a sliding-window quota: ``rpm`` requests per ``window_s``."""

    def __init__(self, rpm: int, window_s: float) -> None:
        super().__init__()
        self.RequestHandlerClass = _QuotaHandler
        self.rpm, self.window_s = rpm, window_s
        self.lock = threading.Lock()
        self.window: list[float] = []
        self.log: list[tuple[float, int]] = []  # (monotonic time, status) of every request

    def reset(self) -> None:
        with self.lock:
            self.window.clear()
            self.log.clear()


def agents_graph(nodes: int) -> dict[str, Any]:
    items = [{"id": "t", "type": "manual_trigger", "name": "Start", "data": {}}]
    edges = []
    for i in range(nodes):
        items.append({"id": f"a{i}", "type": "llm_completion", "name": f"Model {i}",
                      "data": {"prompt": f"question {i}", "model": MODEL},
                      "settings": {"retry": {"max_attempts": 3, "initial_interval_s": 1}}})
        edges.append({"id": f"e{i}", "source": "t", "sourceHandle": "output", "target": f"a{i}",
                      "targetHandle": "input", "data": {"channel": "flow"}})
    return {"id": f"bench-flow-{nodes}", "nodes": items, "edges": edges}


FREE_GRAPH = {"id": "bench-flow-free", "nodes": [
    {"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
    {"id": "s", "type": "bench_sleep", "name": "Free", "data": {"delay_s": 0}}],
    "edges": [{"id": "e", "source": "t", "sourceHandle": "output", "target": "s", "targetHandle": "input",
               "data": {"channel": "flow"}}]}


class Harness:
    def __init__(self, url: str, lanes: int | None = None) -> None:
        from orchestrator.queue.app import make_celery
        from orchestrator.queue.dispatch import make_dispatch
        from orchestrator.service.plugins import load_registry
        from orchestrator.settings import Settings
        from orchestrator.store.redis_store import RedisRunStore

        settings = Settings(node_paths=str(PACK), node_lease_s=LEASE_S,
                            **({"lanes": lanes} if lanes is not None else {}))
        self.registry = load_registry(settings)
        self.store = RedisRunStore.from_url(url, settings)
        self.app = make_celery(url, settings)
        self.dispatch = make_dispatch(self.app)
        self.settings = settings
        self._sweeping: asyncio.Task[None] | None = None

    def sweep(self) -> None:
        """The sweeper a deployment runs (``orchestrator sweeper``): lost leases, lost sends."""
        from orchestrator.service.sweeper import Sweeper

        sweeper = Sweeper(self.store, self.dispatch, self.settings)
        self._sweeping = asyncio.ensure_future(sweeper.run_forever(SWEEP_PERIOD_S))

    async def start(self, graph: dict[str, Any]) -> str:
        from orchestrator.service.runs import RunRequest, start_run

        return await start_run(self.store, self.registry, graph, RunRequest({}, deadline_s=3600),
                               dispatch=self.dispatch)

    async def finish(self, run_id: str) -> dict[str, int]:
        """Wait for the run's end; count its node events by type."""
        counts: dict[str, int] = {}
        after, status = "0-0", ""
        while not status:
            for event_id, event in await self.store.read_events(run_id, after=after, count=5000, block_ms=1000):
                after = event_id
                counts[event.event_type] = counts.get(event.event_type, 0) + 1
                if not event.node_id and event.event_type in EventType.TERMINAL:
                    status = event.event_type
        if status != EventType.RUN_COMPLETED:
            raise RuntimeError(f"run {run_id} ended {status}: {(await self.store.get_run(run_id)).error}")
        return counts

    async def free_latency_ms(self) -> float:
        started = time.monotonic()
        await self.finish(await self.start(FREE_GRAPH))
        return round((time.monotonic() - started) * 1000, 1)

    async def close(self) -> None:
        if self._sweeping is not None:
            self._sweeping.cancel()
            await asyncio.gather(self._sweeping, return_exceptions=True)
        await self.store.close()
        self.app.close()


def quota_figures(log: list[tuple[float, int]], rpm: int, window_s: float, settle_s: float) -> dict[str, Any]:
    ok = [t for t, s in log if s == 200]
    refused = [t for t, s in log if s == 429]
    first = log[0][0]
    late = [(t, s) for t, s in log if t >= first + settle_s]
    span_s = ok[-1] - ok[0] if len(ok) > 1 else 0.0
    rate = (len(ok) - 1) / span_s * window_s if span_s else 0.0
    return {"calls": len(log), "succeeded": len(ok), "provider_429": len(refused),
            "elapsed_s": round(log[-1][0] - first, 1),
            "throughput_per_window": round(rate, 1), "share_of_quota": round(rate / rpm, 3),
            "calls_after_first_window": len(late),
            "provider_429_after_first_window": sum(1 for _, s in late if s == 429),
            "share_429_after_first_window": round(sum(1 for _, s in late if s == 429) / len(late), 4)
            if late else None,
            "share_429_overall": round(len(refused) / len(log), 4)}


async def phase(url: str, stub: QuotaStub, nodes: int, *, free_probe: bool) -> dict[str, Any]:
    harness = Harness(url)
    harness.sweep()
    try:
        if free_probe:
            await harness.free_latency_ms()  # warm-up: plans, connections, imports
        baseline_ms = await harness.free_latency_ms() if free_probe else None
        stub.reset()
        run_id = await harness.start(agents_graph(nodes))
        started_phase = time.monotonic()
        free_ms = steady_ms = None
        if free_probe:
            while len(stub.log) < min(nodes, 50):  # the agents are calling and waiting by now
                await asyncio.sleep(0.2)
            await asyncio.sleep(2)
            free_ms = await harness.free_latency_ms()  # while every model node makes its first try
            await asyncio.sleep(max(0.0, started_phase + STEADY_AFTER_S - time.monotonic()))
            steady_ms = await harness.free_latency_ms()  # every model node parked on its reservation
        counts = await harness.finish(run_id)
        out = quota_figures(stub.log, stub.rpm, stub.window_s, stub.window_s)
        out["throttled_events"] = counts.get(EventType.THROTTLED, 0)
        out["retry_events"] = counts.get(EventType.RETRY, 0)
        out["agents_completed"] = counts.get(EventType.COMPLETED, 0) - 1  # minus the trigger
        if free_probe:
            out["free_node_ms_during_first_tries"] = free_ms
            out[f"free_node_ms_at_{STEADY_AFTER_S:.0f}s_all_waiting"] = steady_ms
            out["free_node_ms_idle_baseline"] = baseline_ms
        return out
    finally:
        await harness.close()


def flood_graph(nodes: int, delay_s: float) -> dict[str, Any]:
    items = [{"id": "t", "type": "manual_trigger", "name": "Start", "data": {}}]
    edges = []
    for i in range(nodes):
        items.append({"id": f"s{i}", "type": "bench_sleep", "name": f"S{i}", "data": {"delay_s": delay_s}})
        edges.append({"id": f"e{i}", "source": "t", "sourceHandle": "output", "target": f"s{i}",
                      "targetHandle": "input", "data": {"channel": "flow"}})
    return {"id": "bench-flood", "nodes": items, "edges": edges}


SMALL_GRAPH = {"id": "bench-small", "nodes": [
    {"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
    {"id": "a", "type": "bench_sleep", "name": "A", "data": {"delay_s": 0}},
    {"id": "b", "type": "bench_sleep", "name": "B", "data": {"delay_s": 0}}],
    "edges": [{"id": "e1", "source": "t", "sourceHandle": "output", "target": "a", "targetHandle": "input",
               "data": {"channel": "flow"}},
              {"id": "e2", "source": "a", "sourceHandle": "output", "target": "b", "targetHandle": "input",
               "data": {"channel": "flow"}}]}


ONE_NODE = {"id": "bench-one", "nodes": [{"id": "s", "type": "bench_sleep", "name": "S", "data": {"delay_s": 1.0}}],
            "edges": []}


async def broker_backlog(harness: Harness) -> int:
    """Node messages waiting on the broker, every lane (what b's could be queued behind)."""
    from orchestrator.queue.lanes import lane_queues

    async with harness.store.redis.pipeline(transaction=False) as pipe:
        for queue in lane_queues(harness.settings.lanes):
            pipe.llen(queue)
        return sum(int(n) for n in await pipe.execute())


async def fairness(url: str, flood: int, delay_s: float, shape: str, lanes: int) -> dict[str, Any]:
    """``shape`` ``fanout``: the flood is two runs fanned out; ``runs``: ``flood`` runs of one
    node each (every one a node message on the broker queue). ``lanes`` 1: one FIFO queue
    (b's messages behind a's); more: a's and b's runs on lanes of their own (workspaces
    ``a`` and ``b`` hash to different lanes of 8)."""
    from orchestrator.queue.lanes import lane_of, new_run_id
    from orchestrator.service.runs import RunRequest, start_run

    harness = Harness(url, lanes)
    harness.sweep()

    async def small() -> float:
        started = time.monotonic()
        run_id = await start_run(harness.store, harness.registry, SMALL_GRAPH,
                                 RunRequest({}, meta={"workspace": "b"}), dispatch=harness.dispatch)
        await harness.finish(run_id)
        return round(time.monotonic() - started, 3)

    try:
        await small()  # warm-up
        idle_s = await small()
        started = time.monotonic()
        if shape == "fanout":
            bigs = [await start_run(harness.store, harness.registry, flood_graph(part, delay_s),
                                    RunRequest({}, meta={"workspace": "a"}, deadline_s=3600),
                                    dispatch=harness.dispatch)
                    for part in (flood // 2, flood - flood // 2)]  # a graph has at most 5,000 nodes
        else:
            one = {**ONE_NODE, "nodes": [{**ONE_NODE["nodes"][0], "data": {"delay_s": delay_s}}]}
            bigs = []
            for first in range(0, flood, START_BATCH):  # many clients at once: the backlog builds
                bigs += await asyncio.gather(*(
                    start_run(harness.store, harness.registry, one,
                              RunRequest({}, start=["s"], meta={"workspace": "a"}, deadline_s=3600),
                              dispatch=harness.dispatch) for _ in range(first, min(flood, first + START_BATCH))))
        await asyncio.sleep(2.0)  # the flood is under way
        backlog = await broker_backlog(harness)
        during_s = await small()
        for big in bigs:
            await harness.finish(big)
        return {"flood_shape": shape, "lanes": lanes,
                "same_lane": lane_of(new_run_id("a"), lanes) == lane_of(new_run_id("b"), lanes),
                "small_run_s_during_flood": during_s, "small_run_s_idle_baseline": idle_s,
                "a_messages_queued_at_b_start": backlog,
                "flood_s": round(time.monotonic() - started, 1), "flood_nodes": flood,
                "flood_node_delay_s": delay_s}
    finally:
        await harness.close()


GCRA_VS_LOG = """
local now = tonumber(redis.call('TIME')[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 60)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  return 0
end
return 1
"""


async def limiter_figures(url: str, calls: int = 5000) -> dict[str, Any]:
    from redis.asyncio import Redis

    from orchestrator.kernel.limits import LimitRequest
    from orchestrator.store.keys import Keys
    from orchestrator.store.limits import RateLimiter

    redis = Redis.from_url(url)
    try:
        limiter = RateLimiter(redis, Keys("benchflow"))
        quota = LimitRequest("gcra", rate=100_000, per_s=60)
        log_script = redis.register_script(GCRA_VS_LOG)
        out: dict[str, Any] = {}
        for name, call in (("gcra_us", lambda i: limiter.take([quota], holder=f"h{i}")),
                           ("sliding_log_us", lambda i: log_script(keys=["benchflow:log"],
                                                                    args=[100_000, f"m{i}"]))):
            for i in range(200):
                await call(i)  # warm-up
            started = time.perf_counter()
            for i in range(calls):
                await call(i + 1000)
            out[name] = round((time.perf_counter() - started) / calls * 1e6, 1)
        out["gcra_key_bytes"] = await redis.memory_usage(Keys("benchflow").limit("gcra"))
        out["sliding_log_key_bytes"] = await redis.memory_usage("benchflow:log")
        out["units_in_log"] = await redis.zcard("benchflow:log")
        return out
    finally:
        await redis.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rpm", type=int, default=600)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="node steps per worker process")
    parser.add_argument("--flood", type=int, default=5000)
    parser.add_argument("--flood-delay-s", type=float, default=2.0,
                        help="each flood node's sleep: long enough that the flood's messages back up")
    parser.add_argument("--lanes", type=int, default=8, help="lanes of the fair phase (beside 1, the baseline)")
    parser.add_argument("--shapes", default="fanout,runs", help="fairness flood shapes")
    parser.add_argument("--phases", default="limiter,fairness,declared,adaptive")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    phases = args.phases.split(",")
    result: dict[str, Any] = {}
    with EmbeddedRedis(unix_socket=False) as server, QuotaStub(args.rpm, args.window_s) as stub:
        base_env = {"ORCH_NODE_PATHS": str(PACK), "ORCH_OPENAI_BASE_URL": stub.base_url,
                    "OPENAI_API_KEY": "sk-bench", "ORCH_NODE_LEASE_S": str(LEASE_S)}
        if "limiter" in phases:
            result["limiter"] = asyncio.run(limiter_figures(server.url))
            print(f"limiter: {result['limiter']}", file=sys.stderr)
        if "fairness" in phases:
            for lanes in (1, args.lanes):  # the unfair baseline (one queue) first, in the same run
                env = {**base_env, "ORCH_LANES": str(lanes)}
                with WorkerProcesses(server.url, count=WORKERS, pool="threads", concurrency=CONCURRENCY, env=env):
                    for shape in args.shapes.split(","):
                        name = f"fairness_{shape}_lanes{lanes}"
                        result[name] = asyncio.run(fairness(server.url, args.flood, args.flood_delay_s, shape, lanes))
                        print(f"{name}: {result[name]}", file=sys.stderr)
        for name in ("declared", "adaptive"):
            if name not in phases:
                continue
            env = dict(base_env)
            if name == "declared":
                env["ORCH_MODEL_LIMITS"] = json.dumps({stub.base_url: {"rpm": args.rpm}})
            # a fresh key prefix per phase: what the first phase taught is not the second's
            env["ORCH_KEY_PREFIX"] = f"b{uuid.uuid4().hex[:6]}"
            os.environ["ORCH_KEY_PREFIX"] = env["ORCH_KEY_PREFIX"]
            with WorkerProcesses(server.url, count=WORKERS, pool="threads", concurrency=args.concurrency, env=env):
                result[name] = asyncio.run(phase(server.url, stub, args.nodes, free_probe=name == "declared"))
            print(f"{name}: {result[name]}", file=sys.stderr)
    result["config"] = {"nodes": args.nodes, "rpm": args.rpm, "window_s": args.window_s,
                        "workers": f"{WORKERS} processes, -P threads -c {args.concurrency} (model phases), "
                                   f"-c {CONCURRENCY} (fairness)",
                        "python": platform.python_version(), "cpus": os.cpu_count(),
                        "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or RESULTS / f"flow_control-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
