"""``orchestrator worker``: run a Celery worker for node tasks with the project's settings.

The process is replaced (``exec``) by ``celery -A workers.app worker``, so signals reach
Celery directly (SIGTERM = warm shutdown). ``REDIS_URL`` must point at the broker.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

from orchestrator.settings import get_settings


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("worker", help="run a Celery worker for node tasks")
    p.add_argument("--concurrency", "-c", type=int, default=None,
                   help="threads pool: node steps in flight at once (default ORCH_NODE_CONCURRENCY); "
                        "prefork: pool processes (default ORCH_WORKER_CONCURRENCY)")
    p.add_argument("--queues", "-Q", default=None,
                   help="queues to consume, comma separated (default: every lane, ORCH_LANES)")
    p.add_argument("--pool", "-P", default=None,
                   help="Celery pool: threads (many I/O-bound nodes on one event loop) or prefork "
                        "(CPU-heavy work); default ORCH_WORKER_POOL")
    p.add_argument("--loglevel", "-l", default="INFO", help="celery log level (default INFO)")
    p.add_argument("--hostname", "-n", default=None, help="worker node name (default w@%%h)")
    p.set_defaults(func=worker_command)


def celery_argv(args: argparse.Namespace) -> list[str]:
    settings = get_settings()
    pool = args.pool or settings.worker_pool
    default = settings.worker_concurrency if pool == "prefork" else settings.node_concurrency
    concurrency = args.concurrency or default
    return [
        sys.executable, "-m", "celery", "-A", "workers.app", "worker",
        "-P", pool, "-c", str(concurrency),
        "-n", args.hostname or "w@%h", "--loglevel", args.loglevel,
        "--without-gossip", "--without-mingle",
    ] + (["-Q", args.queues] if args.queues else [])


def worker_command(args: argparse.Namespace) -> int:
    if not get_settings().redis_url:  # unset or empty: never guess a server
        print("error: set REDIS_URL to the broker's URL (e.g. redis://localhost:6379/0)",
              file=sys.stderr)
        return 2
    argv = celery_argv(args)
    os.environ.setdefault("AGNO_TELEMETRY", "false")
    if get_settings().worker_metrics_port and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # every pool process writes its samples here; the main process serves them all
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="orchestrator-metrics-")
    os.execv(argv[0], argv)  # noqa: S606 - argv is built above, no shell
    return 0  # not reached
