"""Prometheus metrics shared by the API and the workers.

The objects live in one registry (``REGISTRY``) so a process exposes exactly these, and
tests can create apps repeatedly without "duplicated timeseries" errors. Workers import
the same objects and update them in their own process (scrape each worker, or run a
multiprocess collector); the API updates what it sees and samples Redis at scrape time
(``orchestrator/api/health.py``).

==================================  =========  =======================================
metric                              type       labels
==================================  =========  =======================================
orchestrator_runs_started_total     counter    trigger (manual, webhook, chat, rerun, schedule)
orchestrator_runs                   gauge      status (runs of that status right now,
                                               sampled at scrape: active ones only)
orchestrator_run_finished_total     counter    status (terminal statuses seen by this process)
orchestrator_node_duration_seconds  histogram  node_type
orchestrator_node_runs_total        counter    node_type, status (succeeded, failed, waiting)
orchestrator_queue_depth            gauge      queue (LLEN of a Celery queue; "runs": nodes on runs' queues)
orchestrator_events_published_total counter    event_type
orchestrator_sse_streams            gauge      (open SSE connections in this process)
orchestrator_nodes_in_flight        gauge      worker (node steps running in that worker process)
orchestrator_admission_rejected_total counter  limit (starts refused, by the limit hit: 429s, skipped schedules)
orchestrator_schedule_skipped_total counter    reason (scheduled fires that started no run: overloaded)
orchestrator_stale_refused_total    counter    action (complete, renew: refused because a later claim
                                               of the node superseded the sender's fencing token)
orchestrator_model_*                counter    model usage and cost (telemetry/model_metrics.py)
==================================  =========  =======================================
"""

from __future__ import annotations

from typing import Any, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

REGISTRY: CollectorRegistry = CollectorRegistry(auto_describe=True)

RUNS_STARTED = Counter(
    "orchestrator_runs_started", "Runs started, by trigger kind.", ["trigger"], registry=REGISTRY
)
RUNS = Gauge(
    "orchestrator_runs", "Runs by status (sampled at scrape).", ["status"], registry=REGISTRY
)
RUNS_FINISHED = Counter(
    "orchestrator_run_finished",
    "Runs that reached a terminal status.",
    ["status"],
    registry=REGISTRY,
)
NODE_DURATION = Histogram(
    "orchestrator_node_duration_seconds",
    "Node execution time, by node type.",
    ["node_type"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
NODE_RUNS = Counter(
    "orchestrator_node_runs",
    "Node executions that ended, by node type and status.",
    ["node_type", "status"],
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "orchestrator_queue_depth", "Messages waiting in a Celery queue.", ["queue"], registry=REGISTRY
)
EVENTS_PUBLISHED = Counter(
    "orchestrator_events_published",
    "Run events appended to streams, by event type.",
    ["event_type"],
    registry=REGISTRY,
)
STALE_REFUSED = Counter(
    "orchestrator_stale_refused",
    "Completions and lease renewals refused: a later claim of the node superseded their token.",
    ["action"],
    registry=REGISTRY,
)
SSE_STREAMS = Gauge(
    "orchestrator_sse_streams", "Open SSE event streams in this process.", registry=REGISTRY
)
SLOW_CLIENTS_CUT = Counter(
    "orchestrator_api_slow_clients_cut_total",
    "Connections this API process closed because their client, more than 1 MiB behind, took less than 1 MiB "
    "within ORCH_API_SEND_STALL_S, or left more than 16 MiB unsent.",
    registry=REGISTRY,
)

NODES_IN_FLIGHT = Gauge(
    "orchestrator_nodes_in_flight",
    "Node steps running right now in a worker process.",
    ["worker"],
    multiprocess_mode="livesum",
    registry=REGISTRY,
)
ADMISSION_REJECTED = Counter(
    "orchestrator_admission_rejected",
    "Run starts refused (429, or a skipped schedule) because queued work was above a limit.",
    ["limit"],
    registry=REGISTRY,
)
SCHEDULES_SKIPPED = Counter(
    "orchestrator_schedule_skipped",
    "Scheduled fires that started no run, by reason.",
    ["reason"],
    registry=REGISTRY,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST


M = TypeVar("M", Counter, Gauge, Histogram)
_CHILDREN: dict[tuple[int, tuple[str, ...]], Any] = {}
CHILDREN_MAX = 4096  # labelled series kept by :func:`child` (node types x statuses, event types...)


def child(metric: M, *values: str) -> M:
    """``metric.labels(*values)``, kept: a node step updates a handful of series, and
    ``labels`` (validation, a lock, a lookup) was ~2% of a node's worker CPU."""
    memo = (id(metric), values)
    found = _CHILDREN.get(memo)
    if found is None:
        if len(_CHILDREN) >= CHILDREN_MAX:
            _CHILDREN.clear()
        found = _CHILDREN[memo] = metric.labels(*values)
    return found  # type: ignore[no-any-return]


def render() -> bytes:
    """The exposition text of every metric above."""
    return generate_latest(REGISTRY)
