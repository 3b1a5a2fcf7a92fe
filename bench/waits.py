"""Runs that wait hold no slot: a Wait node vs a node that sleeps through the same wait.

One worker process with few slots (``-P threads -c 10``), same embedded Redis, same run:

* wait: N runs of trigger -> ``wait`` (``resume_on: time``, ``duration_s`` D) -> ``set_fields``;
  the Wait node suspends (a timer in Redis, woken by a sweeper in this process every
  ``--sweep-s``), so its slot is free at once;
* baseline: N runs of trigger -> ``bench_sleep`` (awaits D in the node: it holds its slot)
  -> ``set_fields``.

While each batch waits, a probe run (trigger -> ``set_fields``) is started and timed to its
terminal event, and so is one on the idle worker first. Prints the probe latencies (the
goal: the probe during N Wait nodes within 2x the idle probe, far below the sleeping
baseline, which queues behind N x D / slots seconds of held slots), each batch's span, and
the Wait runs' resume lag (span minus D; bounded by the sweep period). Writes the JSON to
``bench/results/waits-<time>.json``.

    .venv/bin/python bench/waits.py [--runs 100] [--duration-s 3] [--slots 10] [--sweep-s 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.chain import summary  # noqa: E402
from orchestrator.kernel.protocol import EventType  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PACK = ROOT / "bench" / "pack"


def _graph(graph_id: str, middle: dict[str, Any] | None) -> dict[str, Any]:
    nodes = [{"id": "t", "type": "manual_trigger", "name": "Start", "data": {}},
             {"id": "s", "type": "set_fields", "name": "Done", "data": {"fields": {"done": True}}}]
    edges = [{"id": "e1", "source": "t", "sourceHandle": "output", "target": "s", "targetHandle": "input",
              "data": {"channel": "flow"}}]
    if middle is not None:
        nodes.insert(1, {"id": "m", "name": "Middle", **middle})
        edges = [{"id": "e1", "source": "t", "sourceHandle": "output", "target": "m", "targetHandle": "input",
                  "data": {"channel": "flow"}},
                 {"id": "e2", "source": "m", "sourceHandle": "output", "target": "s", "targetHandle": "input",
                  "data": {"channel": "flow"}}]
    return {"id": graph_id, "nodes": nodes, "edges": edges}


async def bench(url: str, runs: int, duration_s: float, sweep_s: float) -> dict[str, Any]:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.service.sweeper import Sweeper, start_sweeper, stop_sweeper
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    settings = Settings(node_paths=str(PACK))
    registry = load_registry(settings)
    store = RedisRunStore.from_url(url, settings)
    sweeper_store = RedisRunStore.from_url(url, settings)
    app = make_celery(url, settings)
    dispatch = make_dispatch(app)
    sweeper = start_sweeper(Sweeper(sweeper_store, dispatch, settings), sweep_s)
    probe = _graph("probe", None)
    waiting = _graph("waits", {"type": "wait", "data": {"resume_on": "time", "duration_s": duration_s}})
    sleeping = _graph("sleeps", {"type": "bench_sleep", "data": {"delay_s": duration_s}})

    async def finish(run_id: str) -> None:
        after = "0-0"
        while True:
            for event_id, event in await store.read_events(run_id, after=after, count=1000, block_ms=2_000):
                after = event_id
                if not event.node_id and event.event_type in EventType.TERMINAL:
                    if event.event_type != EventType.RUN_COMPLETED:
                        raise RuntimeError(f"bench run ended {event.event_type}: {event.data}")
                    return

    async def timed(graph: dict[str, Any]) -> float:
        t0 = time.perf_counter()
        await finish(await start_run(store, registry, graph, RunRequest({"x": 1}), dispatch=dispatch))
        return time.perf_counter() - t0

    async def batch(graph: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        started: dict[str, float] = {}
        for i in range(runs):
            at = time.perf_counter()
            started[await start_run(store, registry, graph, RunRequest({"i": i}), dispatch=dispatch)] = at
        ids = list(started)
        await asyncio.sleep(0.5)  # the batch's first nodes are on the worker
        probe_s = await timed(probe)
        spans: list[float] = []

        async def one(run_id: str) -> None:
            await finish(run_id)
            spans.append(time.perf_counter() - started[run_id])  # each run from its own start

        await asyncio.gather(*(one(r) for r in ids))
        return {"probe_ms": round(probe_s * 1000, 1), "batch_span_s": round(time.perf_counter() - t0, 2),
                "lag_after_duration": summary([max(0.0, s - duration_s) for s in spans])}

    try:
        await timed(probe)  # warm up
        idle = [await timed(probe) for _ in range(5)]
        with_waits = await batch(waiting)
        with_sleeps = await batch(sleeping)
    finally:
        await stop_sweeper(sweeper)
        await sweeper_store.close()
        await store.close()
        app.close()
    idle_ms = summary(idle)["p50_ms"]
    return {"probe_idle": summary(idle), "wait_node": with_waits, "sleeping_node_baseline": with_sleeps,
            "probe_ratio_wait_vs_idle": round(with_waits["probe_ms"] / idle_ms, 2),
            "probe_ratio_sleep_vs_idle": round(with_sleeps["probe_ms"] / idle_ms, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--duration-s", type=float, default=3.0)
    parser.add_argument("--slots", type=int, default=10, help="node steps in flight in the worker process")
    parser.add_argument("--sweep-s", type=float, default=1.0, help="the sweeper's period (wakes due timers)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with EmbeddedRedis(unix_socket=False) as server, \
            WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=args.slots,
                                                     env={"ORCH_NODE_PATHS": str(PACK)})):
        result = asyncio.run(bench(server.url, args.runs, args.duration_s, args.sweep_s))
    result["config"] = {"runs": args.runs, "duration_s": args.duration_s, "sweep_s": args.sweep_s,
                        "workers": f"1 process, -P threads -c {args.slots}", "redis": "embedded, TCP",
                        "python": platform.python_version(), "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or RESULTS / f"waits-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(f"probe during {args.runs} waits: {result['probe_ratio_wait_vs_idle']}x idle (goal <= 2x); "
          f"during {args.runs} sleeping nodes: {result['probe_ratio_sleep_vs_idle']}x -> {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
