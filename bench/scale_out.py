"""Node completions on one Redis primary and on a 3-primary Redis Cluster, in one run.

    .venv/bin/python bench/scale_out.py [--seconds 6] [--clients 3] [--lanes 8] [--width 20]
                                        [--workers 2] [--primaries 3] [--skip-workers]

Two layouts, started here from the packaged ``redis-server`` (the same binary for both):
``single`` (one redis-server, the baseline) and ``cluster`` (``--primaries`` primaries,
``tests/support/redis_cluster.py``). On each it measures two paths:

* ``store``: the store path alone, the claim/complete scripts the workers call, with no
  broker: ``--clients`` processes each keep ``--lanes`` fan-out runs in flight (a trigger,
  ``--width`` set_fields, a join: ``bench/fanout.py``'s graph), start them with
  ``runs.start_run`` and run every ready node with the kernel's step function
  (``run_step``: claim, execute, complete) as a worker does, without Celery;
* ``workers``: the same runs through ``--workers`` real worker processes (Celery on a
  separate plain Redis broker in both layouts, so the broker's load is on neither), runs
  started from this process.

Each point lasts ``--seconds``; completions are counted by the store path's clients (the
steps that ended in the window) or by the nodes' ``completed`` events (workers). Every
Redis node's ``INFO cpu`` (used_cpu_sys + used_cpu_user) and ``INFO commandstats`` are
read at the window's edges: the Redis CPU per node completion, per primary and in total,
each primary's share of the work, the commands per completion, and the CPU of the client
or worker processes, which says who is the limit on this machine's cores. The projection
to 10 and 30 primaries divides a core by the measured per-completion cost on the cluster
times the busiest primary's share: runs spread by bucket (``ORCH_STATE_BUCKETS``,
``--buckets``), so with 64 buckets over 30 primaries the busiest holds 3/64 of the work,
not 1/30.

Prints JSON and writes it to ``bench/results/scale-out-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench.fanout import PACK, fanout_merge_graph  # noqa: E402

RESULTS = ROOT / "bench" / "results"
TICKS_S = os.sysconf("SC_CLK_TCK")
REDIS_SERVER = "/usr/bin/redis-server"
START_SLACK_S = 0.5  # after every client said ready: the window opens
PROJECT_TO = (10, 30)


# -- a client process of the store path ----------------------------------------------------


async def client_main(url: str, lanes: int, width: int, seconds: float) -> dict[str, Any]:
    """Keep ``lanes`` fan-out runs in flight; count the node steps that end in the window.
    Prints ``ready`` once warm, then reads the window's start (epoch seconds) from stdin."""
    from orchestrator.host.node_host import HostFactory
    from orchestrator.kernel.environment import StepEnvironment
    from orchestrator.kernel.local import run_nested
    from orchestrator.kernel.step import run_step
    from orchestrator.service.plugins import load_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    settings = Settings(node_paths=str(PACK), redis_url=url)
    registry = load_registry(settings)
    store = RedisRunStore.from_url(url, settings)
    env = StepEnvironment(store=store, registry=registry, worker_id=f"bench-{os.getpid()}",
                          host_for=HostFactory(settings, url), subgraphs=run_nested)
    graph = fanout_merge_graph(width)
    start_at = end_at = float("inf")  # no step counts before the window is known
    counted = {"steps": 0, "runs": 0}

    async def step(run_id: str, node_id: str) -> None:
        outcome = await run_step(env, run_id, node_id)
        if start_at <= time.time() < end_at:
            counted["steps"] += 1
        if outcome.ready:
            await store.mark_dispatched(run_id, list(outcome.ready))
            await asyncio.gather(*(step(run_id, n) for n in outcome.ready))

    async def one_run() -> None:
        sent: list[tuple[str, list[str]]] = []
        run_id = await start_run(store, registry, graph, RunRequest({"x": 1}),
                                 dispatch=lambda r, nodes, **_: sent.append((r, list(nodes))))
        await asyncio.gather(*(step(r, n) for r, nodes in sent for n in nodes))
        if start_at <= time.time() < end_at:
            counted["runs"] += 1
        assert run_id

    async def lane() -> None:
        while time.time() < end_at:
            await one_run()

    await one_run()  # warm: scripts loaded, registry and plan caches
    print("ready", flush=True)
    start_at = float(await asyncio.to_thread(sys.stdin.readline))
    end_at = start_at + seconds
    await asyncio.sleep(max(0.0, start_at - time.time()))
    cpu0 = time.process_time()
    await asyncio.gather(*(lane() for _ in range(lanes)))
    cpu = time.process_time() - cpu0
    await store.close()
    return {"steps": counted["steps"], "runs": counted["runs"], "cpu_s": cpu}


# -- Redis layouts ------------------------------------------------------------------------------


@dataclass
class Layout:
    name: str
    url: str
    nodes: list[tuple[str, int]]  # every server (host, port)

    def primaries(self) -> list[tuple[str, int]]:
        import redis

        found = []
        for host, port in self.nodes:
            client = redis.Redis(host=host, port=port, decode_responses=True)
            try:
                if client.info("replication")["role"] == "master":
                    found.append((host, port))
            finally:
                client.close()
        return found


