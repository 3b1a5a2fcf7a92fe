"""Redis commands per node: what one added chain node costs the store, seen by Redis.

    .venv/bin/python bench/node_cost.py [--runs 5]

Starts its own redis-server and one worker process (the default pool), runs chains of
10 and of 20 nodes (a trigger and set_fields) through ``runs.start_run``, and follows
Redis's ``MONITOR`` meanwhile: commands sent by clients (``EVALSHA``, ``GET``, the
broker's) and commands run inside scripts are counted apart. The cost of one node is the
difference between the chains over the 10 added nodes, so what a run costs once (start,
end) drops out. Also times ``--timed`` runs of each chain without MONITOR, the two lengths
alternating (so that the machine's drift falls on both): the time per added node (median
chain-20 minus chain-10, over 10) against a Redis round trip (median PING from the bench
process). Prints JSON per added node: client commands (the bench's own ``XREAD`` that follows the
run included), script commands, EXPIREs, each by name.

Each figure comes in two modes, each with its own redis-server and worker, alternating for
``--rounds``: ``fused``, the shipped default (a chain of pure nodes such as set_fields runs
in one step and is stored in one script call, kernel/fusion.py), and ``each_stored``
(``ORCH_FUSE_MAX_NODES=0``: every node claimed and completed on its own, as a chain of
nodes that are not pure runs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench.chain import chain_graph  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses  # noqa: E402

LENGTHS = (10, 20)


async def measure(url: str, runs: int, timed: int) -> tuple[dict[int, Counter[str]], dict[int, list[float]]]:
    """For each chain length: the commands Redis saw over ``runs`` runs (MONITOR) and the
    times of ``timed`` runs without it. The timed runs of both lengths alternate, so that
    the machine's drift (this one's speed moves by a fifth within minutes) falls on both
    alike instead of on their difference."""
    import redis.asyncio as aioredis

    from orchestrator.kernel.protocol import EventType
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import get_registry
    from orchestrator.service.runs import RunRequest, start_run
    from orchestrator.settings import Settings, load_settings
    from orchestrator.store.redis_store import RedisRunStore

    registry = get_registry(load_settings())
    store = RedisRunStore.from_url(url, Settings())
    app = make_celery(url, Settings())
    dispatch = make_dispatch(app)
    graphs = {length: chain_graph(length) for length in LENGTHS}
    counts: dict[int, Counter[str]] = {length: Counter() for length in LENGTHS}
    durations: dict[int, list[float]] = {length: [] for length in LENGTHS}
    watcher = aioredis.Redis.from_url(url, decode_responses=True)

    async def one_run(length: int) -> None:
        run_id = await start_run(store, registry, graphs[length], RunRequest({"x": 1}), dispatch=dispatch)
        after = "0-0"
        while True:
            for event_id, event in await store.read_events(run_id, after=after, block_ms=10_000):
                after = event_id
                if not event.node_id and event.event_type in EventType.TERMINAL:
                    return

    for length in LENGTHS:
        await one_run(length)  # warm: scripts loaded, plan caches
    for _ in range(timed):  # timed without MONITOR, which slows Redis down
        for length in LENGTHS:
            t0 = time.perf_counter()
            await one_run(length)
            durations[length].append(time.perf_counter() - t0)
    try:
        for length in LENGTHS:
            async with watcher.monitor() as monitor:
                async def listen(seen: Counter[str]) -> None:
                    async for line in monitor.listen():
                        command = str(line.get("command", "")).split(" ", 1)[0].upper()
                        where = "script" if line.get("client_type") == "lua" else "client"
                        seen[f"{where}:{command}"] += 1

                listener = asyncio.create_task(listen(counts[length]))
                await asyncio.sleep(0.2)
                for _ in range(runs):
                    await one_run(length)
                await asyncio.sleep(0.5)
                listener.cancel()
    finally:
        await watcher.aclose()
        await store.close()
        app.close()
    return counts, durations


async def round_trip_s(url: str, samples: int = 500) -> float:
    """Median time of one PING from this process: a Redis round trip."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        await client.ping()
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            await client.ping()
            times.append(time.perf_counter() - t0)
    finally:
        await client.aclose()
    return statistics.median(times)


def per_node(short: Counter[str], long: Counter[str], runs: int, added: int) -> dict[str, Any]:
    def total(c: Counter[str], where: str) -> int:
        return sum(v for k, v in c.items() if k.startswith(where + ":"))

    def diff(where: str, name: str | None = None) -> float:
        if name is None:
            return (total(long, where) - total(short, where)) / runs / added
        return (long[f"{where}:{name}"] - short[f"{where}:{name}"]) / runs / added

    client_top = Counter({k: (long[k] - short[k]) / runs / added for k in long if k.startswith("client:")})
    script_top = Counter({k: (long[k] - short[k]) / runs / added for k in long if k.startswith("script:")})
    return {
        "client_commands": round(diff("client"), 2),
        "script_commands": round(diff("script"), 2),
        "script_expires": round(diff("script", "EXPIRE") + diff("script", "PEXPIRE"), 2),
        "client_commands_by_name": {k.removeprefix("client:"): round(v, 2)
                                    for k, v in client_top.most_common() if abs(v) >= 0.05},
        "script_commands_by_name": {k.removeprefix("script:"): round(v, 2)
                                    for k, v in script_top.most_common() if abs(v) >= 0.05},
    }


MODES = {"fused": {}, "each_stored": {"ORCH_FUSE_MAX_NODES": "0"}}  # the shipped default; every node on its own


def measure_mode(env: dict[str, str], runs: int, timed: int) -> dict[str, Any]:
    """One mode's figures: its own redis-server and worker process (``env`` added)."""
    with EmbeddedRedis(unix_socket=False) as server, \
            WorkerProcesses(server.url, WorkerConfig(count=1, env=env)) as workers:
        counts, durations = asyncio.run(measure(server.url, runs, timed))
        rtt_s = asyncio.run(round_trip_s(server.url))
    short, long = counts[LENGTHS[0]], counts[LENGTHS[1]]
    short_s, long_s = durations[LENGTHS[0]], durations[LENGTHS[1]]
    node_ms = (statistics.median(long_s) - statistics.median(short_s)) / 10 * 1000
    return {"per_added_chain_node": per_node(short, long, runs, 10),
            "time_per_added_node_ms": round(node_ms, 3), "redis_round_trip_ms": round(rtt_s * 1000, 3),
            "node_vs_round_trip": round(node_ms / (rtt_s * 1000), 1),
            "chain_p50_ms": {"10": round(statistics.median(short_s) * 1000, 2),
                             "20": round(statistics.median(long_s) * 1000, 2)},
            "worker": f"-P {workers.pool} -c {workers.concurrency}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timed", type=int, default=30, help="timed runs of each length (alternating, no MONITOR)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of both modes, alternating")
    args = parser.parse_args()
    result: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode, env in MODES.items():
            result[mode].append(measure_mode(env, args.runs, args.timed))
    print(json.dumps({"runs": args.runs, **result}, indent=2))


if __name__ == "__main__":
    main()
