"""Nothing grows without bound: every key of a finished run expires, and Redis shrinks back."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
import redis

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.settings import Settings
from orchestrator.store.keys import Keys
from orchestrator.store.redis_store import RedisRunStore
from orchestrator.store.storage_budget import DAY_S
from tests.fake_nodes import graph
from tests.integration.conftest import wait_for_terminal

pytestmark = pytest.mark.integration

FAKE_PACK = str(Path(__file__).parent / "fake_pack")
RETENTION_S = 2
SETTINGS = Settings(retention_s=RETENTION_S, active_ttl_s=60, node_paths=FAKE_PACK)
KEYS = Keys.of(SETTINGS)
RUNS = 50
MEMORY_MARGIN_BYTES = 256 * 1024


LANES = {KEYS.lanes(), KEYS.lanes_seen()}  # one entry per active workspace (store/lanes.py)


def run_keys(sync: redis.Redis) -> list[str]:
    """The product's keys but the storage budgets' day counters (one per workspace and day,
    kept until the day's data has expired) and the lanes table (an entry per workspace,
    kept while it starts runs): each checked on its own."""
    return [k for k in sync.keys(f"{SETTINGS.key_prefix}:*") if ":wsbytes:" not in k and k not in LANES]


async def expired(sync: redis.Redis, timeout_s: float) -> None:
    """Wait until no product key is left (Redis expires keys lazily and by sampling)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and run_keys(sync):
        await asyncio.sleep(0.25)


async def test_finished_runs_expire_and_redis_returns_to_its_baseline() -> None:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.plugins import load_registry

    env = {"ORCH_NODE_PATHS": FAKE_PACK, "ORCH_RETENTION_S": str(RETENTION_S),
           "ORCH_ACTIVE_TTL_S": "60"}
    g = graph([("t", "manual_trigger", "Start"), ("p", "probe", "Probe", {"value": "v" * 200})],
              [("t", "output", "p", "input")])
    with EmbeddedRedis(unix_socket=False) as server, \
            WorkerProcesses(server.url, WorkerConfig(count=1, concurrency=2, env=env)):
        sync = redis.Redis.from_url(server.url, decode_responses=True)
        store = RedisRunStore.from_url(server.url, SETTINGS)
        celery = make_celery(server.url, SETTINGS)
        try:
            registry = load_registry(SETTINGS)
            dispatch = make_dispatch(celery)
            # warm up: connections open and scripts cached, then let that run expire
            warm = await start_run(store, registry, g, RunRequest(None), dispatch=dispatch)
            await wait_for_terminal(store, warm)
            await expired(sync, RETENTION_S + 10)
            await store.redis.connection_pool.disconnect()
            base_keys = set(sync.keys("*"))
            base_memory = int(sync.info("memory")["used_memory"])
            run_ids = [await start_run(store, registry, g, RunRequest({"i": i}), dispatch=dispatch)
                       for i in range(RUNS)]
            for run_id in run_ids:  # one at a time: one client connection, not fifty
                await wait_for_terminal(store, run_id)
            assert {(await store.get_run(r)).status for r in run_ids} == {"succeeded"}

            counters = sync.keys(f"{SETTINGS.key_prefix}:wsbytes:*")
            assert len(counters) <= 2  # today's of workspace default (and yesterday's, near midnight)
            assert all(0 < sync.ttl(k) <= DAY_S + RETENTION_S + SETTINGS.active_ttl_s for k in counters)
            product = run_keys(sync)
            assert len(product) >= RUNS * 5
            without_ttl = [k for k in product if sync.ttl(k) < 0]
            assert without_ttl == []
            assert max(sync.ttl(k) for k in product) <= RETENTION_S
            # the lanes table: this workspace's entry, idle-expiring (2 x ORCH_LANE_IDLE_S)
            assert set(sync.keys(f"{SETTINGS.key_prefix}:lanes*")) == LANES
            assert all(0 < sync.ttl(k) <= 2 * SETTINGS.lane_idle_s for k in LANES)
            assert sync.hlen(KEYS.lanes()) == 1

            await expired(sync, RETENTION_S + 10)
            assert sync.keys(f"{SETTINGS.key_prefix}:run:*") == []
            assert run_keys(sync) == []
            # whatever Celery keeps (queue bindings) was there before the runs too
            assert set(sync.keys("*")) - base_keys - set(counters) == set()
            await store.redis.connection_pool.disconnect()  # measure data, not our clients
            memory = sync.info("memory")
            assert int(memory["used_memory"]) <= base_memory + MEMORY_MARGIN_BYTES, \
                {k: v for k, v in memory.items() if k.startswith(("used_memory", "mem_"))}
        finally:
            await store.close()
            celery.close()
            sync.close()
    assert os.environ.get("REDIS_URL") is None
