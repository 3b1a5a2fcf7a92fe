"""A worker SIGKILLed while its node holds a rate-limit unit: the node runs again elsewhere
(its lease lapses, the sweeper re-sends it) under the same attempt, and its limit counts the
execution once: the re-run is not charged again, and the unit is not handed to anyone else."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.kernel.protocol import EventType
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_workers import WorkerProcesses
from orchestrator.service.sweeper import Sweeper
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph
from tests.integration.conftest import collect, read_until, wait_for_terminal
from tests.integration.test_faults import celery, first_pid, kill_dir, pool, registry, server, start, store, sweeping

__all__ = ["celery", "kill_dir", "pool", "registry", "server", "store", "sweeping"]

pytestmark = pytest.mark.integration


def limited_stall(pid_dir: Path, key: str) -> dict[str, Any]:
    g = graph([("t", "manual_trigger", "Start"),
               ("s", "stall", "Stall", {"pid_dir": str(pid_dir), "delay_s": 2, "value": "kept"})],
              [("t", "output", "s", "input")], id=f"limit-faults-{time.time_ns()}")
    g["nodes"][1]["settings"] = {"limits": [{"key": key, "rate": 1, "per_s": 60}]}
    return g


async def test_a_killed_holder_is_counted_once_and_its_unit_is_not_given_twice(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any,
    sweeping: Sweeper, tmp_path: Path,
) -> None:
    key = f"once-{time.time_ns()}"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = await start(store, registry, celery, limited_stall(tmp_path / "a", key))
    os.kill(await first_pid(tmp_path / "a", "s"), signal.SIGKILL)
    result = await collect(store, first, await wait_for_terminal(store, first, 40))
    assert result.status == "succeeded" and result.output("s")["value"] == "kept"
    assert len(result.of("s", "started")) >= 2  # it ran again after the kill
    assert result.of("s", "throttled") == []  # ... without being charged a second unit
    # the minute's one unit was used once: another run of the key waits for the next one
    second = await start(store, registry, celery, limited_stall(tmp_path / "b", key))
    events = await read_until(store, second, lambda e: e.event_type == EventType.THROTTLED, timeout_s=20)
    waited = events[-1][1]  # read_until stops at the first throttled event
    assert waited.data["limit"] == f"ws:default:{key}" and 30 < waited.data["delay_s"] <= 60
    assert await store.finish_run(second, "cancelled")
