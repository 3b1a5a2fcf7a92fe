"""Fixtures for the deployment tests: a Redis the module owns, the launcher of compose
services, and docker-compose.yml as compose reads it (see ``harness.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.local.embedded_redis import EmbeddedRedis

from .harness import API_KEY, Launcher, load_compose


@pytest.fixture(scope="module")
def redis_server() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(unix_socket=False, appendonly=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def launcher(redis_server: EmbeddedRedis, tmp_path: Path) -> Iterator[Launcher]:
    runner = Launcher(redis_server.url, tmp_path)
    try:
        yield runner
    finally:
        runner.stop_all()


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """docker-compose.yml as compose would see it with ``ORCH_API_KEYS`` set."""
    return load_compose({"ORCH_API_KEYS": API_KEY})
