"""Flow-control metrics: waits for limits, provider refusals, the rate each key runs at.

==========================================  =========  =====================================
metric                                      type       labels
==========================================  =========  =====================================
orchestrator_limit_acquired_total           counter    limit, outcome (granted, wait)
orchestrator_limit_wait_seconds             histogram  limit (how long a refused acquire waits)
orchestrator_limit_rate                     gauge      limit (units per window it runs at now:
                                                       declared, or learned from 429s)
orchestrator_provider_refused_total         counter    limit (429s answered by a provider)
orchestrator_workspace_in_flight            gauge      workspace (nodes holding a unit of its
                                                       ceiling, cluster-wide, last seen here)
orchestrator_workspace_waiting              gauge      workspace (nodes refused a unit lately)
orchestrator_workspace_ceiling_total        counter    workspace, outcome (granted, wait)
orchestrator_workspace_lane                 gauge      workspace, lane (1 for each lane assigned to an
                                                       active workspace; sampled from Redis at scrape
                                                       by the API, store/lanes.py)
==========================================  =========  =====================================

``limit`` is the limit's key as scoped in Redis (``ws:<workspace>:<key>`` for a node's
settings, ``endpoint:...`` for a model endpoint, ``origin:...`` for an HTTP origin). Keys
made per user would make one series each: past ``MAX_LABELS`` distinct keys in a process,
further ones are counted under ``other``.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from .metrics import REGISTRY

MAX_LABELS = 200
OTHER = "other"

LIMIT_ACQUIRED = Counter(
    "orchestrator_limit_acquired",
    "Rate-limit acquires, by limit key and outcome (granted, wait).",
    ["limit", "outcome"],
    registry=REGISTRY,
)
LIMIT_WAIT = Histogram(
    "orchestrator_limit_wait_seconds",
    "How long a node waits (rescheduled, its slot free) for a rate limit.",
    ["limit"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
LIMIT_RATE = Gauge(
    "orchestrator_limit_rate",
    "Units per window a limit key runs at now (declared, or learned from provider 429s).",
    ["limit"],
    multiprocess_mode="max",
    registry=REGISTRY,
)
PROVIDER_REFUSED = Counter(
    "orchestrator_provider_refused",
    "429 answers from providers (model endpoints, HTTP origins), by limit key.",
    ["limit"],
    registry=REGISTRY,
)

WORKSPACE_IN_FLIGHT = Gauge(
    "orchestrator_workspace_in_flight",
    "Nodes of a workspace holding a unit of its ceiling of nodes in flight (cluster-wide, as last seen).",
    ["workspace"],
    multiprocess_mode="mostrecent",
    registry=REGISTRY,
)
WORKSPACE_WAITING = Gauge(
    "orchestrator_workspace_waiting",
    "Nodes of a workspace refused a unit of its ceiling lately (rescheduled, holding nothing).",
    ["workspace"],
    multiprocess_mode="mostrecent",
    registry=REGISTRY,
)
WORKSPACE_CEILING = Counter(
    "orchestrator_workspace_ceiling",
    "Asks for a unit of a workspace's ceiling of nodes in flight, by outcome (granted, wait).",
    ["workspace", "outcome"],
    registry=REGISTRY,
)

WORKSPACE_LANE = Gauge(
    "orchestrator_workspace_lane",
    "1 for each lane (broker queue) assigned to an active workspace (sampled at scrape).",
    ["workspace", "lane"],
    multiprocess_mode="mostrecent",
    registry=REGISTRY,
)

_seen: set[str] = set()


def label(key: str) -> str:
    """``key``, or ``other`` once this process has seen ``MAX_LABELS`` distinct keys."""
    if key in _seen:
        return key
    if len(_seen) >= MAX_LABELS:
        return OTHER
    _seen.add(key)
    return key


def acquired(key: str, wait_s: float, rate: float | None) -> None:
    name = label(key)
    LIMIT_ACQUIRED.labels(limit=name, outcome="wait" if wait_s > 0 else "granted").inc()
    if wait_s > 0:
        LIMIT_WAIT.labels(limit=name).observe(wait_s)
    if rate is not None:
        LIMIT_RATE.labels(limit=name).set(rate)


def refused(key: str) -> None:
    PROVIDER_REFUSED.labels(limit=label(key)).inc()


def ceiling(workspace: str, in_flight: int, waiting: int | None, wait_s: float | None) -> None:
    """A ceiling's answer: ``wait_s`` None for a leave, 0 for a grant."""
    name = workspace if label(f"workspace:{workspace}") != OTHER else OTHER
    WORKSPACE_IN_FLIGHT.labels(workspace=name).set(in_flight)
    if waiting is not None:
        WORKSPACE_WAITING.labels(workspace=name).set(waiting)
    if wait_s is not None:
        WORKSPACE_CEILING.labels(workspace=name, outcome="wait" if wait_s > 0 else "granted").inc()


def lanes(table: dict[str, tuple[int, ...]]) -> None:
    """Every active workspace's lanes as sampled now (the first ``MAX_LABELS`` workspaces by name)."""
    WORKSPACE_LANE.clear()
    for workspace in sorted(table)[:MAX_LABELS]:
        for lane in table[workspace]:
            WORKSPACE_LANE.labels(workspace=workspace, lane=str(lane)).set(1)