def node_stats(host: str, port: int) -> dict[str, float]:
    import redis

    client = redis.Redis(host=host, port=port, decode_responses=True)
    try:
        cpu = client.info("cpu")
        commands = client.info("commandstats")
    finally:
        client.close()
    return {"cpu_s": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
            "calls": float(sum(int(v["calls"]) for v in commands.values()))}


def sample(layout: Layout) -> dict[int, dict[str, float]]:
    return {port: node_stats(host, port) for host, port in layout.primaries()}


@contextlib.contextmanager
def single_redis() -> Iterator[Layout]:
    from orchestrator.local.embedded_redis import free_port

    port = free_port()
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"scale-out-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(folder)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        import redis

        client = redis.Redis(port=port)
        for _ in range(200):
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    break
            time.sleep(0.05)
        client.close()
        yield Layout("single", f"redis://127.0.0.1:{port}/0", [("127.0.0.1", port)])
    finally:
        proc.kill()
        proc.wait()
        subprocess.run(["rm", "-rf", str(folder)], check=False)


@contextlib.contextmanager
def cluster(primaries: int) -> Iterator[Layout]:
    from tests.support.redis_cluster import redis_cluster

    with redis_cluster(primaries=primaries) as made:
        yield Layout(f"cluster-{primaries}", made.url, [(h, p) for h, p, _ in made.nodes])


# -- the two paths ------------------------------------------------------------------------------


def cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / TICKS_S


def summarize(layout: Layout, before: dict[int, dict[str, float]], after: dict[int, dict[str, float]],
              completions: int, seconds: float, drivers_cpu_s: float) -> dict[str, Any]:
    cpu = {port: after[port]["cpu_s"] - before[port]["cpu_s"] for port in after}
    calls = {port: after[port]["calls"] - before[port]["calls"] for port in after}
    total_cpu = sum(cpu.values())
    per = max(1, completions)
    return {
        "layout": layout.name,
        "primaries": len(after),
        "node_completions": completions,
        "completions_per_s": round(completions / seconds, 1),
        "redis_cpu_ms_per_completion": round(1000 * total_cpu / per, 4),
        "redis_commands_per_completion": round(sum(calls.values()) / per, 1),
        "per_primary": [
            {"port": port, "cpu_ms_per_completion": round(1000 * cpu[port] / per, 4),
             "share_of_cpu": round(cpu[port] / total_cpu, 3) if total_cpu else None,
             "share_of_commands": round(calls[port] / max(1.0, sum(calls.values())), 3),
             "cores_busy": round(cpu[port] / seconds, 3)}
            for port in sorted(cpu)],
        "redis_cores_busy": round(total_cpu / seconds, 3),
        "drivers_cores_busy": round(drivers_cpu_s / seconds, 3),
        "drivers_cpu_ms_per_completion": round(1000 * drivers_cpu_s / per, 3),
    }


