"""Schedules: stored graphs' ``schedule_trigger`` nodes kept as Celery beat entries.

Beat runs with celery-redbeat's ``RedBeatScheduler``: entries live in Redis and every
beat process takes one Redis lock before it sends anything, so several beat replicas
never fire an entry twice (the others wait as hot standbys). Each entry sends
``orchestrator.schedule_fire(graph_id, node_id)`` (``workers/beat.py``), which starts a run
of the graph's latest version from that node.

Redis keys (prefix ``{p}:beat``, owned by redbeat): ``{p}:beat:schedule`` (zset entry key
-> next due time), ``{p}:beat:lock`` (the beat lock, ``lock_timeout_s``),
``{p}:beat:statics`` and ``{p}:beat:entry:{graph_id}:{node_id}`` (hash: definition,
meta). Entries carry no TTL: :func:`sync_schedules` deletes the entry of every node or
graph that no longer exists.

Contract of :func:`sync_entries`: afterwards the entries under ``{p}:beat:entry:`` are
exactly the given specs; an unchanged entry keeps its last-run time (re-saving it would
fire it again), a changed one is replaced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from celery import Celery
from celery.schedules import BaseSchedule, crontab, schedule

from orchestrator.kernel.errors import OrchestratorError, ParameterError
from orchestrator.settings import Settings
from orchestrator.settings.store import is_cluster_url

if TYPE_CHECKING:
    from orchestrator.service.graph_store import GraphStore

log = logging.getLogger("orchestrator.service.schedules")

SCHEDULE_NODE_TYPE = "schedule_trigger"
FIRE_TASK = "orchestrator.schedule_fire"  # args: (graph_id, node_id)
SYNC_TASK = "orchestrator.schedules_sync"  # re-reads every stored graph
SCHEDULER = "redbeat.RedBeatScheduler"
MAX_LOOP_INTERVAL_S = 5.0  # beat notices a new or changed entry within this
SYNC_INTERVAL_S = 30.0  # how often beat asks a worker to re-scan stored graphs
ENTRY_PREFIX = ":entry:"
PAGE = 200


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule: a ``schedule_trigger`` node of a stored graph."""

    graph_id: str
    node_id: str
    cron: str | None = None
    interval_s: float | None = None

    @property
    def name(self) -> str:
        return f"{ENTRY_PREFIX}{self.graph_id}:{self.node_id}"

    def celery_schedule(self) -> BaseSchedule:
        """The Celery schedule; raises ``ParameterError`` naming the graph, node, parameter."""
        if self.interval_s is not None:
            return schedule(run_every=timedelta(seconds=self.interval_s))
        fields = (self.cron or "").split()
        if len(fields) != 5:
            raise ParameterError(
                f"cron must have five fields (minute hour day month weekday); got {self.cron!r}",
                graph_id=self.graph_id, node_id=self.node_id, parameter="cron")
        minute, hour, day, month, weekday = fields
        try:
            return crontab(minute=minute, hour=hour, day_of_month=day, month_of_year=month,
                           day_of_week=weekday)
        except (ValueError, TypeError) as exc:
            raise ParameterError(f"cron {self.cron!r} is not valid: {exc}", graph_id=self.graph_id,
                                 node_id=self.node_id, parameter="cron") from None


@dataclass
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)  # "graph/node: why"


def schedules_in(graph: dict[str, Any]) -> list[ScheduleSpec]:
    """Every ``schedule_trigger`` node of a graph JSON with a cron or an interval set."""
    gid = str(graph.get("id", ""))
    out: list[ScheduleSpec] = []
    for node in graph.get("nodes") or []:
        if not isinstance(node, dict) or node.get("type") != SCHEDULE_NODE_TYPE:
            continue
        if (node.get("settings") or {}).get("disabled"):
            continue
        data = node.get("data") or {}
        cron = data.get("cron")
        interval = data.get("interval_s")
        if isinstance(cron, str) and cron.strip():
            out.append(ScheduleSpec(gid, str(node["id"]), cron=cron.strip()))
        elif isinstance(interval, int | float) and not isinstance(interval, bool) and interval > 0:
            out.append(ScheduleSpec(gid, str(node["id"]), interval_s=float(interval)))
    return out


