"""Many I/O-bound nodes on ONE worker process: fan-outs of nodes that each await 1 s.

For each width (default 200 and 1,000), in the same run and on the same embedded Redis:

* engine: manual trigger -> ``width`` ``bench_sleep`` nodes (``bench/pack``), one worker
  process (``-P threads -c width``): time from the first node ``started`` event to the
  last ``completed`` one, and the peak number of nodes in flight, read from the events;
* celery: ``width`` raw Celery tasks that ``time.sleep(1)`` on one ``-P threads -c width``
  worker (``bench/celery_baseline.py``): first task start to last task end;
* langgraph (if installed: ``pip install -e '.[bench]'``): a ``StateGraph`` with ``width``
  parallel nodes that ``await asyncio.sleep(1)`` in this process: first start to last end.

Efficiency = 1 s / that time (1.0: every node overlapped perfectly). Goals: engine >= 0.8
at 200, >= 0.6 at 1,000. Prints JSON and writes it to ``bench/results/``.

    .venv/bin/python bench/concurrency.py [--widths 200,1000] [--delay-s 1.0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.kernel.protocol import EventType  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses  # noqa: E402

PACK = ROOT / "bench" / "pack"
RESULTS = ROOT / "bench" / "results"


def fanout_graph(width: int, delay_s: float) -> dict[str, Any]:
    nodes = [{"id": "t", "type": "manual_trigger", "name": "Start", "data": {}}]
    edges = []
    for i in range(width):
        nodes.append({"id": f"s{i}", "type": "bench_sleep", "name": f"Sleep {i}",
                      "data": {"delay_s": delay_s}})
        edges.append({"id": f"e{i}", "source": "t", "sourceHandle": "output", "target": f"s{i}",
                      "targetHandle": "input", "data": {"channel": "flow"}})
    return {"id": f"bench-concurrency-{width}", "nodes": nodes, "edges": edges}


def span(intervals: list[tuple[float, float]], delay_s: float) -> dict[str, Any]:
    """First start to last end, peak overlap and efficiency of (start, end) intervals."""
    first = min(s for s, _ in intervals)
    last = min(1e18, max(e for _, e in intervals))
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = live = 0
    for _, step in points:
        live += step
        peak = max(peak, live)
    elapsed = last - first
    return {"n": len(intervals), "elapsed_s": round(elapsed, 3), "peak_in_flight": peak,
            "efficiency": round(delay_s / elapsed, 3) if elapsed > 0 else None}


async def engine_once(url: str, width: int, delay_s: float) -> dict[str, Any]:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    settings = Settings(node_paths=str(PACK))
    registry = load_registry(settings)
    store = RedisRunStore.from_url(url, settings)
    app = make_celery(url, settings)
    try:
        run_id = await start_run(store, registry, fanout_graph(width, delay_s), RunRequest({}, deadline_s=600),
                                 dispatch=make_dispatch(app))
        started: dict[str, float] = {}
        ended: dict[str, float] = {}
        after, status = "0-0", ""
        while not status:
            for event_id, event in await store.read_events(run_id, after=after, count=5000,
                                                           block_ms=30_000):
                after = event_id
                if event.node_id.startswith("s"):
                    if event.event_type == EventType.STARTED:
                        started[event.node_id] = event.timestamp
                    elif event.event_type == EventType.COMPLETED:
                        ended[event.node_id] = event.timestamp
                elif not event.node_id and event.event_type in EventType.TERMINAL:
                    status = event.event_type
        if status != EventType.RUN_COMPLETED:
            raise RuntimeError(f"engine run ended {status}: {(await store.get_run(run_id)).error}")
        return span([(started[n], ended[n]) for n in started], delay_s)
    finally:
        await store.close()
        app.close()


def celery_once(url: str, width: int, delay_s: float) -> dict[str, Any]:
    import redis

    from bench.celery_baseline import QUEUE, SLEEP_TASK, app

    client = redis.Redis.from_url(url, decode_responses=True)
    key = f"bench:intervals:{uuid.uuid4().hex}"
    with app.producer_or_acquire() as producer:
        for _ in range(width):
            app.send_task(SLEEP_TASK, args=(key, delay_s), queue=QUEUE, producer=producer)
    # Every task sleeps at once on its own pool thread: done in a few delays. (A run that
    # lost tasks waited 60 s plus a delay per task before: 17 minutes at 1,000 wide.)
    limit_s = 30 + 5 * delay_s
    deadline = time.monotonic() + limit_s
    while client.llen(key) < width:
        if time.monotonic() > deadline:
            raise RuntimeError(f"celery baseline: {client.llen(key)} of {width} tasks ended within {limit_s:.0f} s")
        time.sleep(0.05)
    intervals = [tuple(map(float, raw.split(","))) for raw in client.lrange(key, 0, -1)]
    client.delete(key)
    return span([(a, b) for a, b in intervals], delay_s)


async def langgraph_once(width: int, delay_s: float) -> dict[str, Any] | str:
    try:
        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return "not installed (pip install -e '.[bench]')"
    from typing import TypedDict

    class State(TypedDict, total=False):
        x: int

    intervals: list[tuple[float, float]] = []

    def make(i: int) -> Any:
        async def node(state: State) -> dict[str, Any]:
            began = time.time()
            await asyncio.sleep(delay_s)
            intervals.append((began, time.time()))
            return {}
        return node

    builder = StateGraph(State)
    for i in range(width):
        builder.add_node(f"s{i}", make(i))
        builder.add_edge(START, f"s{i}")
        builder.add_edge(f"s{i}", END)
    graph = builder.compile()
    await graph.ainvoke({"x": 1})
    return span(intervals, delay_s)


def start_baseline_worker(url: str, width: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, BENCH_REDIS_URL=url,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "bench.celery_baseline", "worker", "-P", "threads",
         "-c", str(width), "-Q", "bench-baseline", "--without-gossip", "--without-mingle",
         "--without-heartbeat", "--loglevel", "WARNING"],
        env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default="200,1000")
    parser.add_argument("--delay-s", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    result: dict[str, Any] = {}
    with EmbeddedRedis(unix_socket=False) as server:
        os.environ["BENCH_REDIS_URL"] = server.url  # read when bench.celery_baseline is imported
        for width in widths:
            env = {"ORCH_NODE_PATHS": str(PACK)}
            with WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=width, env=env)):
                asyncio.run(engine_once(server.url, min(width, 20), 0.05))  # warm-up
                engine = asyncio.run(engine_once(server.url, width, args.delay_s))
            print(f"width {width}: engine done", file=sys.stderr)
            worker = start_baseline_worker(server.url, width)
            try:
                celery_once(server.url, min(width, 20), 0.05)  # warm-up (also waits for the worker)
                raw = celery_once(server.url, width, args.delay_s)
            finally:
                os.killpg(worker.pid, 15)
                worker.wait(30)
            print(f"width {width}: celery done", file=sys.stderr)
            lang = asyncio.run(langgraph_once(width, args.delay_s))
            row: dict[str, Any] = {"engine": engine, "celery_threads": raw, "langgraph": lang,
                                   "ratio_engine_to_celery": round(engine["efficiency"] / raw["efficiency"], 3)}
            if isinstance(lang, dict):
                row["ratio_engine_to_langgraph"] = round(engine["efficiency"] / lang["efficiency"], 3)
            result[f"fanout_{width}"] = row
            print(f"width {width}: engine efficiency {engine['efficiency']} (peak {engine['peak_in_flight']} "
                  f"in flight, {engine['elapsed_s']} s); celery threads {raw['efficiency']}; "
                  f"langgraph {lang['efficiency'] if isinstance(lang, dict) else lang}", file=sys.stderr)
    result["config"] = {"delay_s": args.delay_s, "worker": "1 process, -P threads -c <width>",
                        "python": platform.python_version(), "machine": platform.machine(),
                        "cpus": os.cpu_count(), "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or RESULTS / f"concurrency-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
