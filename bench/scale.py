"""Per-node cost as graphs grow: chains and fan-outs of 10, 200 and 1,000 nodes.

For each shape and size, in one run on one embedded Redis and one worker process
(``-P threads -c 100``):

* planning: ``validate_graph`` + ``compile_run`` in this process (best of 5), per node;
* distributed: ``start_run`` to the terminal event (``set_fields`` nodes; median of 3),
  per node.

Goal: the per-node cost at 1,000 within 1.5x of that at 10. Prints JSON and writes it to
``bench/results/scale-<time>.json``.

    .venv/bin/python bench/scale.py [--sizes 10,200,1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
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


def shape(kind: str, size: int) -> dict[str, Any]:
    """``size`` nodes: a trigger then ``size - 1`` set_fields, chained or fanned out."""
    nodes = [{"id": "n0", "type": "manual_trigger", "name": "Start", "data": {}}]
    edges = []
    for i in range(1, size):
        nodes.append({"id": f"n{i}", "type": "set_fields", "name": f"Step {i}", "data": {"fields": {"i": i}}})
        source = f"n{i - 1}" if kind == "chain" else "n0"
        edges.append({"id": f"e{i}", "source": source, "sourceHandle": "output", "target": f"n{i}",
                      "targetHandle": "input", "data": {"channel": "flow"}})
    return {"id": f"scale-{kind}-{size}", "nodes": nodes, "edges": edges}


def planning_us_per_node(graph: dict[str, Any], registry: Any) -> float:
    from orchestrator.kernel.compile import compile_run
    from orchestrator.kernel.validation import validate_graph

    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        compile_run(validate_graph(graph, registry), "bench")
        best = min(best, time.perf_counter() - t0)
    return round(best / len(graph["nodes"]) * 1e6, 2)


async def distributed_ms_per_node(url: str, graph: dict[str, Any], registry: Any) -> float:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    store = RedisRunStore.from_url(url, Settings())
    app = make_celery(url, Settings())
    samples = []
    try:
        for _ in range(3):
            t0 = time.perf_counter()
            run_id = await start_run(store, registry, graph, RunRequest({}), dispatch=make_dispatch(app))
            after, done = "0-0", False
            while not done:
                for event_id, event in await store.read_events(run_id, after=after, count=5000, block_ms=30_000):
                    after = event_id
                    if not event.node_id and event.event_type in EventType.TERMINAL:
                        if event.event_type != EventType.RUN_COMPLETED:
                            raise RuntimeError(f"run ended {event.event_type}")
                        done = True
            samples.append(time.perf_counter() - t0)
    finally:
        await store.close()
        app.close()
    return round(statistics.median(samples) / len(graph["nodes"]) * 1000, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,200,1000")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from orchestrator.service.plugins import get_registry
    from orchestrator.settings import load_settings

    registry = get_registry(load_settings())
    sizes = [int(s) for s in args.sizes.split(",")]
    result: dict[str, Any] = {}
    with EmbeddedRedis(unix_socket=False) as server, \
            WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=100)):
        for kind in ("chain", "fanout"):
            rows = {}
            for size in sizes:
                graph = shape(kind, size)
                rows[size] = {"planning_us_per_node": planning_us_per_node(graph, registry),
                              "distributed_ms_per_node": asyncio.run(
                                  distributed_ms_per_node(server.url, graph, registry))}
            small, large = rows[sizes[0]], rows[sizes[-1]]
            result[kind] = {
                "per_size": rows,
                "planning_growth": round(large["planning_us_per_node"] / small["planning_us_per_node"], 2),
                "distributed_growth": round(large["distributed_ms_per_node"] / small["distributed_ms_per_node"], 2),
            }
            print(f"{kind}: " + ", ".join(
                f"{n}: plan {r['planning_us_per_node']} us/node, run {r['distributed_ms_per_node']} ms/node"
                for n, r in rows.items())
                  + f"; growth {sizes[0]}->{sizes[-1]}: plan {result[kind]['planning_growth']}x, "
                    f"run {result[kind]['distributed_growth']}x (goal <= 1.5x)", file=sys.stderr)
    result["config"] = {"sizes": sizes, "worker": "1 process, -P threads -c 100",
                        "python": platform.python_version(), "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or RESULTS / f"scale-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