def key_prefix(settings: Settings) -> str:
    return f"{settings.key_prefix}:beat"


def configure_beat(app: Celery, redis_url: str, settings: Settings) -> None:
    """Point redbeat at ``redis_url`` with this product's key prefix and lock. redbeat's
    entries live on one plain Redis: on a Redis Cluster (REDIS_URL ``redis+cluster://``)
    that is ``ORCH_CONTROL_REDIS_URL``, and without it beat refuses to start."""
    if is_cluster_url(redis_url):
        if not settings.control_redis_url:
            raise OrchestratorError(
                "schedules (redbeat) need a plain Redis: REDIS_URL names a Redis Cluster, so set "
                "ORCH_CONTROL_REDIS_URL=redis://host:port/db (a small Redis of its own)")
        redis_url = settings.control_redis_url
    app.conf.update(
        redbeat_redis_url=redis_url,
        redbeat_redis_options={},
        redbeat_key_prefix=key_prefix(settings),
        redbeat_lock_timeout=int(MAX_LOOP_INTERVAL_S * 5),
        beat_max_loop_interval=MAX_LOOP_INTERVAL_S,
        beat_scheduler=SCHEDULER,
        beat_schedule={
            "schedules-sync": {"task": SYNC_TASK, "schedule": SYNC_INTERVAL_S},
        },
    )


def sync_entries(app: Celery, specs: list[ScheduleSpec]) -> SyncReport:
    """Make the beat entries exactly ``specs`` (see the module contract). Blocking I/O."""
    from redbeat.schedulers import RedBeatSchedulerEntry, ensure_conf, get_redis

    conf = ensure_conf(app)
    report = SyncReport()
    client = get_redis(app)
    prefix = conf.key_prefix + ENTRY_PREFIX
    existing = {_text(k) for k in client.zrange(conf.schedule_key, 0, -1)}
    existing = {k for k in existing if k.startswith(prefix)}
    wanted: set[str] = set()
    for spec in specs:
        try:
            sched = spec.celery_schedule()
        except OrchestratorError as exc:
            report.invalid.append(f"{spec.graph_id}/{spec.node_id}: {exc.message}")
            continue
        entry = RedBeatSchedulerEntry(name=spec.name, task=FIRE_TASK, schedule=sched,
                                      args=[spec.graph_id, spec.node_id], app=app)
        wanted.add(entry.key)
        if entry.key in existing:
            try:
                old = RedBeatSchedulerEntry.from_key(entry.key, app=app)
            except KeyError:
                old = None
            if old is not None and old.task == FIRE_TASK and old.schedule == sched \
                    and list(old.args) == list(entry.args):
                continue
            entry.delete()  # a changed schedule starts afresh
            report.updated.append(spec.name)
        else:
            report.added.append(spec.name)
        entry.save()
    for key in sorted(existing - wanted):
        client.zrem(conf.schedule_key, key)
        client.delete(key)
        report.removed.append(key[len(conf.key_prefix):])
    return report


async def scan_graphs(graphs: GraphStore) -> list[ScheduleSpec]:
    """The schedules of every stored graph's latest version (graphs that no longer
    validate are skipped with a warning naming the error)."""
    specs: list[ScheduleSpec] = []
    offset = 0
    while True:
        page, total = await graphs.page(offset, PAGE)
        for summary in page:
            try:
                graph = await graphs.get(summary.id)
            except OrchestratorError as exc:
                log.warning("graph %s skipped for schedules: %s", summary.id, exc)
                continue
            specs += schedules_in(graph)
        offset += PAGE
        if offset >= total or not page:
            return specs


async def sync_schedules(app: Celery, graphs: GraphStore) -> SyncReport:
    """Scan stored graphs and sync beat entries (the Redis calls of redbeat block briefly)."""
    report = sync_entries(app, await scan_graphs(graphs))
    if report.added or report.updated or report.removed or report.invalid:
        log.info("schedules synced: %s", report)
    return report


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
