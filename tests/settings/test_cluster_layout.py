"""The key layout a Redis Cluster gets, and the layouts refused at start (no cluster needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
from redis.crc import key_slot

from orchestrator.settings import Settings
from orchestrator.store.keys import Keys, bucket_tags
from orchestrator.store.redis_client import cluster_client

CLUSTER_URL = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"


def slot(key: str) -> int:
    return key_slot(key.encode())


def test_one_redis_keeps_the_names_it_always_had() -> None:
    keys = Keys.of(Settings(redis_url="redis://127.0.0.1:6379/0"))
    assert (keys.buckets, keys.tagged) == (1, False)
    assert keys.run("r1") == "orc:run:r1" and keys.outputs("r1") == "orc:run:r1:out"
    assert (keys.active_runs(), keys.queued_nodes(), keys.wait_timers(), keys.children()) == (
        "orc:runs:active", "orc:runs:queued", "orc:waits:due", "orc:children")
    assert keys.graph("g") == "orc:graph:g" and keys.workspace_bytes("ws", 7) == "orc:wsbytes:ws:7"


@pytest.mark.parametrize("keys", [Keys("orc"), Keys("orc", 64, True)], ids=["one-redis", "cluster"])
def test_a_runs_keys_come_in_the_order_the_scripts_read_them(keys: Keys) -> None:
    run_id = "07{odd}:id"
    assert keys.run_keys(run_id) == [
        keys.run(run_id), keys.plan(run_id), keys.nodes(run_id), keys.pending(run_id), keys.live(run_id),
        keys.outputs(run_id), keys.claims(run_id), keys.ready(run_id), keys.dispatched(run_id),
        keys.events(run_id), keys.adj(run_id), keys.suspend(run_id), keys.resume(run_id), keys.queue(run_id),
        keys.sent(run_id)]


def test_on_a_cluster_a_run_and_its_bucket_s_sets_share_one_slot_and_control_keys_another() -> None:
    keys = Keys.of(Settings(redis_url=CLUSTER_URL, broker_url="redis://127.0.0.1:6379/0", state_buckets=64))
    assert (keys.buckets, keys.tagged) == (64, True)
    for run_id in ("r1", "a" * 32, "run-ä"):
        b = keys.bucket(run_id)
        names = [*keys.run_keys(run_id), keys.lease(run_id, "n{x}"), keys.notify(run_id), keys.active_runs(b),
                 keys.queued_nodes(b), keys.wait_timers(b), keys.children(b), keys.run_children(run_id),
                 keys.workspace_bytes("ws", 20000, b)]
        assert len({slot(k) for k in names}) == 1, names
    control = [keys.graph("g"), keys.graph_version("g", 3), keys.graph_plans("g"), keys.graphs(),
               keys.workspace_graphs("ws"), keys.hooks(), keys.graph_runs("g"), keys.credentials("ws"),
               keys.session("s"), keys.draft("g"), keys.workspace_drafts("ws"), keys.limit("k"),
               keys.concurrency() + ":ws:g:run:k"]
    assert len({slot(k) for k in control}) == 1, control
    assert slot(keys.blob("ws", "b1")) == slot(keys.blob_part("ws", "b1"))


def test_buckets_spread_evenly_over_the_primaries_whatever_their_number() -> None:
    for primaries in (3, 10):
        share = 16384 / primaries
        per_primary = Counter(int(slot(tag) // share) for tag in bucket_tags(64))
        assert len(per_primary) == primaries
        assert max(per_primary.values()) - min(per_primary.values()) <= 1, per_primary


def test_a_cluster_url_names_its_nodes_or_the_error_says_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="host:port"):
        cluster_client("redis+cluster://127.0.0.1:7000,nohostport")


def test_a_process_with_a_cluster_and_no_broker_of_its_own_refuses_to_start() -> None:
    env = {**os.environ, "REDIS_URL": CLUSTER_URL}
    env.pop("ORCH_BROKER_URL", None)
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "worker"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "ORCH_BROKER_URL" in done.stderr and "Redis Cluster" in done.stderr


def test_beat_on_a_cluster_needs_a_plain_control_redis() -> None:
    from celery import Celery

    from orchestrator.kernel.errors import OrchestratorError
    from orchestrator.service.schedules import configure_beat

    app = Celery("t")
    settings = Settings(redis_url=CLUSTER_URL, broker_url="redis://127.0.0.1:6379/0")
    with pytest.raises(OrchestratorError, match="ORCH_CONTROL_REDIS_URL"):
        configure_beat(app, CLUSTER_URL, settings)
    configure_beat(app, CLUSTER_URL, settings.model_copy(update={"control_redis_url": "redis://10.0.0.9:6379/2"}))
    assert app.conf.redbeat_redis_url == "redis://10.0.0.9:6379/2"
