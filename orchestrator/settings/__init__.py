"""Process settings, read from the environment (prefix ``ORCH_``; ``REDIS_URL`` as is).

Names carry units. Split by concern, one module per group: ``store`` (Redis, retention,
budgets), ``kernel`` (limits every step enforces), ``worker`` (leases, the pool, the
sweeper, back-pressure, node discovery), ``egress``, ``storage`` (credentials, files,
databases, vectors, readable folders), ``sandbox`` (Code node, JSONata, stdio MCP),
``api`` (keys, limits, browsers), ``models`` and ``telemetry`` (traces, prices, budgets).
:class:`Settings` is all of them; it is built once per process by the entry points (the
API app factory, the worker process, the CLI, beat) with :func:`load_settings`, and each
subsystem takes the group it reads as an argument: a ``Settings`` is every group, and the
annotation says which one a subsystem may read.
"""

from __future__ import annotations

from functools import lru_cache

from orchestrator.kernel.errors import ConfigurationError
from orchestrator.settings.api import ApiSettings
from orchestrator.settings.egress import EgressSettings
from orchestrator.settings.kernel import KernelLimits
from orchestrator.settings.models import ModelSettings
from orchestrator.settings.sandbox import SandboxSettings
from orchestrator.settings.storage import SOURCE_EXAMPLES, StorageSettings
from orchestrator.settings.store import StoreSettings, broker_problem
from orchestrator.settings.telemetry import TelemetrySettings
from orchestrator.settings.worker import WorkerSettings

__all__ = [
    "SOURCE_EXAMPLES", "ApiSettings", "EgressSettings", "KernelLimits", "ModelSettings", "SandboxSettings",
    "Settings", "StorageSettings", "StoreSettings", "TelemetrySettings", "WorkerSettings", "get_settings",
    "load_settings",
]


class Settings(StoreSettings, KernelLimits, WorkerSettings, EgressSettings, StorageSettings, SandboxSettings,
               ApiSettings, ModelSettings, TelemetrySettings):
    """Every group: what an entry point builds and hands down."""


@lru_cache(maxsize=1)
def load_settings() -> Settings:
    """The process's settings, read from the environment once. Entry points only: a layout
    that cannot work (a Redis Cluster as the Celery broker) fails here, at start, naming the
    setting to change."""
    settings = Settings()
    problem = broker_problem(settings.redis_url, settings.broker_url)
    if problem:
        raise ConfigurationError(problem)
    return settings


get_settings = load_settings  # the name older callers and tests use (``cache_clear`` too)
