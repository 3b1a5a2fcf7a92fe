"""Running nodes: leases, the Celery pool, the sweeper, back-pressure, where node types are found.

Read by workers, the sweeper, admission, node discovery (``workers/``,
``orchestrator/service/``). One group of :class:`orchestrator.settings.Settings`, which
every entry point builds once; a subsystem takes the group it reads (a ``Settings`` is each
of them).
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.settings.base import SettingsGroup


class WorkerSettings(SettingsGroup):
    # The Celery broker when it is not the state Redis: an ``amqp://`` URL puts node messages
    # on RabbitMQ (a quorum queue; orchestrator/queue/app.py, docs/deployment.md). Unset:
    # the broker is REDIS_URL's Redis (the embedded default and small deployments).
    broker_url: str | None = None
    # Fair share between workspaces: node messages travel on this many broker queues
    # ("lanes"; orchestrator/queue/lanes.py), a run's lane fixed by its workspace, and every
    # worker consumes them all in turn, so a flood of one workspace queues in its own lane
    # only. 1 = one FIFO queue for everyone. Every process of a deployment must agree.
    lanes: int = Field(default=8, ge=1, le=256)
    # A ceiling of nodes in flight per workspace, cluster-wide (orchestrator/store/ceiling.py):
    # a node over it is rescheduled holding nothing. 0 = none. Per workspace, JSON:
    # '{"acme": {"max_in_flight": 500}}' (0 there: none for that workspace).
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

