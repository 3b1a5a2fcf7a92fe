"""``orchestrator serve``: the HTTP API under uvicorn.

With ``REDIS_URL`` set, the API uses that Redis and expects workers to be run elsewhere
(``orchestrator worker``, docker compose). Without it, this command starts an embedded
redis-server and ``--local-workers`` Celery worker processes it owns, so one command
serves a working system; they are stopped by pid when the server exits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from typing import Any

from orchestrator.settings import get_settings


def add_parser(subparsers: Any) -> None:
    settings = get_settings()
    p = subparsers.add_parser("serve", help="serve the HTTP API (uvicorn)")
    p.add_argument("--host", default=settings.api_host)
    p.add_argument("--port", type=int, default=settings.api_port)
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument(
        "--local-workers",
        type=int,
        default=1,
        help="Celery workers to start when REDIS_URL is unset (embedded mode)",
    )
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    import uvicorn

    with contextlib.ExitStack() as stack:
        if get_settings().redis_url is None:
            from orchestrator.embedded_redis import EmbeddedRedis
            from orchestrator.embedded_workers import WorkerProcesses

            server = stack.enter_context(EmbeddedRedis(unix_socket=False))
            os.environ["REDIS_URL"] = server.url  # read by the app factory in each process
            get_settings.cache_clear()
            print(f"embedded redis at {server.url} (pid {server.pid})")
            if args.local_workers > 0:
                workers = WorkerProcesses(server.url, count=args.local_workers)
                workers.start()
                stack.callback(workers.stop)
        uvicorn.run(
            "orchestrator.api:create_app",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
        )
    return 0
