"""Runs per second of an I/O-bound graph with 1, 2 and 4 worker processes, in one run.

    .venv/bin/python bench/throughput.py [--runs-per-worker 24] [--delay-s 0.05]

The graph is a diamond of the bench pack's ``sleep`` node (start -> a -> b, c -> d; each
awaits ``--delay-s``), so a node holds a worker process while it waits, the way a node
calling a model or an HTTP API does. Workers are ``prefork -c 1`` processes (one node at
a time each) on one redis-server this script owns; the pool grows 1 -> 2 -> 4 between
measurements (new processes join, none restart). Each measurement starts
``runs-per-worker x workers`` runs at once through ``runs.start_run`` (what the API
does) and times the first start to the last run's finish.

Prints JSON: runs/s per worker count and the scaling ratio against one worker (ideal
for I/O-bound nodes: equal to the worker count, until the 2 cores saturate).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from api_events import ROOT, graph, write_pack

sys.path.insert(0, str(ROOT))

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses

POLL_S = 0.05
WORKER_STEPS = (1, 1, 2)  # processes added before each measurement: 1, 2, 4 in total


class NamedWorkers(WorkerProcesses):
    """Worker processes with a node-name prefix, so groups added later do not clash."""

    def __init__(self, redis_url: str, config: WorkerConfig, *, prefix: str) -> None:
        super().__init__(redis_url, config)
        self.prefix = prefix

    def command(self, index: int) -> list[str]:
        argv = super().command(index)
        argv[argv.index("-n") + 1] = f"{self.prefix}{index}@%h"
        return argv


def diamond(delay_s: float) -> dict[str, Any]:
    sleep = {"delay_s": delay_s}
    return graph("diamond", [("start", "manual_trigger", {}), ("a", "sleep", sleep), ("b", "sleep", sleep),
                             ("c", "sleep", sleep), ("d", "sleep", sleep)],
                 [("start", "a"), ("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])


async def run_batch(store: Any, registry: Any, dispatch: Any, g: dict[str, Any], count: int) -> dict[str, Any]:
    """Start ``count`` runs at once; wait for all to end; runs/s from first start to last end."""
    from orchestrator.kernel.store import RunStatus
    from orchestrator.service.runs import RunRequest, start_run

    started = time.time()
    run_ids = [await start_run(store, registry, g, RunRequest({"n": i}), dispatch=dispatch) for i in range(count)]
    pending, finished, statuses = set(run_ids), [], []
    while pending:
        await asyncio.sleep(POLL_S)
        records = await asyncio.gather(*(store.get_run(r) for r in pending))
        for record in records:
            if record.status in RunStatus.TERMINAL:
                pending.discard(record.run_id)
                finished.append(record.finished_at or time.time())
                statuses.append(record.status)
        if time.time() - started > 120:
            raise RuntimeError(f"{len(pending)} runs still active after 120 s")
    elapsed_s = max(finished) - started
    return {"runs": count, "succeeded": statuses.count(RunStatus.SUCCEEDED), "elapsed_s": round(elapsed_s, 2),
            "runs_per_s": round(count / elapsed_s, 2)}


async def measure(url: str, pack: Path, env: dict[str, str], runs_per_worker: int, delay_s: float) -> dict[str, Any]:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    registry = load_registry(Settings(node_paths=str(pack)))
    store = RedisRunStore.from_url(url, Settings())
    app = make_celery(url, Settings())
    dispatch = make_dispatch(app)
    g = diamond(delay_s)
    groups: list[WorkerProcesses] = []
    results: dict[str, Any] = {}
    try:
        for step, added in enumerate(WORKER_STEPS):
            group = NamedWorkers(url, WorkerConfig(count=added, concurrency=1, env=env), prefix=f"b{step}-")
            await asyncio.to_thread(group.start)
            groups.append(group)
            workers = sum(g_.count for g_ in groups)
            await run_batch(store, registry, dispatch, g, 2 * workers)  # warm every process
            results[str(workers)] = await run_batch(store, registry, dispatch, g, runs_per_worker * workers)
    finally:
        for group in groups:
            await asyncio.to_thread(group.stop)
        app.close()
        await store.close()
    base = results["1"]["runs_per_s"]
    return {
        "graph": "diamond of 4 sleep nodes + trigger", "node_delay_s": delay_s,
        "workers": results,
        "scaling_vs_1_worker": {n: round(r["runs_per_s"] / base, 2) for n, r in results.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-per-worker", type=int, default=24)
    parser.add_argument("--delay-s", type=float, default=0.05)
    args = parser.parse_args()
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="orc-bench-"))
    try:
        pack = write_pack(workdir)
        with EmbeddedRedis(unix_socket=False) as server:
            result = asyncio.run(measure(server.url, pack, {"ORCH_NODE_PATHS": str(pack)},
                                         args.runs_per_worker, args.delay_s))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["cpus"] = os.cpu_count()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
