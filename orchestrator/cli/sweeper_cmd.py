"""``orchestrator sweeper`` and ``orchestrator beat``: the run-liveness and schedule processes.

``sweeper`` runs :class:`orchestrator.service.sweeper.Sweeper` every ``--period-s`` until SIGTERM /
SIGINT (``--once``: one pass, print what it did as JSON). Any number may run: each pass
takes a short Redis lock.

``beat`` syncs the stored graphs' schedule triggers into redbeat entries, then replaces
itself (``exec``) with ``celery -A workers.beat beat -S redbeat.RedBeatScheduler``. Several
beat replicas are safe: redbeat's Redis lock lets one send at a time.

Both need ``REDIS_URL``. This module registers both sub-commands.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from dataclasses import asdict
from typing import Any

from orchestrator.settings import get_settings
from orchestrator.store import redis_client


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("sweeper", help="time out runs and requeue nodes of lost workers")
    p.add_argument("--period-s", type=float, default=None,
                   help="seconds between passes (default: ORCH_SWEEP_PERIOD_S or 5)")
    p.add_argument("--once", action="store_true", help="one pass, print its report as JSON")
    p.set_defaults(func=sweeper_command)
    b = subparsers.add_parser("beat", help="run celery beat for schedule triggers (redbeat)")
    b.add_argument("--loglevel", "-l", default="INFO", help="celery log level (default INFO)")
    b.set_defaults(func=beat_command)


def _need_redis() -> str | None:
    url = get_settings().redis_url
    if url is None:
        print("error: set REDIS_URL to the broker's URL (e.g. redis://localhost:6379/0)",
              file=sys.stderr)
    return url


async def _sweep(url: str, period_s: float | None, once: bool) -> int:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.sweeper import Sweeper
    from orchestrator.store.redis_store import RedisRunStore

    settings = get_settings()
    store = RedisRunStore.from_url(url, settings)
    app = make_celery(url, settings)
    sweeper = Sweeper(store, make_dispatch(app), settings)
    try:
        if once:
            print(json.dumps(asdict(await sweeper.sweep_once())))
            return 0
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)  # end between passes, never inside one
        await sweeper.run_forever(period_s, stop=stop)
        return 0
    finally:
        await store.close()
        app.close()


def sweeper_command(args: argparse.Namespace) -> int:
    url = _need_redis()
    if url is None:
        return 2
    return asyncio.run(_sweep(url, args.period_s, args.once))


async def _sync(url: str) -> None:
    from orchestrator.queue.app import make_celery
    from orchestrator.service.graph_store import GraphStore
    from orchestrator.service.plugins import get_registry
    from orchestrator.service.schedules import configure_beat, sync_schedules

    settings = get_settings()
    app = make_celery(url, settings)  # beat's app (workers.beat): redbeat configured alike
    configure_beat(app, url, settings)
    client = redis_client.client(url, decode_responses=True)
    try:
        report = await sync_schedules(app, GraphStore(client, get_registry(settings), settings))
        print(f"schedules: {len(report.added)} added, {len(report.updated)} updated, "
              f"{len(report.removed)} removed", flush=True)
        for problem in report.invalid:
            print(f"schedule skipped: {problem}", file=sys.stderr, flush=True)
    finally:
        await client.aclose()


def beat_argv(loglevel: str) -> list[str]:
    from orchestrator.service.schedules import SCHEDULER

    return [sys.executable, "-m", "celery", "-A", "workers.beat", "beat", "-S", SCHEDULER,
            "--loglevel", loglevel]


def beat_command(args: argparse.Namespace) -> int:
    url = _need_redis()
    if url is None:
        return 2
    os.environ.setdefault("AGNO_TELEMETRY", "false")
    asyncio.run(_sync(url))
    argv = beat_argv(args.loglevel)
    os.execv(argv[0], argv)  # noqa: S606 - argv is built above, no shell
    return 0  # not reached
