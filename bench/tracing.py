"""Tracing on vs off, in the same run: the chain of ``bench/chain.py`` and the fan-out of
``bench/concurrency.py``.

Two embedded Redis servers, each with its own worker processes: one set started with
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a local OTLP/HTTP receiver (it decodes every
export request, so the export's cost is real), one without. The driver (this process)
starts runs on both, with its own run-root spans on for the traced side only.

* chain: the 10-node chain, engine runs interleaved off / on (alternating which goes
  first), plus the raw Celery chain of 10 no-ops on the untraced side: p50/p95 of each,
  ``ratio_on_off`` and ``ratio_off_celery`` (compare with bench/README.md's chain figure,
  measured before tracing existed: off must cost nothing measurable);
* fan-out: ``width`` nodes that each await ``--delay-s`` on one ``-P threads`` worker
  process, off, on, off again (drift shows as the two offs differing): efficiency of each.

Also counts the spans the receiver got. Prints JSON and writes it to ``bench/results/``.

    .venv/bin/python bench/tracing.py [--runs 40] [--warmup 5] [--width 200] [--delay-s 1.0]
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


from bench.chain import celery_chain_once, chain_graph, summary  # noqa: E402
from bench.concurrency import PACK, engine_once  # noqa: E402
from orchestrator.kernel.protocol import EventType  # noqa: E402
from orchestrator.local.embedded_redis import EmbeddedRedis  # noqa: E402
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses  # noqa: E402
from orchestrator.telemetry import tracing  # noqa: E402
from tests.support.otlp import OtlpReceiver  # noqa: E402

RESULTS = ROOT / "bench" / "results"


class Side:
    """One Redis + its workers, traced or not; ``traced`` also switches the driver's spans."""

    def __init__(self, url: str, traced: bool) -> None:
        from orchestrator.queue.app import make_celery
        from orchestrator.queue.dispatch import make_dispatch
        from orchestrator.service.plugins import get_registry
        from orchestrator.settings import Settings, load_settings
        from orchestrator.store.redis_store import RedisRunStore

        self.traced = traced
        self.registry = get_registry(load_settings())
        self.store = RedisRunStore.from_url(url, Settings())
        self.app = make_celery(url, Settings())
        self.dispatch = make_dispatch(self.app)

    async def chain_once(self) -> float:
        from orchestrator.service.runs import RunRequest, start_run

        tracing._configured["enabled"] = self.traced  # the driver's own spans (bench only)
        t0 = time.perf_counter()
        run_id = await start_run(self.store, self.registry, chain_graph(), RunRequest({"x": 1}),
                                 dispatch=self.dispatch)
        after = "0-0"
        while True:
            for event_id, event in await self.store.read_events(run_id, after=after, block_ms=10_000):
                after = event_id
                if not event.node_id and event.event_type in EventType.TERMINAL:
                    if event.event_type != EventType.RUN_COMPLETED:
                        raise RuntimeError(f"bench run ended {event.event_type}")
                    return time.perf_counter() - t0

    async def close(self) -> None:
        await self.store.close()
        self.app.close()


async def chain_bench(off_url: str, on_url: str, runs: int, warmup: int) -> dict[str, Any]:
    import redis.asyncio as aioredis

    off, on = Side(off_url, False), Side(on_url, True)
    client = aioredis.Redis.from_url(off_url, decode_responses=True)
    samples: dict[str, list[float]] = {"off": [], "on": [], "celery": []}
    try:
        for i in range(warmup + runs):
            order = [("off", off.chain_once), ("on", on.chain_once),
                     ("celery", lambda: celery_chain_once(off.app, client))]
            for name, once in order if i % 2 else reversed(order):
                took = await once()
                if i >= warmup:
                    samples[name].append(took)
    finally:
        tracing._configured["enabled"] = False
        await off.close()
        await on.close()
        await client.aclose()
    s = {k: summary(v) for k, v in samples.items()}
    return {"engine_off": s["off"], "engine_on": s["on"], "celery_chain10": s["celery"],
            "ratio_on_off_p50": round(s["on"]["p50_ms"] / s["off"]["p50_ms"], 3),
            "ratio_on_off_p95": round(s["on"]["p95_ms"] / s["off"]["p95_ms"], 3),
            "ratio_off_celery_p50": round(s["off"]["p50_ms"] / s["celery"]["p50_ms"], 3)}


def fanout_bench(env_on: dict[str, str], width: int, delay_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, extra in (("off_1", {}), ("on", env_on), ("off_2", {})):
        config = WorkerConfig(count=1, pool="threads", concurrency=width, env={"ORCH_NODE_PATHS": str(PACK), **extra})
        with EmbeddedRedis(unix_socket=False) as server, WorkerProcesses(server.url, config):
            asyncio.run(engine_once(server.url, min(width, 20), 0.05))  # warm-up
            out[label] = asyncio.run(engine_once(server.url, width, delay_s))
        print(f"fan-out {width} {label}: efficiency {out[label]['efficiency']}", file=sys.stderr)
    off = (out["off_1"]["efficiency"] + out["off_2"]["efficiency"]) / 2
    out["ratio_on_off_efficiency"] = round(out["on"]["efficiency"] / off, 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--width", type=int, default=200)
    parser.add_argument("--delay-s", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with OtlpReceiver() as receiver:
        os.environ.update(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint, OTEL_SERVICE_NAME="bench-driver")
        tracing.configure("bench-driver")  # the driver's provider; spans only while a side says so
        tracing.instrument_celery()
        env_on = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        env_off = {"OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_SDK_DISABLED": "true"}
        with EmbeddedRedis() as off_redis, EmbeddedRedis() as on_redis, \
                WorkerProcesses(off_redis.url, WorkerConfig(count=1, concurrency=2, env=env_off)), \
                WorkerProcesses(on_redis.url, WorkerConfig(count=1, concurrency=2, env=env_on)):
            result: dict[str, Any] = {"chain": asyncio.run(chain_bench(off_redis.url, on_redis.url,
                                                                       args.runs, args.warmup))}
        os.environ.update(OTEL_SDK_DISABLED="true")  # fan-out "off" workers inherit no endpoint
        result["fanout"] = fanout_bench(env_on | {"OTEL_SDK_DISABLED": "false"}, args.width, args.delay_s)
        tracing.flush()
        time.sleep(1.0)
        result["spans_received"] = len(receiver.snapshot())
    result["config"] = {"runs": args.runs, "warmup": args.warmup, "width": args.width, "delay_s": args.delay_s,
                        "python": platform.python_version(), "cpus": os.cpu_count(),
                        "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    text = json.dumps(result, indent=2)
    print(text)
    out = args.out or RESULTS / f"tracing-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
