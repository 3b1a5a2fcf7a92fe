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
  unfair baseline) and once with ``--lanes`` lanes, in the same run of the script; then, with
  ``--lanes`` lanes, a flooder and a victim that hashing puts on one lane (``ws-3``, ``ws-8``):
  their runs on their hash lane (the lanes of old, forced through the run ids) and on the
  lanes assigned to them (``orchestrator/store/lanes.py``).
* ``weights`` (not in the default phases): workspaces ``heavy`` and ``light`` each start
  ``--weight-flood`` one-node runs of ``--flood-delay-s``, in alternate batches; when the first
  of them is done, how many runs of each are done: heavy of weight 1 (the baseline: even
  shares), then of ``--weight`` (``ORCH_WORKSPACE_LIMITS``: that many lanes, so that many turns).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.kernel.protocol import EventType  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses  # noqa: E402
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
    def __init__(self, url: str, lanes: int | None = None, workspace_limits: str = "") -> None:
        from orchestrator.queue.app import make_celery
        from orchestrator.queue.dispatch import make_dispatch
        from orchestrator.service.plugins import load_registry
        from orchestrator.settings import Settings
        from orchestrator.store.redis_store import RedisRunStore

        settings = Settings(node_paths=str(PACK), node_lease_s=LEASE_S, workspace_limits=workspace_limits,
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


# Two workspaces hashing puts on one lane of 8 (crc32 mod 256 mod 8): the assigned-lanes rows
COLLIDING = ("ws-3", "ws-8")


@dataclass(frozen=True)
class FairnessCase:
    """One fairness measurement: ``flooder`` floods, then ``victim`` starts its 3-node run.
    ``hashed``: both take their workspace's hash lane (the lanes of old: each run id chosen
    as ``new_run_id(workspace)``), else the lanes assigned to them (``store/lanes.py``)."""

    flood: int
    delay_s: float
    shape: str
    lanes: int
    flooder: str = "a"
    victim: str = "b"
    hashed: bool = False
    samples: int = 1  # the victim's runs measured during the flood, one after another


async def fairness(url: str, case: FairnessCase) -> dict[str, Any]:
    """``case.shape`` ``fanout``: the flood is two runs fanned out; ``runs``: ``case.flood``
    runs of one node each (every one a node message on the broker queue). ``lanes`` 1: one
    FIFO queue (the victim's messages behind the flood's); more: on lanes of their own,
    unless hashing put both on one (``hashed`` with a colliding pair)."""
    from orchestrator.queue.lanes import lane_of, new_run_id
    from orchestrator.service.runs import RunRequest, start_run

    harness = Harness(url, case.lanes)
    harness.sweep()

    def request(workspace: str, **options: Any) -> RunRequest:
        return RunRequest({}, meta={"workspace": workspace}, run_id=new_run_id(workspace) if case.hashed else None,
                          **options)

    async def small() -> tuple[float, str]:
        started = time.monotonic()
        run_id = await start_run(harness.store, harness.registry, SMALL_GRAPH, request(case.victim),
                                 dispatch=harness.dispatch)
        await harness.finish(run_id)
        return round(time.monotonic() - started, 3), run_id

    try:
        await small()  # warm-up
        idle_s, _ = await small()
        started = time.monotonic()
        if case.shape == "fanout":
            bigs = [await start_run(harness.store, harness.registry, flood_graph(part, case.delay_s),
                                    request(case.flooder, deadline_s=3600), dispatch=harness.dispatch)
                    for part in (case.flood // 2, case.flood - case.flood // 2)]  # at most 5,000 nodes a graph
        else:
            one = {**ONE_NODE, "nodes": [{**ONE_NODE["nodes"][0], "data": {"delay_s": case.delay_s}}]}
            bigs = []
            for first in range(0, case.flood, START_BATCH):  # many clients at once: the backlog builds
                bigs += await asyncio.gather(*(
                    start_run(harness.store, harness.registry, one, request(case.flooder, start=["s"], deadline_s=3600),
                              dispatch=harness.dispatch)
                    for _ in range(first, min(case.flood, first + START_BATCH))))
        await asyncio.sleep(2.0)  # the flood is under way
        backlog = await broker_backlog(harness)
        during_s, victim_run = await small()
        more_s = [(await small())[0] for _ in range(case.samples - 1)]  # one after another, the flood still on
        for big in bigs:
            await harness.finish(big)
        return {"flood_shape": case.shape, "lanes": case.lanes, "flooder": case.flooder, "victim": case.victim,
                "lanes_by": "hash" if case.hashed else "assignment",
                "same_lane": lane_of(victim_run, case.lanes) in {lane_of(big, case.lanes) for big in bigs},
                "small_run_s_during_flood": during_s, "small_run_s_during_flood_then": more_s,
                "small_run_s_idle_baseline": idle_s, "a_messages_queued_at_b_start": backlog,
                "flood_s": round(time.monotonic() - started, 1), "flood_nodes": case.flood,
                "flood_node_delay_s": case.delay_s}
    finally:
        await harness.close()


async def weighted(url: str, flood: int, delay_s: float, weight: int) -> dict[str, Any]:
    """Workspaces ``heavy`` (of ``weight``) and ``light`` (1) each start ``flood`` one-node
    runs, in alternate batches; when the first of them has all its runs done, how many of
    each's runs are done (a saturated cluster serves ``weight`` turns of heavy's per light's)."""
    from orchestrator.service.runs import RunRequest, start_run, workspace_lanes

    limits = json.dumps({"heavy": {"weight": weight}}) if weight > 1 else ""
    harness = Harness(url, 8, limits)
    harness.sweep()
    one = {**ONE_NODE, "id": f"bench-weighted-{weight}",
           "nodes": [{**ONE_NODE["nodes"][0], "data": {"delay_s": delay_s}}]}
    runs: dict[str, list[str]] = {"heavy": [], "light": []}
    try:
        started = time.time()
        for first in range(0, flood, START_BATCH):
            for workspace in runs:
                runs[workspace] += await asyncio.gather(*(
                    start_run(harness.store, harness.registry, one,
                              RunRequest({}, start=["s"], meta={"workspace": workspace}, deadline_s=3600),
                              dispatch=harness.dispatch) for _ in range(first, min(flood, first + START_BATCH))))
        ends: dict[str, list[float]] = {}
        for workspace, ids in runs.items():
            for run_id in ids:
                await harness.finish(run_id)
            ends[workspace] = sorted([float((await harness.store.get_run(run_id)).finished_at or 0) for run_id in ids])
        first_done = min(times[-1] for times in ends.values())
        table = await workspace_lanes(harness.store).assigner.table()
        return {"weight": weight, "flood_runs_each": flood, "flood_node_delay_s": delay_s,
                "lanes": {ws: list(table.get(ws, ())) for ws in runs},
                "all_done_s": {ws: round(times[-1] - started, 1) for ws, times in ends.items()},
                "done_when_first_finished": {ws: sum(t <= first_done for t in times) for ws, times in ends.items()}}
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
    parser.add_argument("--samples", type=int, default=1, help="victim runs measured during each flood")
    parser.add_argument("--weight", type=int, default=3, help="the heavy workspace's weight (phase weights)")
    parser.add_argument("--weight-flood", type=int, default=1500, help="one-node runs of each workspace (weights)")
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
            # the unfair baseline (one queue) first, then the lanes: a and b, and a pair hashing puts
            # on one lane, by hash (the lanes of old) and by assignment, in the same run
            cases = [(1, "a", "b", False), (args.lanes, "a", "b", False), (args.lanes, *COLLIDING, True),
                     (args.lanes, *COLLIDING, False)]
            for lanes in sorted({c[0] for c in cases}):
                env = {**base_env, "ORCH_LANES": str(lanes)}
                with WorkerProcesses(server.url, WorkerConfig(count=WORKERS, pool="threads", concurrency=CONCURRENCY,
                                                              env=env)):
                    for shape in args.shapes.split(","):
                        for _, flooder, victim, hashed in (c for c in cases if c[0] == lanes):
                            by = "hash" if hashed else "assigned"
                            name = f"fairness_{shape}_lanes{lanes}_{flooder}_{victim}_{by}"
                            case = FairnessCase(args.flood, args.flood_delay_s, shape, lanes, flooder, victim, hashed,
                                                args.samples)
                            result[name] = asyncio.run(fairness(server.url, case))
                            print(f"{name}: {result[name]}", file=sys.stderr)
        if "weights" in phases:  # heavy of weight 1 (the same share, the baseline), then of --weight
            env = {**base_env, "ORCH_LANES": "8"}
            with WorkerProcesses(server.url, WorkerConfig(count=WORKERS, pool="threads", concurrency=CONCURRENCY,
                                                          env=env)):
                for weight in (1, args.weight):
                    name = f"weights_heavy{weight}"
                    result[name] = asyncio.run(weighted(server.url, args.weight_flood, args.flood_delay_s, weight))
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
            with WorkerProcesses(server.url, WorkerConfig(count=WORKERS, pool="threads", concurrency=args.concurrency,
                                                          env=env)):
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
