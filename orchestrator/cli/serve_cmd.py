"""``orchestrator serve``: the HTTP API under uvicorn.

With ``REDIS_URL`` set, the API uses that Redis and expects workers to be run elsewhere
(``orchestrator worker``, docker compose). Without it, this command starts an embedded
redis-server and ``--local-workers`` Celery worker processes it owns, so one command
serves a working system; they are stopped by pid when the server exits, on SIGINT and
on SIGTERM alike.

Safe default: without API keys (``ORCH_API_KEYS``) the API has no authentication, so it
is served on loopback only. Asking for another ``--host`` without keys is refused (exit
code 2) unless ``ORCH_ALLOW_OPEN_API=1`` says an open API is intended.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import ipaddress
import os
import sys
from typing import Any

from orchestrator.settings import Settings, get_settings

from ._signals import interrupted_exit_code, terminate_as_interrupt

LOOPBACK_NAMES = ("localhost",)
KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this (uvicorn's default)


def add_parser(subparsers: Any) -> None:
    settings = get_settings()
    p = subparsers.add_parser("serve", help="serve the HTTP API (uvicorn)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default=settings.api_host,
                   help="address to bind (default: ORCH_API_HOST or %(default)s); a "
                        "non-loopback address needs ORCH_API_KEYS or ORCH_ALLOW_OPEN_API=1")
    p.add_argument("--port", type=int, default=settings.api_port,
                   help="TCP port (default: ORCH_API_PORT or %(default)s)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument(
        "--local-workers",
        type=int,
        default=1,
        help="Celery workers to start when REDIS_URL is unset (embedded mode)",
    )
    p.add_argument("--log-level", default="info", help="uvicorn log level (default info)")
    p.set_defaults(func=serve_command)


def is_loopback(host: str) -> bool:
    if host.strip().lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def keys_configured(settings: Settings) -> bool:
    """True when the API will ask for a key (``ORCH_API_KEYS`` or ``ORCH_API_KEYS_FILE``);
    a placeholder or malformed key is a ConfigurationError naming the setting."""
    from orchestrator.api.principal import key_ring

    return key_ring(settings).enabled


def open_api_refusal(host: str, settings: Settings) -> str | None:
    """Why serving on ``host`` is refused (None: allowed)."""
    if keys_configured(settings) or settings.allow_open_api or is_loopback(host):
        return None
    return (f"refusing to serve the API on {host} without API keys: anyone who can reach "
            f"it could run graphs. Set ORCH_API_KEYS (comma-separated bearer keys), or "
            f"ORCH_ALLOW_OPEN_API=1 to serve it open anyway, or bind --host 127.0.0.1")


def serve_command(args: argparse.Namespace) -> int:
    from orchestrator.kernel.errors import ConfigurationError

    settings = get_settings()
    try:
        refusal = open_api_refusal(args.host, settings)
    except ConfigurationError as exc:  # a placeholder or malformed key: say which, start nothing
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    if not keys_configured(settings):
        scope = ("loopback only" if is_loopback(args.host)
                 else "OPEN to the network (ORCH_ALLOW_OPEN_API=1)")
        print(f"no API keys (ORCH_API_KEYS unset): serving without authentication on "
              f"{args.host}, {scope}", file=sys.stderr, flush=True)
    try:
        with terminate_as_interrupt():
            return _serve(args)
    except KeyboardInterrupt as exc:  # the ExitStack has stopped redis and the workers
        return interrupted_exit_code(exc)


GC_YOUNG_ALLOCATIONS = 20_000  # allocations between collections of the youngest generation (CPython: 700)


def served_app() -> Any:
    """The app factory ``orchestrator serve`` gives uvicorn (in each of its processes):
    :func:`orchestrator.api.create_app`, then everything loaded so far (modules, registry,
    app) frozen out of the garbage collector's scans, as a worker does (workers/tasks.py):
    it lives as long as the process. Each start leaves a few objects that live on (bounded
    caches), so full collections came every few hundred starts, each scanning the whole
    heap: measured at 50 clients of 52-node starts, 21 full collections in 7 s, 1.4 s of
    the API's CPU, the longest 165 ms (most of the p99). The youngest generation is also
    collected less often (every 20,000 allocations, not 700): 50 requests in flight keep
    thousands of young objects alive, which each of those collections scanned and promoted
    (with both: the collector's time per start fell ~4x, the p99 from ~105 to ~40 ms)."""
    from orchestrator.api import create_app

    app = create_app()
    settle_heap()
    return app


def settle_heap() -> None:
    """The API process's collector settings (see :func:`served_app`): what is loaded so far
    frozen, the youngest generation collected every ``GC_YOUNG_ALLOCATIONS`` allocations,
    the older ones at their usual ratios. Also for a process that starts runs as the API
    does (``bench/``)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_ALLOCATIONS)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    with contextlib.ExitStack() as stack:
        settings = get_settings()
        if settings.redis_url is None:
            from orchestrator.local.embedded_redis import EmbeddedRedis
            from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses

            print("starting an embedded redis-server (REDIS_URL is unset)…",
                  file=sys.stderr, flush=True)
            server = stack.enter_context(EmbeddedRedis(unix_socket=False,
                                                       maxmemory_mb=settings.embedded_redis_maxmemory_mb))
            os.environ["REDIS_URL"] = server.url  # read by the app factory in each process
            get_settings.cache_clear()
            print(f"embedded redis at {server.url} (pid {server.pid})", flush=True)
            if args.local_workers > 0:
                workers = WorkerProcesses(server.url, WorkerConfig(count=args.local_workers), settings=settings)
                stack.callback(workers.stop)
                print(f"starting {args.local_workers} Celery worker(s)…",
                      file=sys.stderr, flush=True)
                workers.start()
        from orchestrator.api.connections import PROTOCOL

        uvicorn.run(
            "orchestrator.cli.serve_cmd:served_app",
            factory=True,
            http=PROTOCOL,  # header and body read deadlines, connections per client
            # The standard loop, not uvloop (installed for the workers, and uvicorn's "auto"
            # would take it): no gain measured for the API's starts (bench/README.md).
            loop="asyncio",
            timeout_keep_alive=KEEP_ALIVE_S,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
        )
    return 0
