"""Latency of a 10-node chain through the engine vs a raw Celery chain of 10 no-ops.

Both run in the same process against the same embedded Redis and the same worker
process (same Celery settings: acks_late, prefetch 1; the pool is the settings' default,
``-P threads`` unless ``ORCH_WORKER_POOL`` says otherwise, and the JSON's
``config.worker_pool`` names the one the worker ran), interleaved so machine noise hits
both alike:

* engine: manual trigger + 9 set_fields; from ``start_run`` to the run's terminal event
  read from its stream (validation, compilation, storage, 10 node tasks, 10 barriers);
* celery: ``chain`` of 10 ``orchestrator.noop`` tasks; from ``apply_async`` until the last
  one pushes to a Redis list the bench BLPOPs (there is no result backend).

Prints p50/p95 of both and engine/celery ratios (goal: p50 ratio <= 1.0) and writes the
JSON to ``bench/results/chain-<time>.json``.

    .venv/bin/python bench/chain.py [--runs 50] [--warmup 5] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from celery import chain  # noqa: E402

from orchestrator.kernel.protocol import EventType  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses  # noqa: E402

CHAIN_LENGTH = 10
RESULTS = ROOT / "bench" / "results"


def chain_graph(length: int = CHAIN_LENGTH) -> dict[str, Any]:
    nodes = [{"id": "n0", "type": "manual_trigger", "name": "Start", "data": {}}]
    edges = []
    for i in range(1, length):
        nodes.append({"id": f"n{i}", "type": "set_fields", "name": f"Step {i}",
                      "data": {"fields": {f"s{i}": i}}})
        edges.append({"id": f"e{i}", "source": f"n{i - 1}", "sourceHandle": "output",
                      "target": f"n{i}", "targetHandle": "input", "data": {"channel": "flow"}})
    return {"id": "bench-chain", "nodes": nodes, "edges": edges}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(samples_s: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {"p50_ms": round(percentile(ms, 50), 2), "p95_ms": round(percentile(ms, 95), 2),
            "mean_ms": round(statistics.fmean(ms), 2), "min_ms": round(min(ms), 2),
            "max_ms": round(max(ms), 2), "n": len(ms)}


async def celery_chain_once(app: Any, client: Any) -> float:
    """One raw Celery chain of ``CHAIN_LENGTH`` no-op tasks, publish to the last one's
    done key: the baseline every chain bench measures beside the engine."""
    from orchestrator.queue.app import NOOP_TASK

    key = f"bench:done:{uuid.uuid4().hex}"
    links = [app.signature(NOOP_TASK, immutable=True) for _ in range(CHAIN_LENGTH - 1)]
    links.append(app.signature(NOOP_TASK, kwargs={"done_key": key}, immutable=True))
    t0 = time.perf_counter()
    chain(*links).apply_async()
    if await client.blpop([key], timeout=10) is None:
        raise RuntimeError("celery chain did not finish within 10 s")
    return time.perf_counter() - t0


async def bench(url: str, runs: int, warmup: int) -> dict[str, Any]:
    import redis.asyncio as aioredis

    from orchestrator.cli.serve_cmd import settle_heap
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import get_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings, load_settings
    from orchestrator.store.redis_store import RedisRunStore

    registry = get_registry(load_settings())
    store = RedisRunStore.from_url(url, Settings())
    client = aioredis.Redis.from_url(url, decode_responses=True)
    app = make_celery(url, Settings())
    dispatch = make_dispatch(app)
    graph = chain_graph()
    settle_heap()  # this process starts runs as the API does: its collector set as the API's

    async def engine_once() -> float:
        t0 = time.perf_counter()
        run_id = await start_run(store, registry, graph, RunRequest({"x": 1}), dispatch=dispatch)
        after = "0-0"
        while True:
            for event_id, event in await store.read_events(run_id, after=after, block_ms=10_000):
                after = event_id
                if not event.node_id and event.event_type in EventType.TERMINAL:
                    if event.event_type != EventType.RUN_COMPLETED:
                        raise RuntimeError(f"bench run ended {event.event_type}: {event.data}")
                    return time.perf_counter() - t0

    async def celery_once() -> float:
        return await celery_chain_once(app, client)

    try:
        for _ in range(warmup):
            await engine_once()
            await celery_once()
        engine: list[float] = []
        raw: list[float] = []
        for i in range(runs):  # interleaved, alternating which goes first
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
    return {"engine_chain10": e, "celery_chain10": c,
            "ratio_p50": round(e["p50_ms"] / c["p50_ms"], 3),
            "ratio_p95": round(e["p95_ms"] / c["p95_ms"], 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=2,
                        help="the worker's concurrency (node steps in flight with the default threads pool)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with EmbeddedRedis() as server, WorkerProcesses(server.url, WorkerConfig(count=1,
                                                                             concurrency=args.concurrency)) as workers:
        result = asyncio.run(bench(server.url, args.runs, args.warmup))
    # The pool the worker really ran (the settings' default, ``-P threads`` unless
    # ORCH_WORKER_POOL says otherwise), as its command line named it.
    result["config"] = {"runs": args.runs, "warmup": args.warmup, "chain_length": CHAIN_LENGTH,
                        "worker_pool": f"-P {workers.pool} -c {workers.concurrency}", "redis": "embedded, unix socket",
                        "python": platform.python_version(), "machine": platform.machine(),
                        "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or RESULTS / f"chain-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    e, c = result["engine_chain10"], result["celery_chain10"]
    print(f"engine chain of 10: p50 {e['p50_ms']} ms, p95 {e['p95_ms']} ms", file=sys.stderr)
    print(f"celery chain of 10: p50 {c['p50_ms']} ms, p95 {c['p95_ms']} ms", file=sys.stderr)
    print(f"ratio engine/celery: p50 {result['ratio_p50']}x, p95 {result['ratio_p95']}x "
          f"(goal <= 1.0x) -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
