"""The worker process's Celery application: ``celery -A workers.app worker`` (the CLI's
``orchestrator worker``, the embedded workers, docker-compose and the k8s manifests).

``celery_app`` is built from the process settings (``orchestrator.queue.app.make_celery``)
and made current, so the node tasks (``workers.tasks``) and beat's tasks (``workers.beat``)
register on it. A worker imports ``workers.tasks`` at start (``include``); other processes
send tasks by name and never import this module.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Agno phones home unless told not to; set before any node imports it.
os.environ.setdefault("AGNO_TELEMETRY", "false")

from celery.signals import worker_ready

from orchestrator.queue.app import READY_FILE_ENV, make_celery
from orchestrator.settings import load_settings
from orchestrator.telemetry import metrics_server

_settings = load_settings()  # this process's settings: the worker process is an entry point
celery_app = make_celery(_settings.redis_url, _settings, include=["workers.tasks"])
celery_app.set_current()
metrics_server.connect(_settings)  # the worker's metrics port, served when the worker starts


@worker_ready.connect
def _announce_ready(**_: Any) -> None:
    """Touch the readiness file a parent process waits for (see embedded_workers)."""
    path = os.environ.get(READY_FILE_ENV)
    if path:
        Path(path).write_text(str(os.getpid()))
