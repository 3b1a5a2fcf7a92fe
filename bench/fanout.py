"""A 50-wide fan-out into one merge through the engine vs a raw Celery chord of 50 no-ops.

Same embedded Redis, one worker process each (``-P threads -c 100``), same run,
interleaved so machine noise hits both alike:

* engine: manual trigger -> 50 ``set_fields`` -> one ``bench_join`` (``bench/pack``); from ``start_run`` to
  the run's terminal event read from its stream;
* celery: ``chord(group(50 x bench.noop), bench.done)`` with the Redis result backend
  (``bench/celery_baseline.py``); from ``apply_async`` until the body pushes to a list.

Prints p50/p95 of both and engine/celery ratios (goal: p50 ratio <= 1.0) and writes the
JSON to ``bench/results/fanout-<time>.json``.

    .venv/bin/python bench/fanout.py [--runs 30] [--warmup 3] [--width 50]
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.chain import summary  # noqa: E402
from bench.concurrency import start_baseline_worker  # noqa: E402
from orchestrator.kernel.protocol import EventType  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PACK = ROOT / "bench" / "pack"


def fanout_merge_graph(width: int) -> dict[str, Any]:
    nodes = [{"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
             {"id": "m", "type": "bench_join", "name": "Join", "data": {}}]
    edges = []
    for i in range(width):
        nodes.append({"id": f"b{i}", "type": "set_fields", "name": f"Branch {i}",
                      "data": {"fields": {"i": i}}})
        edges.append({"id": f"in{i}", "source": "t", "sourceHandle": "output", "target": f"b{i}",
                      "targetHandle": "input", "data": {"channel": "flow"}})
        edges.append({"id": f"out{i}", "source": f"b{i}", "sourceHandle": "output", "target": "m",
                      "targetHandle": "input", "data": {"channel": "flow"}})
    return {"id": "bench-fanout", "nodes": nodes, "edges": edges}


async def bench(url: str, runs: int, warmup: int, width: int) -> dict[str, Any]:
    import redis.asyncio as aioredis
    from celery import chord, group

    from bench.celery_baseline import DONE_TASK, NOOP_TASK, QUEUE
    from bench.celery_baseline import app as raw_app
    from orchestrator.cli.serve_cmd import settle_heap
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    registry = load_registry(Settings(node_paths=str(PACK)))
    store = RedisRunStore.from_url(url, Settings())
    client = aioredis.Redis.from_url(url, decode_responses=True)
    app = make_celery(url, Settings())
    dispatch = make_dispatch(app)
    graph = fanout_merge_graph(width)
    settle_heap()  # this process starts runs as the API does: its collector set as the API's

    async def engine_once() -> float:
        t0 = time.perf_counter()
        run_id = await start_run(store, registry, graph, RunRequest({"x": 1}), dispatch=dispatch)
        after = "0-0"
        while True:
            for event_id, event in await store.read_events(run_id, after=after, count=1000, block_ms=10_000):
                after = event_id
                if not event.node_id and event.event_type in EventType.TERMINAL:
                    if event.event_type != EventType.RUN_COMPLETED:
                        raise RuntimeError(f"bench run ended {event.event_type}: {event.data}")
                    return time.perf_counter() - t0

    async def celery_once() -> float:
        key = f"bench:chord:{uuid.uuid4().hex}"
        header = group(raw_app.signature(NOOP_TASK, queue=QUEUE) for _ in range(width))
        body = raw_app.signature(DONE_TASK, kwargs={"key": key}, queue=QUEUE)
        t0 = time.perf_counter()
        chord(header)(body)
        if await client.blpop([key], timeout=20) is None:
            raise RuntimeError("celery chord did not finish within 20 s")
        return time.perf_counter() - t0

    try:
        for _ in range(warmup):
            await engine_once()
            await celery_once()
        engine: list[float] = []
        raw: list[float] = []
        for i in range(runs):
            if i % 2:
                engine.append(await engine_once())
                raw.append(await celery_once())
            else:
                raw.append(await celery_once())
                engine.append(await engine_once())
    finally:
        await store.close()
        await client.aclose()
        app.close()
    e, c = summary(engine), summary(raw)
    return {f"engine_fanout{width}": e, f"celery_chord{width}": c,
            "ratio_p50": round(e["p50_ms"] / c["p50_ms"], 3),
            "ratio_p95": round(e["p95_ms"] / c["p95_ms"], 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--width", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=100, help="threads of each worker process")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with EmbeddedRedis(unix_socket=False) as server:
        os.environ["BENCH_REDIS_URL"] = server.url  # read when bench.celery_baseline is imported
        os.environ["BENCH_RESULT_BACKEND"] = "1"  # the chord needs one (the worker inherits it)
        baseline = start_baseline_worker(server.url, args.concurrency)
        try:
            with WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=args.concurrency,
                                                          env={"ORCH_NODE_PATHS": str(PACK)})):
                result = asyncio.run(bench(server.url, args.runs, args.warmup, args.width))
        finally:
            os.killpg(baseline.pid, 15)
            baseline.wait(30)
    result["config"] = {"runs": args.runs, "warmup": args.warmup, "width": args.width,
                        "workers": f"1 process each, -P threads -c {args.concurrency}",
                        "redis": "embedded, TCP", "python": platform.python_version(),
                        "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or RESULTS / f"fanout-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(f"ratio engine/celery chord: p50 {result['ratio_p50']}x, p95 {result['ratio_p95']}x "
          f"(goal <= 1.0x) -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
