"""Running nodes: leases, the Celery pool, the sweeper, back-pressure, where node types are found.

Read by workers, the sweeper, admission, node discovery (``workers/``,
``orchestrator/service/``). One group of :class:`orchestrator.settings.Settings`, which
every entry point builds once; a subsystem takes the group it reads (a ``Settings`` is each
of them).
"""

from __future__ import annotations

import json

from pydantic import Field, field_validator

from orchestrator.settings.base import SettingsGroup

LIMIT_FIELDS = ("max_in_flight", "weight")  # what an ORCH_WORKSPACE_LIMITS entry may carry


def parse_workspace_limits(raw: str) -> dict[str, dict[str, int]]:
    """``ORCH_WORKSPACE_LIMITS`` parsed: workspace -> {"max_in_flight": N >= 0, "weight": N >= 1}
    (either or both). A malformed value raises ValueError naming the setting and the entry."""
    try:
        table = json.loads(raw or "{}")
    except ValueError as exc:
        raise ValueError(f"ORCH_WORKSPACE_LIMITS is not JSON: {exc}") from None
    if not isinstance(table, dict):
        raise ValueError('ORCH_WORKSPACE_LIMITS must be an object: {"<workspace>": {"max_in_flight": N, "weight": N}}')
    parsed: dict[str, dict[str, int]] = {}
    for workspace, entry in table.items():
        where = f"ORCH_WORKSPACE_LIMITS[{workspace!r}]"
        if not isinstance(entry, dict) or not entry:
            raise ValueError(f'{where} must be an object such as {{"max_in_flight": 500}} or {{"weight": 3}}, '
                             f"got {entry!r}")
        unknown = sorted(set(entry) - set(LIMIT_FIELDS))
        if unknown:
            raise ValueError(f"{where} has unknown field(s) {', '.join(unknown)}: it may carry "
                             f"{' and '.join(LIMIT_FIELDS)}")
        for field, least in (("max_in_flight", 0), ("weight", 1)):
            value = entry.get(field, least)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{where}.{field} must be a whole number >= {least}, got {value!r}")
        parsed[str(workspace)] = {str(k): int(v) for k, v in entry.items()}
    return parsed


class WorkerSettings(SettingsGroup):
    # The Celery broker when it is not the state Redis: an ``amqp://`` URL puts node messages
    # on RabbitMQ (a quorum queue; orchestrator/queue/app.py, docs/deployment.md). Unset:
    # the broker is REDIS_URL's Redis (the embedded default and small deployments).
    broker_url: str | None = None
    # Fair share between workspaces: node messages travel on this many broker queues
    # ("lanes"; orchestrator/queue/lanes.py), and every worker consumes them all in turn. A
    # workspace is assigned its own lane(s) when it starts a run (the least loaded ones;
    # orchestrator/store/lanes.py), so a flood of one workspace queues in its own lane only;
    # with more active workspaces than lanes they share evenly (raise this then). 1 = one
    # FIFO queue for everyone. Every process of a deployment must agree.
    lanes: int = Field(default=8, ge=1, le=256)
    # A workspace that starts no run for this long frees its lanes for others.
    lane_idle_s: float = Field(default=3600.0, gt=0)
    # A ceiling of nodes in flight per workspace, cluster-wide (orchestrator/store/ceiling.py):
    # a node over it is rescheduled holding nothing. 0 = none. Per workspace, JSON:
    # '{"acme": {"max_in_flight": 500}}' (0 there: none for that workspace). The same entry
    # may carry a "weight" (default 1): that many lanes of its own, so a saturated cluster
    # serves the workspace that many turns per rotation (orchestrator/store/lanes.py).
    workspace_max_in_flight: int = Field(default=0, ge=0)
    workspace_limits: str = ""
    node_lease_s: float = 60.0  # a running node's lease; renewed by a heartbeat while it runs
    # kombu's redelivery of unacked messages, counted on each worker's own clock. The
    # sweeper is the redelivery path (lost leases, lost messages, overdue retries): keep
    # this far above any node, retry delay and clock skew so kombu never sends a healthy
    # node again (a copy it sends anyway is refused by the claim). docs/architecture.md.
    visibility_timeout_s: int = 24 * 3600
    unacked_restore_interval_s: float = 5.0  # how often kombu sweeps stale unacked messages
    cancel_poll_s: float = 0.2  # how often a running node checks whether its run was cancelled
    # A chain of pure nodes (set_fields, filter, if, ...: kernel/fusion.py) runs in the step
    # that readies it and is stored in one call: at most this many links after the first,
    # and no new link once the chain has run this long (its events are stored when it
    # ends). 0 = every node stored on its own.
    fuse_max_nodes: int = Field(default=32, ge=0, le=1000)
    fuse_max_ms: float = Field(default=20.0, gt=0, le=10_000)
    # The Celery pool of `orchestrator worker` and embedded workers: "threads" (default)
    # runs up to node_concurrency node steps of one process at once on one event loop;
    # "prefork" runs worker_concurrency single-node processes (CPU-heavy deployments).
    worker_pool: str = "threads"
    node_concurrency: int = 100  # node steps in flight per worker process (threads pool)
    worker_concurrency: int = 2  # pool processes per worker under -P prefork
    offload_threads: int = 8  # per process: threads running sync executors / CPU-heavy steps off the loop
    # Serve Prometheus metrics of a worker (all its pool processes) on this port; 0 = off.
    worker_metrics_port: int = 0
    # Ready successors a process has no free slot for wait on the run's queue in Redis; one
    # drain message per this many lets other workers with free slots take them.
    drain_batch: int = 25
    sweep_period_s: float = 5.0  # how often the sweeper looks for timed-out runs and lost nodes
    max_node_reclaims: int = 3  # a node whose worker died more often than this fails the run
    # A node sent and not claimed for this long (its message was lost), or ready and never
    # sent, or a retry overdue by this long, is sent (again) by the sweeper.
    undispatched_grace_s: float = 10.0
    # Back-pressure: new runs (API, webhooks, chat) get 429 while this many node tasks or
    # more wait in the queue; 0 = never refuse. Retry-After of a 429, in seconds:
    max_queued_nodes: int = 10_000
    overload_retry_after_s: int = 5
    # Extra folders scanned for node folders (os.pathsep separated).
    node_paths: str = ""
    node_entry_point_group: str = "orchestrator.nodes"
    # Child runs (a sub-graph node, a graph offered as a tool; orchestrator/service/children.py):
    # how deep runs may nest (a child of a child ...) and how many children one run may start.
    child_max_depth: int = 8
    child_max_per_run: int = 10_000  # a Loop's iterations are child runs too (max_iterations: 10,000)

    @field_validator("workspace_limits")
    @classmethod
    def _workspace_limits_parse(cls, value: str) -> str:
        parse_workspace_limits(value)  # a malformed entry fails every process at start, naming it
        return value
