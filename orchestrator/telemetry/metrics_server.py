"""Prometheus metrics of a worker: every pool process's, served by the main process.

A prefork worker is several processes; each child updates the shared metric objects in
``orchestrator.telemetry.metrics``. With ``ORCH_WORKER_METRICS_PORT`` set, ``orchestrator worker``
points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh folder before Celery starts (so every child
writes its samples there) and the main process serves them all on that port: the worker
process (``workers/app.py``, an entry point) calls :func:`connect` with its settings.
"""

from __future__ import annotations

import logging
import os
import shutil
from typing import Any

from celery.signals import worker_init, worker_process_shutdown, worker_shutdown

from orchestrator.settings import WorkerSettings

log = logging.getLogger("workers.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
OWN_DIR_PREFIX = "orchestrator-metrics-"  # a folder `orchestrator worker` made, removed at shutdown


def connect(settings: WorkerSettings) -> None:
    """Serve the metrics on ``ORCH_WORKER_METRICS_PORT`` of ``settings`` when the worker
    starts (nothing when it is 0)."""
    port = settings.worker_metrics_port

    def serve(**_: Any) -> None:
        _serve_metrics(port)

    worker_init.connect(serve, weak=False, dispatch_uid="orchestrator.telemetry.metrics_server")


def _serve_metrics(port: int) -> None:
    if not port:
        return
    if not os.environ.get(MULTIPROC_ENV):
        log.warning("worker metrics need %s (set by `orchestrator worker`); not serving", MULTIPROC_ENV)
        return
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    start_http_server(port, registry=registry)
    log.info("worker metrics on :%d", port)


@worker_process_shutdown.connect
def _forget_process(pid: int | None = None, **_: Any) -> None:
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())  # type: ignore[no-untyped-call]


@worker_shutdown.connect
def _remove_samples(**_: Any) -> None:
    """The samples folder `orchestrator worker` created lives as long as the worker."""
    folder = os.environ.get(MULTIPROC_ENV, "")
    if os.path.basename(folder).startswith(OWN_DIR_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)
