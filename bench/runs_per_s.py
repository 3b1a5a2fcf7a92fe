"""Runs per second of light graphs with 1, 2 and 4 worker processes, beside raw Celery of
the same shapes on as many processes, in one run; CPU per run split by process.

    .venv/bin/python bench/runs_per_s.py [--seconds 3] [--lanes 16] [--workers 1,2,4]
                                         [--shapes one,chain10,fanout50]
                                         [--worker-cores 0.4] [--rounds 1]

Shapes: ``one`` (a trigger alone), ``chain10`` (trigger + 9 set_fields), ``fanout50``
(trigger -> 50 set_fields -> the bench pack's join). Stored starts resolve a trigger with
one successor at the start, as the API's do (``orchestrator/kernel/start.py``): a ``one``
run ends at its start with no worker step, a ``chain10`` run's first message is its first
set_fields; ``fanout50``'s trigger (50 successors) is a step. Raw Celery: one task; a chain of 9
no-ops and a done task; a chord of 50 no-ops into a done task (its result backend on the
same Redis), run by ``bench.celery_baseline`` workers (``-P threads``). The engine's
workers are the shipped default (``orchestrator worker``, ``-P threads``, node
concurrency from the settings).

Each point keeps ``--lanes`` runs in flight for ``--seconds``, with the other side's worker
processes stopped (:func:`paused`) (a lane starts its next
run when its last one ended: engine runs start in this process, which is the API's work,
and end at their terminal event, found without decoding the nodes' events, as raw Celery's
runs end at one ``BLPOP``) and counts the runs that ended. Engine runs are runs of
stored graphs started as the API starts them (``runs.start_stored``: the version's
cached plan, the async dispatcher); ``--starts adhoc`` starts the graph JSON through
``runs.start_run`` instead (validated and compiled once per graph content, its runs'
messages carrying the plan reference, since 2026-11-29; compiled per run before). CPU
per run is each process's user+system CPU over the point divided by the runs:
``starter`` (this process: starts and waits), ``workers`` (all worker processes) and
``redis``; the workers' CPU also by thread (:func:`thread_split`); with more than one
worker process, ``workers_cpu_share`` is each one's share of the workers' CPU (how a
burst of one run's nodes split between them). ``redis_per_run``: the commands Redis ran
(the scripts' own calls included) and its reads of its clients' sockets per run (``INFO
stats``): how many batches the run's commands came in; ``redis_us_per_call``: for the
commands Redis spent most time in, the microseconds each call took (``INFO
commandstats``; a script's own commands are counted in its time too): the same commands
cost more when the processes crowd the cores.
``cores``: the CPU all those processes got over the point, in cores: on a shared machine,
more worker processes only help while this can grow; ``cores_elsewhere``: what the rest
of the machine ran meanwhile (``/proc/stat``: its services, the kernel's threads).
``ceiling_vs_1_worker`` (engine and raw Celery, each point): the most the point's runs/s
could be over one worker's, had its processes used every core the rest of the machine
left them, at the CPU per run they spent (:func:`ceiling`): when the starter and Redis
share the cores with the workers, this bounds what more worker processes can show (with
``--worker-cores``, the caps bind first).
``--worker-cores C`` caps each worker process (the engine's and raw Celery's alike) at C
cores, each in a cgroup of its own (``bench/cpu_quota.py``, root): one worker's point is
then bound by its share, as on a machine with a core per worker, and the starter and
Redis have room beside the workers, so that N workers can show how the engine scales
with worker processes (on 2 cores, the starter and Redis take what a second uncapped
worker would need).

``--rounds R`` measures every point R times, a round after another (each starts its
workers anew, on the same Redis, emptied between rounds: :func:`fresh_redis`), and adds
``summary``: per shape and worker count, the median runs/s, and the median and range of
``engine_vs_1_worker``, of the engine's ``ceiling_vs_1_worker`` and of the ratio to raw
Celery, each taken within its round. This machine's speed drifts by a fifth or more
from minute to minute: a ratio of two points measured a minute apart is noise unless
several rounds agree.

Prints JSON, and writes it to ``bench/results/runs-per-s-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench.chain import chain_graph  # noqa: E402
from bench.concurrency import start_baseline_worker  # noqa: E402
from bench.cpu_quota import CpuQuotas  # noqa: E402
from bench.fanout import PACK, fanout_merge_graph  # noqa: E402
from bench.throughput import NamedWorkers  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig  # noqa: E402

RESULTS = ROOT / "bench" / "results"
TICKS_S = os.sysconf("SC_CLK_TCK")
RUN_EVENT = re.compile(r'"event_type":\s*"run_')  # in the text of every run event, in no node event's
BASELINE_THREADS = 100


def cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS_S


def machine_busy_s() -> float:
    """CPU seconds the whole machine was busy since boot, all cores (``/proc/stat``: user,
    nice, system, irq, softirq and steal time; not idle or iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields[0:3]) + sum(fields[5:8])) / TICKS_S


