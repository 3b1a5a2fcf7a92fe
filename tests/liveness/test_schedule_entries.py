"""Schedule triggers of stored graphs become redbeat entries, kept in step with the graphs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.queue.app import make_celery
from orchestrator.service.schedules import FIRE_TASK, ScheduleSpec, configure_beat, schedules_in, sync_entries
from orchestrator.settings import Settings

SETTINGS = Settings(key_prefix="sched")


def graph_with(*nodes: dict[str, Any], gid: str = "g1") -> dict[str, Any]:
    return {"id": gid, "nodes": list(nodes), "edges": []}


def node(nid: str, ntype: str = "schedule_trigger", **data: Any) -> dict[str, Any]:
    return {"id": nid, "type": ntype, "name": nid, "data": data}


@pytest.fixture
def app(redis_server: EmbeddedRedis) -> Iterator[Celery]:
    import redis

    redis.Redis.from_url(redis_server.url).flushdb()
    celery = make_celery(redis_server.url, SETTINGS)
    configure_beat(celery, redis_server.url, SETTINGS)
    yield celery
    celery.close()


def entry_keys(app: Celery) -> dict[str, dict[str, Any]]:
    from redbeat.schedulers import RedBeatSchedulerEntry, get_redis

    keys = get_redis(app).zrange(app.redbeat_conf.schedule_key, 0, -1)  # type: ignore[attr-defined]
    out = {}
    for key in keys:
        entry = RedBeatSchedulerEntry.from_key(key, app=app)
        out[key] = {"task": entry.task, "args": list(entry.args), "schedule": entry.schedule}
    return out


def test_schedules_are_read_from_schedule_trigger_nodes_with_cron_or_interval() -> None:
    g = graph_with(node("a", cron="*/5 * * * *"), node("b", interval_s=2),
                   node("c"), node("d", "manual_trigger", interval_s=3))
    assert schedules_in(g) == [ScheduleSpec("g1", "a", cron="*/5 * * * *"),
                               ScheduleSpec("g1", "b", interval_s=2.0)]


def test_disabled_schedule_trigger_has_no_schedule() -> None:
    g = graph_with({**node("a", interval_s=2), "settings": {"disabled": True}})
    assert schedules_in(g) == []


def test_sync_creates_one_entry_per_schedule_that_fires_the_graph_node(app: Celery) -> None:
    report = sync_entries(app, [ScheduleSpec("g1", "a", interval_s=2.0),
                                ScheduleSpec("g1", "b", cron="0 * * * *")])
    assert sorted(report.added) == [":entry:g1:a", ":entry:g1:b"]
    entries = entry_keys(app)
    assert sorted(entries) == ["sched:beat:entry:g1:a", "sched:beat:entry:g1:b"]
    assert entries["sched:beat:entry:g1:a"]["task"] == FIRE_TASK
    assert entries["sched:beat:entry:g1:a"]["args"] == ["g1", "a"]


def test_sync_leaves_unchanged_entries_alone_and_replaces_changed_ones(app: Celery) -> None:
    sync_entries(app, [ScheduleSpec("g1", "a", interval_s=2.0), ScheduleSpec("g1", "b", interval_s=5.0)])
    report = sync_entries(app, [ScheduleSpec("g1", "a", interval_s=2.0), ScheduleSpec("g1", "b", interval_s=9.0)])
    assert report.added == [] and report.updated == [":entry:g1:b"] and report.removed == []
    assert entry_keys(app)["sched:beat:entry:g1:b"]["schedule"].run_every.total_seconds() == 9.0


def test_sync_removes_entries_of_nodes_and_graphs_that_are_gone(app: Celery) -> None:
    sync_entries(app, [ScheduleSpec("g1", "a", interval_s=2.0), ScheduleSpec("g2", "x", interval_s=2.0)])
    report = sync_entries(app, [ScheduleSpec("g1", "a", interval_s=2.0)])
    assert report.removed == [":entry:g2:x"]
    assert list(entry_keys(app)) == ["sched:beat:entry:g1:a"]


def test_malformed_cron_is_reported_naming_the_graph_and_node(app: Celery) -> None:
    report = sync_entries(app, [ScheduleSpec("g1", "a", cron="every minute")])
    assert report.added == [] and len(report.invalid) == 1
    assert report.invalid[0].startswith("g1/a:") and "cron" in report.invalid[0]
    assert entry_keys(app) == {}