def store_path(layout: Layout, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGNO_TELEMETRY": "false"}
    clients = [subprocess.Popen(
        [sys.executable, __file__, "client", "--url", layout.url, "--lanes", str(args.lanes),
         "--width", str(args.width), "--seconds", str(args.seconds)],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        for _ in range(args.clients)]
    for proc in clients:  # every client imported, connected and ran one run
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline().decode().strip()
        if line != "ready":
            raise RuntimeError(f"store-path client not ready: {line!r} {proc.stderr.read().decode()[-3000:]}"
                               if proc.stderr else line)
    start_at = time.time() + START_SLACK_S
    for proc in clients:
        assert proc.stdin is not None
        proc.stdin.write(f"{start_at!r}\n".encode())
        proc.stdin.flush()
    time.sleep(max(0.0, start_at - time.time()))
    before = sample(layout)
    time.sleep(args.seconds)
    after = sample(layout)
    outs = []
    for proc in clients:
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"store-path client failed ({proc.returncode}): {err.decode()[-3000:]}")
        outs.append(json.loads(out.decode().strip().splitlines()[-1]))
    steps = sum(o["steps"] for o in outs)
    result = summarize(layout, before, after, steps, args.seconds, sum(o["cpu_s"] for o in outs))
    result["path"] = f"store ({args.clients} client processes x {args.lanes} runs in flight)"
    result["runs_per_s"] = round(sum(o["runs"] for o in outs) / args.seconds, 1)
    return result


async def worker_path(layout: Layout, args: argparse.Namespace, broker_url: str) -> dict[str, Any]:
    from orchestrator.kernel.protocol import EventType
    from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings
    from orchestrator.store.redis_store import RedisRunStore

    settings = Settings(node_paths=str(PACK), redis_url=layout.url, broker_url=broker_url)
    registry = load_registry(settings)
    graph = fanout_merge_graph(args.width)
    env = {"ORCH_NODE_PATHS": str(PACK), "ORCH_BROKER_URL": broker_url}
    with WorkerProcesses(layout.url, WorkerConfig(count=args.workers, env=env)) as workers:
        store = RedisRunStore.from_url(layout.url, settings)
        app = make_celery(broker_url, settings)
        dispatch = make_dispatch(app)
        window: dict[str, float] = {}
        counted = {"nodes": 0, "runs": 0}

        async def one_run() -> None:
            run_id = await start_run(store, registry, graph, RunRequest({"x": 1}), dispatch=dispatch)
            after = "0-0"
            while True:
                for event_id, event in await store.read_events(run_id, after=after, block_ms=5_000):
                    after = event_id
                    inside = window and window["start"] <= time.time() < window["end"]
                    if event.node_id and event.event_type == EventType.COMPLETED and inside:
                        counted["nodes"] += 1
                    if not event.node_id and event.event_type in EventType.TERMINAL:
                        counted["runs"] += bool(inside)
                        return

        async def lane(until: float) -> None:
            while time.time() < until:
                await one_run()

        await asyncio.gather(*(one_run() for _ in range(args.workers)))  # warm every worker
        start = time.time() + 1.0
        window.update(start=start, end=start + args.seconds)
        lanes = asyncio.gather(*(lane(window["end"]) for _ in range(args.lanes)))
        await asyncio.sleep(max(0.0, start - time.time()))
        before, cpu0 = sample(layout), cpu_s(workers.pids)
        await asyncio.sleep(args.seconds)
        after, cpu1 = sample(layout), cpu_s(workers.pids)
        await lanes
        await store.close()
        app.close()
    result = summarize(layout, before, after, counted["nodes"], args.seconds, cpu1 - cpu0)
    result["path"] = f"workers ({args.workers} worker processes, {args.lanes} runs in flight)"
    result["runs_per_s"] = round(counted["runs"] / args.seconds, 1)
    return result


def projection(single: dict[str, Any], spread: dict[str, Any], buckets: int) -> dict[str, Any]:
    """Completions/s that N primaries carry before the busiest one is a full core, from the
    cluster's measured Redis CPU per completion. Runs spread by bucket: with ``buckets``
    buckets over N primaries the busiest holds ceil(buckets / N) of them, so its share of
    the work is that over ``buckets`` (not 1/N) when the runs spread evenly over buckets."""
    per_ms = spread["redis_cpu_ms_per_completion"]
    n = spread["primaries"]

    def ceiling(primaries: int, bucket_count: int) -> int:
        busiest = math.ceil(bucket_count / primaries) / bucket_count
        return round(1000 / max(1e-9, per_ms * busiest))

    return {
        "redis_cpu_ms_per_completion": {"single": single["redis_cpu_ms_per_completion"], f"cluster-{n}": per_ms},
        "cluster_cost_vs_single": round(per_ms / max(1e-9, single["redis_cpu_ms_per_completion"]), 2),
        "busiest_primary_share_measured": max(p["share_of_cpu"] or 0 for p in spread["per_primary"]),
        "ceiling_completions_per_s": {
            "single": round(1000 / max(1e-9, single["redis_cpu_ms_per_completion"])),
            **{f"{k} primaries, {buckets} buckets": ceiling(k, buckets) for k in (n, *PROJECT_TO)},
            **{f"{k} primaries, {b} buckets": ceiling(k, b) for k in PROJECT_TO for b in (256, 1024)},
        },
    }


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                           "load_avg": os.getloadavg()},
                               "settings": vars(args) | {"command": " ".join(sys.argv)}}
    points: list[dict[str, Any]] = []
    with single_redis() as broker:
        layouts = {"single": single_redis, "cluster": lambda: cluster(args.primaries)}
        for name in args.layouts.split(","):
            with layouts[name]() as layout:
                points.append(store_path(layout, args))
                print(json.dumps(points[-1]), file=sys.stderr)
                if not args.skip_workers:
                    points.append(await worker_path(layout, args, broker.url))
                    print(json.dumps(points[-1]), file=sys.stderr)
    results["points"] = points
    store_points = [p for p in points if p["path"].startswith("store")]
    if len(store_points) == 2:
        results["projection_store_path"] = projection(store_points[0], store_points[1], args.buckets)
    results["load_avg_after"] = os.getloadavg()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", default="bench", choices=["bench", "client"])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--clients", type=int, default=3, help="store-path client processes")
    parser.add_argument("--lanes", type=int, default=8, help="runs in flight per client (and for the workers)")
    parser.add_argument("--width", type=int, default=20, help="fan-out width of each run")
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the workers path")
    parser.add_argument("--primaries", type=int, default=3)
    parser.add_argument("--skip-workers", action="store_true")
    parser.add_argument("--layouts", default="single,cluster", help="which of single,cluster to measure")
    parser.add_argument("--buckets", type=int, default=64, help="ORCH_STATE_BUCKETS, for the projection")
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode == "client":
        print(json.dumps(asyncio.run(client_main(args.url, args.lanes, args.width, args.seconds))))
        return
    results = asyncio.run(bench(args))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"scale-out-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