def one_graph() -> dict[str, Any]:
    return {"id": "bench-one", "nodes": [{"id": "t", "type": "manual_trigger", "name": "Start", "data": {}}],
            "edges": []}


@dataclass(frozen=True)
class Starter:
    """What ``runs.start_stored`` needs (``orchestrator.service.runs.Starter``), as the API has it."""

    redis: Any
    settings: Any
    registry: Any
    graphs: Any
    run_store: Any
    dispatch: Any


def thread_cpu_s(pids: list[int]) -> dict[tuple[int, int], float]:
    """User+system CPU seconds of every thread of ``pids``, by (pid, thread id)."""
    out: dict[tuple[int, int], float] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:
                continue
            out[(pid, int(tid))] = (int(fields[11]) + int(fields[12])) / TICKS_S
    return out


def thread_split(before: dict[tuple[int, int], float], after: dict[tuple[int, int], float],
                 runs: int) -> dict[str, float]:
    """Worker CPU ms per run by thread: each process's main thread (Celery's consumer: the
    broker, acks, handing tasks to the pool), its busiest other thread (the engine's event
    loop, which runs the node steps; a raw Celery worker's busiest pool thread), the rest."""
    spent = {key: cpu - before.get(key, 0.0) for key, cpu in after.items()}
    main = sum(c for (pid, tid), c in spent.items() if pid == tid)
    busiest: dict[int, float] = {}
    for (pid, tid), c in spent.items():
        if pid != tid:
            busiest[pid] = max(busiest.get(pid, 0.0), c)
    rest = sum(spent.values()) - main - sum(busiest.values())
    return {name: round(c * 1000 / max(runs, 1), 2)
            for name, c in (("main", main), ("busiest_other", sum(busiest.values())), ("rest", rest))}


async def redis_counts(client: Any) -> dict[str, int]:
    """Redis's counters of commands it ran (scripts count as one) and of reads from its
    clients' sockets (``INFO stats``): per run, how many commands and how many batches;
    and each command's calls and microseconds (``INFO commandstats``, as ``calls:<name>``
    and ``usec:<name>``)."""
    stats = await client.info("stats")
    counts = {"commands": int(stats.get("total_commands_processed", 0)),
              "reads": int(stats.get("total_reads_processed", 0))}
    for name, stat in (await client.info("commandstats")).items():
        command = name.removeprefix("cmdstat_")
        counts[f"calls:{command}"], counts[f"usec:{command}"] = int(stat["calls"]), int(stat["usec"])
    return counts


US_PER_CALL_TOP = 6  # commands reported in ``redis_us_per_call``


