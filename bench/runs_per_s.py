"""Runs per second of light graphs with 1, 2 and 4 worker processes, beside raw Celery of
the same shapes on as many processes, in one run; CPU per run split by process.

    .venv/bin/python bench/runs_per_s.py [--seconds 3] [--lanes 16] [--workers 1,2,4]

Shapes: ``one`` (a trigger alone), ``chain10`` (trigger + 9 set_fields), ``fanout50``
(trigger -> 50 set_fields -> the bench pack's join). Raw Celery: one task; a chain of 9
no-ops and a done task; a chord of 50 no-ops into a done task (its result backend on the
same Redis), run by ``bench.celery_baseline`` workers (``-P threads``). The engine's
workers are the shipped default (``orchestrator worker``, ``-P threads``, node
concurrency from the settings).

Each point keeps ``--lanes`` runs in flight for ``--seconds`` (a lane starts its next
run when its last one ended: engine runs start through ``runs.start_run`` in this
process, which is the API's work, and end at their terminal event) and counts the runs
that ended. CPU per run is each process's user+system CPU over the point divided by
the runs: ``starter`` (this process: starts and waits), ``workers`` (all worker
processes) and ``redis``.

Prints JSON, and writes it to ``bench/results/runs-per-s-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench.chain import chain_graph  # noqa: E402
from bench.concurrency import start_baseline_worker  # noqa: E402
from bench.fanout import PACK, fanout_merge_graph  # noqa: E402
from bench.throughput import NamedWorkers  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402

RESULTS = ROOT / "bench" / "results"
TICKS_S = os.sysconf("SC_CLK_TCK")
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


def one_graph() -> dict[str, Any]:
    return {"id": "bench-one", "nodes": [{"id": "t", "type": "manual_trigger", "name": "Start", "data": {}}],
            "edges": []}


async def point(run_once: Callable[[], Awaitable[None]], lanes: int, seconds: float,
                pids: dict[str, list[int]]) -> dict[str, Any]:
    """Runs/s with ``lanes`` in flight for ``seconds``, and CPU ms per run by process."""
    ended = 0
    until = time.monotonic() + seconds

    async def lane() -> None:
        nonlocal ended
        while time.monotonic() < until:
            await run_once()
            ended += 1

    before = {name: cpu_s(p) for name, p in pids.items()}
    t0 = time.monotonic()
    await asyncio.gather(*(lane() for _ in range(lanes)))
    elapsed = time.monotonic() - t0
    cpu = {name: cpu_s(p) - before[name] for name, p in pids.items()}
    return {"runs_per_s": round(ended / elapsed, 1),
            "cpu_ms_per_run": {name: round(c * 1000 / max(ended, 1), 2) for name, c in cpu.items()}}


async def measure(url: str, redis_pid: int, worker_steps: list[int], lanes: int, seconds: float) -> dict[str, Any]:
    import redis.asyncio as aioredis
    from celery import chain, chord, group

    from bench.celery_baseline import DONE_TASK, NOOP_TASK, QUEUE
    from bench.celery_baseline import app as raw_app
    from orchestrator.kernel.protocol import EventType
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    registry = load_registry(Settings(node_paths=str(PACK)))
    store = RedisRunStore.from_url(url, Settings())
    client = aioredis.Redis.from_url(url, decode_responses=True, max_connections=lanes * 2 + 8)
    app = make_celery(url, Settings())
    dispatch = make_dispatch(app)
    graphs = {"one": one_graph(), "chain10": chain_graph(10), "fanout50": fanout_merge_graph(50)}

    def engine(g: dict[str, Any]) -> Callable[[], Awaitable[None]]:
        async def once() -> None:
            run_id = await start_run(store, registry, g, RunRequest({"x": 1}), dispatch=dispatch)
            after = "0-0"
            while True:
                reply: Any = await client.xread({store.keys.events(run_id): after}, count=1000, block=20_000)
                if not reply:
                    raise RuntimeError(f"run {run_id} of {g['id']} did not end within 20 s")
                for entry_id, fields in reply[0][1]:
                    after = entry_id
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
            group_ = NamedWorkers(url, prefix=f"e{step}-", count=added, env={"ORCH_NODE_PATHS": str(PACK)})
            await asyncio.to_thread(group_.start)
            engine_groups.append(group_)
            baselines += [start_baseline_worker(url, BASELINE_THREADS) for _ in range(added)]
            await asyncio.sleep(2.0)  # the baseline workers connect
            workers = sum(g_.count for g_ in engine_groups)
            engine_pids = [pid for g_ in engine_groups for pid in g_.pids]
            raw_pids = [p.pid for p in baselines]
            common = {"starter": [os.getpid()], "redis": [redis_pid]}
            for shape, g in graphs.items():
                await point(engine(g), lanes, 0.5, {})  # warm every process and the caches
                await point(raw(shape), lanes, 0.5, {})
                e = await point(engine(g), lanes, seconds, {**common, "workers": engine_pids})
                r = await point(raw(shape), lanes, seconds, {**common, "workers": raw_pids})
                results.setdefault(shape, {})[str(workers)] = {
                    "engine": e, "raw_celery": r, "ratio": round(e["runs_per_s"] / r["runs_per_s"], 2)}
    finally:
        for group_ in engine_groups:
            await asyncio.to_thread(group_.stop)
        for proc in baselines:
            os.killpg(proc.pid, 15)
            proc.wait(30)
        app.close()
        await store.close()
        await client.aclose()
    for by_workers in results.values():
        one = by_workers[str(worker_steps[0])]["engine"]["runs_per_s"]
        for entry in by_workers.values():
            entry["engine_vs_1_worker"] = round(entry["engine"]["runs_per_s"] / one, 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--lanes", type=int, default=16)
    parser.add_argument("--workers", default="1,2,4", help="worker process counts, increasing")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    steps = [counts[0]] + [b - a for a, b in pairwise(counts)]
    with EmbeddedRedis(unix_socket=False) as server:
        os.environ["BENCH_REDIS_URL"] = server.url  # read when bench.celery_baseline is imported
        os.environ["BENCH_RESULT_BACKEND"] = "1"  # the chord needs one (the workers inherit it)
        result = asyncio.run(measure(server.url, server.pid, steps, args.lanes, args.seconds))
    result["config"] = {"seconds": args.seconds, "lanes": args.lanes, "engine_workers": "-P threads (default)",
                        "raw_workers": f"-P threads -c {BASELINE_THREADS}", "python": platform.python_version(),
                        "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or RESULTS / f"runs-per-s-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
