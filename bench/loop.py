"""A For Each of 200 items whose body awaits 1 s: iterations as child runs on two worker
processes vs the body run in process (the Loop before issue 20), same run.

* distributed: manual trigger -> Loop (for_each, ``--concurrency``) whose body is Loop
  Input -> ``bench_sleep`` (``bench/pack``), started with ``start_run`` on two worker
  processes (``-P threads``); from the start to the run's terminal event. Each
  iteration is a child run (``nodes/_shared/loop_children.py``);
* in process (baseline): the same graph through ``kernel.local.run_graph_local`` in this
  process, where the Loop runs its body with ``run_subgraph`` as it did in a worker.

The ideal span is ``items / concurrency x delay`` (200 / 50 x 1 s = 4 s); a body that ran
one item at a time would take 200 s. Prints both spans, their ratio to the ideal and to
each other, and writes the JSON to ``bench/results/loop-<time>.json``.

    .venv/bin/python bench/loop.py [--items 200] [--delay 1.0] [--concurrency 50] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.kernel.protocol import EventType  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PACK = ROOT / "bench" / "pack"
WAIT_S = 600.0


def loop_graph(items: int, delay_s: float, concurrency: int) -> dict[str, Any]:
    body = {"id": "body", "nodes": [
        {"id": "li", "type": "loop_input", "name": "Item", "data": {}},
        {"id": "s", "type": "bench_sleep", "name": "Await", "data": {"delay_s": delay_s}}],
        "edges": [{"id": "b1", "source": "li", "sourceHandle": "output", "target": "s", "targetHandle": "input",
                   "data": {"channel": "flow"}}]}
    return {"id": "bench-loop", "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
        {"id": "each", "type": "loop", "name": "For each", "data": {
            "mode": "for_each", "items": list(range(items)), "body": body, "concurrency": concurrency,
            "max_iterations": items}}],
        "edges": [{"id": "e1", "source": "t", "sourceHandle": "output", "target": "each", "targetHandle": "input",
                   "data": {"channel": "flow"}}]}


async def distributed_once(url: str, graph: dict[str, Any]) -> float:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    registry = load_registry(Settings(node_paths=str(PACK)))
    store = RedisRunStore.from_url(url, Settings())
    app = make_celery(url, Settings())
    try:
        t0 = time.perf_counter()
        run_id = await start_run(store, registry, graph, RunRequest({}), dispatch=make_dispatch(app))
        after = "0-0"
        while time.perf_counter() - t0 < WAIT_S:
            for event_id, event in await store.read_events(run_id, after=after, count=1000, block_ms=1000):
                after = event_id
                if not event.node_id and event.event_type in EventType.TERMINAL:
                    if event.event_type != EventType.RUN_COMPLETED:
                        raise RuntimeError(f"bench run ended {event.event_type}: {event.data}")
                    return time.perf_counter() - t0
        raise RuntimeError(f"bench run {run_id} did not end within {WAIT_S} s")
    finally:
        await store.close()
        app.close()


async def in_process_once(graph: dict[str, Any]) -> float:
    from orchestrator.kernel.local import run_graph_local
    from orchestrator.service.plugins import load_registry
    from orchestrator.settings import Settings

    registry = load_registry(Settings(node_paths=str(PACK)))
    t0 = time.perf_counter()
    result = await run_graph_local(graph, registry, {})
    if result.status != "succeeded":
        raise RuntimeError(f"in-process run ended {result.status}: {result.error}")
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=50, help="the Loop's concurrency (at most 64)")
    parser.add_argument("--rounds", type=int, default=2, help="each side this many times, alternating")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    graph = loop_graph(args.items, args.delay, args.concurrency)
    ideal = args.items / args.concurrency * args.delay
    distributed: list[float] = []
    local: list[float] = []
    with EmbeddedRedis(unix_socket=False) as server, \
            WorkerProcesses(server.url, WorkerConfig(count=2, pool="threads", concurrency=100,
                                                     env={"ORCH_NODE_PATHS": str(PACK)})):
        for i in range(args.rounds):
            if i % 2:
                local.append(asyncio.run(in_process_once(graph)))
                distributed.append(asyncio.run(distributed_once(server.url, graph)))
            else:
                distributed.append(asyncio.run(distributed_once(server.url, graph)))
                local.append(asyncio.run(in_process_once(graph)))
    best_d, best_l = min(distributed), min(local)
    result = {
        "bench": "loop", "items": args.items, "delay_s": args.delay, "concurrency": args.concurrency,
        "workers": 2, "ideal_span_s": round(ideal, 3),
        "distributed_span_s": [round(s, 3) for s in distributed],
        "in_process_span_s": [round(s, 3) for s in local],
        "distributed_over_ideal": round(best_d / ideal, 3),
        "in_process_over_ideal": round(best_l / ideal, 3),
        "distributed_over_in_process": round(best_d / best_l, 3),
        "python": platform.python_version(), "cpus": os.cpu_count(),
    }
    print(json.dumps(result, indent=2))
    out = args.out or RESULTS / f"loop-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