def us_per_call(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
    """Microseconds per call of the ``US_PER_CALL_TOP`` commands Redis spent most time in
    between two :func:`redis_counts`."""
    spent = {key[5:]: after[key] - before.get(key, 0) for key in after if key.startswith("usec:")}
    top = sorted((c for c in spent if spent[c] > 0), key=lambda c: -spent[c])[:US_PER_CALL_TOP]
    return {c: round(spent[c] / max(after[f"calls:{c}"] - before.get(f"calls:{c}", 0), 1), 2) for c in top}


async def point(run_once: Callable[[], Awaitable[None]], lanes: int, seconds: float,
                pids: dict[str, list[int]], redis: Any = None) -> dict[str, Any]:
    """Runs/s with ``lanes`` in flight for ``seconds``, and CPU ms per run by process; with
    ``redis`` (a client), Redis's commands and socket reads per run (:func:`redis_counts`)."""
    ended = 0
    until = time.monotonic() + seconds

    async def lane() -> None:
        nonlocal ended
        while time.monotonic() < until:
            await run_once()
            ended += 1

    before = {name: cpu_s(p) for name, p in pids.items()}
    before_each = {pid: cpu_s([pid]) for pid in pids.get("workers", [])}
    threads_before = thread_cpu_s(pids.get("workers", []))
    counts_before = await redis_counts(redis) if redis is not None else {}
    busy0, t0 = machine_busy_s(), time.monotonic()
    await asyncio.gather(*(lane() for _ in range(lanes)))
    elapsed, busy = time.monotonic() - t0, machine_busy_s() - busy0
    counts_after = await redis_counts(redis) if redis is not None else {}
    cpu = {name: cpu_s(p) - before[name] for name, p in pids.items()}
    result: dict[str, Any] = {"runs_per_s": round(ended / elapsed, 1),
                              "cpu_ms_per_run": {name: round(c * 1000 / max(ended, 1), 2) for name, c in cpu.items()},
                              "cores": round(sum(cpu.values()) / elapsed, 2),
                              # everything else the machine ran meanwhile (its services, the kernel's threads)
                              "cores_elsewhere": round(max(busy - sum(cpu.values()), 0.0) / elapsed, 2)}
    workers = pids.get("workers", [])
    if len(workers) > 1:  # how the work split between the worker processes (each one's share of their CPU)
        each = [cpu_s([pid]) - before_each[pid] for pid in workers]
        result["workers_cpu_share"] = [round(c / max(sum(each), 1e-9), 2) for c in each]
    if workers:
        result["worker_threads_ms_per_run"] = thread_split(threads_before, thread_cpu_s(workers), ended)
    if counts_before:
        result["redis_per_run"] = {k: round((counts_after[k] - counts_before[k]) / max(ended, 1), 1)
                                   for k in ("commands", "reads")}
        result["redis_us_per_call"] = us_per_call(counts_before, counts_after)
    return result


@contextlib.contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """The other side's worker processes stopped (SIGSTOP) while a point runs, continued
    after: idle, a raw Celery worker of 100 threads still took about 0.05 of a core (perf
    sched, 2026-11-30), which the point's own processes then lack."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


SHAPES = ("one", "chain10", "fanout50")


@dataclass(frozen=True)
class Points:
    """What each point measures: the shapes, how engine runs start, runs in flight, seconds."""

    shapes: tuple[str, ...] = SHAPES
    starts: str = "stored"
    lanes: int = 16
    seconds: float = 3.0
    worker_cores: float = 0.0  # > 0: each worker process (engine and raw) capped at this many cores


async def measure(url: str, redis_pid: int, worker_steps: list[int], points: Points) -> dict[str, Any]:
    shapes, starts, lanes, seconds = points.shapes, points.starts, points.lanes, points.seconds
    quotas = CpuQuotas(points.worker_cores) if points.worker_cores > 0 else None
    import redis.asyncio as aioredis
    from celery import chain, chord, group

    from bench.celery_baseline import DONE_TASK, NOOP_TASK, QUEUE
    from bench.celery_baseline import app as raw_app
    from orchestrator.api.app import app_redis
    from orchestrator.cli.serve_cmd import settle_heap
    from orchestrator.errors import GraphConflictError
    from orchestrator.kernel.protocol import EventType
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_async_dispatch, make_dispatch
    from orchestrator.service.graph_store import GraphStore
    from orchestrator.service.plugins import load_registry
    from orchestrator.service.runs import RunRequest, StoredGraph, start_run, start_stored
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    registry = load_registry(Settings(node_paths=str(PACK)))
    store = RedisRunStore(app_redis(Settings(), url), Settings())  # the API's client: a blocking pool
    client = aioredis.Redis.from_url(url, decode_responses=True, max_connections=lanes * 2 + 8)
    app = make_celery(url, Settings())
    dispatch = make_dispatch(app)
    every = {"one": one_graph, "chain10": lambda: chain_graph(10), "fanout50": lambda: fanout_merge_graph(50)}
    graphs = {shape: every[shape]() for shape in shapes}
    starter = Starter(store.redis, Settings(), registry, GraphStore(store.redis, registry, Settings()), store,
                      make_async_dispatch(app))
    if starts == "stored":
        for g in graphs.values():
            with contextlib.suppress(GraphConflictError):  # stored by an earlier round (--rounds)
                await starter.graphs.create(g, str(g["id"]))
    settle_heap()  # this process starts runs as the API does: its collector set as the API's

    def engine(g: dict[str, Any]) -> Callable[[], Awaitable[None]]:
        async def once() -> None:
            if starts == "stored":
                run_id = await start_stored(starter, StoredGraph(str(g["id"])), RunRequest({"x": 1}), trigger="bench")
            else:
                run_id = await start_run(store, registry, g, RunRequest({"x": 1}), dispatch=dispatch)
            after = "0-0"
            while True:
                reply: Any = await client.xread({store.keys.events(run_id): after}, count=1000, block=20_000)
                if not reply:
                    raise RuntimeError(f"run {run_id} of {g['id']} did not end within 20 s")
                for entry_id, fields in reply[0][1]:
                    after = entry_id
                    if RUN_EVENT.search(fields["e"]) is None:
                        continue  # a node's event: only the run's own events are read
                    event = json.loads(fields["e"])
                    if not event.get("node_id") and event["event_type"] in EventType.TERMINAL:
                        if event["event_type"] != EventType.RUN_COMPLETED:
                            raise RuntimeError(f"bench run ended {event['event_type']}: {event.get('data')}")
                        return
        return once

    def raw(shape: str) -> Callable[[], Awaitable[None]]:
        async def once() -> None:
            key = f"bench:done:{uuid.uuid4().hex}"
            done = raw_app.signature(DONE_TASK, args=([1],), kwargs={"key": key}, queue=QUEUE, immutable=True)
            if shape == "one":
                done.apply_async()
            elif shape == "chain10":
                chain(*[raw_app.signature(NOOP_TASK, queue=QUEUE, immutable=True) for _ in range(9)], done)()
            else:
                header = group(raw_app.signature(NOOP_TASK, queue=QUEUE) for _ in range(50))
                chord(header)(raw_app.signature(DONE_TASK, kwargs={"key": key}, queue=QUEUE))
            if await client.blpop([key], timeout=20) is None:
                raise RuntimeError(f"raw celery {shape} did not finish within 20 s")
        return once

    engine_groups: list[NamedWorkers] = []
    baselines: list[Any] = []
    results: dict[str, Any] = {}
    try:
        for step, added in enumerate(worker_steps):
            config = WorkerConfig(count=added, env={"ORCH_NODE_PATHS": str(PACK)})
            group_ = NamedWorkers(url, config, prefix=f"e{step}-")
            await asyncio.to_thread(group_.start)
            engine_groups.append(group_)
            added_raw = [start_baseline_worker(url, BASELINE_THREADS) for _ in range(added)]
            baselines += added_raw
            if quotas is not None:
                for pid in [*group_.pids, *(p.pid for p in added_raw)]:
                    quotas.limit(pid)
            await asyncio.sleep(2.0)  # the baseline workers connect
            workers = sum(g_.count for g_ in engine_groups)
            engine_pids = [pid for g_ in engine_groups for pid in g_.pids]
            raw_pids = [p.pid for p in baselines]
            common = {"starter": [os.getpid()], "redis": [redis_pid]}
            for shape, g in graphs.items():
                with paused(raw_pids):
                    await point(engine(g), lanes, 0.5, {})  # warm every process and the caches
                    e = await point(engine(g), lanes, seconds, {**common, "workers": engine_pids}, client)
                with paused(engine_pids):
                    await point(raw(shape), lanes, 0.5, {})
                    r = await point(raw(shape), lanes, seconds, {**common, "workers": raw_pids}, client)
                results.setdefault(shape, {})[str(workers)] = {
                    "engine": e, "raw_celery": r, "ratio": round(e["runs_per_s"] / r["runs_per_s"], 2)}
    finally:
        for group_ in engine_groups:
            await asyncio.to_thread(group_.stop)
        for proc in baselines:
            os.killpg(proc.pid, 15)
            proc.wait(30)
        await starter.dispatch.aclose()
        app.close()
        await store.close()
        await client.aclose()
        if quotas is not None:
            quotas.close()
    for by_workers in results.values():
        first = by_workers[str(worker_steps[0])]
        for entry in by_workers.values():
            entry["engine_vs_1_worker"] = round(entry["engine"]["runs_per_s"] / first["engine"]["runs_per_s"], 2)
            for side in ("engine", "raw_celery"):
                entry[side]["ceiling_vs_1_worker"] = ceiling(entry[side], first[side]["runs_per_s"])
    return results


def ceiling(at: dict[str, Any], first_runs_per_s: float) -> float:
    """The most a point's runs/s could be, over the first point's (one worker's): its
    processes given every core the rest of the machine left them (``cores_elsewhere``), at
    the CPU per run they spent. On a machine whose cores the starter and Redis share with
    the workers, this is what more worker processes can show at best: a point whose
    ``engine_vs_1_worker`` is near it is bound by the cores, not by the engine."""
    per_run_s = float(sum(at["cpu_ms_per_run"].values())) / 1000
    free = (os.cpu_count() or 1) - float(at["cores_elsewhere"])
    return round(free / max(per_run_s, 1e-9) / max(first_runs_per_s, 1e-9), 2)


def fresh_redis(url: str) -> None:
    """Empty the bench's Redis between rounds (their workers are stopped): every round keeps
    its runs' keys for the retention TTL, and a few rounds of every shape filled the embedded
    Redis's 1 GB (writes refused past it, runs stalled). A round stores its graphs anew."""
    import redis

    with redis.Redis.from_url(url) as client:
        client.flushall()


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per shape and worker count, over the rounds: the median engine runs/s, and the median
    and range of ``engine_vs_1_worker``, of the engine's ``ceiling_vs_1_worker`` and of
    ``ratio`` (to raw Celery), each within its round."""
    out: dict[str, Any] = {}
    for shape, by_workers in rounds[0].items():
        for workers in by_workers:
            points = [r[shape][workers] for r in rounds]
            entry = {"runs_per_s": statistics.median(p["engine"]["runs_per_s"] for p in points)}
            for key, of in (("engine_vs_1_worker", None), ("ceiling_vs_1_worker", "engine"), ("ratio", None)):
                values = sorted((p[of] if of else p)[key] for p in points)
                entry[key] = {"median": round(statistics.median(values), 2), "min": values[0], "max": values[-1]}
            out.setdefault(shape, {})[workers] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--lanes", type=int, default=16)
    parser.add_argument("--workers", default="1,2,4", help="worker process counts, increasing")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="graph shapes to measure, of " + ",".join(SHAPES))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--starts", choices=("stored", "adhoc"), default="stored",
                        help="engine runs of stored graphs (the API's start) or of graph JSON (start_run)")
    parser.add_argument("--rounds", type=int, default=1, help="measure every point this many times, and add "
                                                                   "the medians over the rounds (summary)")
    parser.add_argument("--worker-cores", type=float, default=0.0,
                        help="cap each worker process (engine and raw Celery) at this many cores, each in a "
                             "cgroup of its own (bench/cpu_quota.py; root): how throughput scales with worker "
                             "processes when each has its own share, as on a machine with a core per worker")
    args = parser.parse_args()
    shapes = tuple(args.shapes.split(","))
    if unknown := set(shapes) - set(SHAPES):
        parser.error(f"--shapes: unknown shape(s) {sorted(unknown)}; known: {', '.join(SHAPES)}")
    counts = [int(n) for n in args.workers.split(",")]
    steps = [counts[0]] + [b - a for a, b in pairwise(counts)]
    points = Points(shapes, args.starts, args.lanes, args.seconds, args.worker_cores)
    with EmbeddedRedis(unix_socket=False) as server:
        os.environ["BENCH_REDIS_URL"] = server.url  # read when bench.celery_baseline is imported
        os.environ["BENCH_RESULT_BACKEND"] = "1"  # the chord needs one (the workers inherit it)
        rounds = []
        for _ in range(max(args.rounds, 1)):
            if rounds:  # each round on an empty Redis: the runs kept for their retention would fill it
                fresh_redis(server.url)
            rounds.append(asyncio.run(measure(server.url, server.pid, steps, points)))
    result: dict[str, Any] = dict(rounds[0]) if len(rounds) == 1 else {"rounds": rounds, "summary": summary(rounds)}
    result["config"] = {"seconds": args.seconds, "lanes": args.lanes, "starts": args.starts, "rounds": len(rounds),
                        "worker_cores": args.worker_cores or None,
                        "engine_workers": "-P threads (default)",
                        "raw_workers": f"-P threads -c {BASELINE_THREADS}", "python": platform.python_version(),
                        "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or RESULTS / f"runs-per-s-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
