"""The supervisor: one watcher per store and loop renews every running node's lease and
ends the nodes of a run that ended (in-process store, real step function)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import pytest

from orchestrator.kernel.environment import StepOptions
from orchestrator.kernel.local import LocalRunner
from orchestrator.kernel.memory import MemoryStore
from tests.fake_nodes import graph, make_registry
from tests.support import claim, completed

REG = make_registry()
LEASE_S = 0.15  # the slow node below runs four leases long


def slow_graph(width: int, delay_s: float) -> dict[str, object]:
    nodes = [("a", "emit", "A")] + [(f"s{i}", "relay", f"Slow {i}", {"delay_s": delay_s}) for i in range(width)]
    return graph(nodes, [("a", "out", f"s{i}", "in") for i in range(width)])


async def started(store: MemoryStore, run_id: str, count: int) -> None:
    while sum(e.event_type == "started" and e.node_id.startswith("s") for e in store.events(run_id)) < count:
        await asyncio.sleep(0.01)


async def test_a_node_running_longer_than_its_lease_keeps_it_until_it_ends() -> None:
    runner = LocalRunner(REG, options=StepOptions(lease_s=LEASE_S, cancel_poll_s=0.02))
    task = asyncio.ensure_future(runner.run(slow_graph(1, 4 * LEASE_S), 1, run_id="r-lease"))
    await asyncio.wait_for(started(runner.store, "r-lease", 1), 5)
    seen = []
    for _ in range(3):  # past the first lease, the second, the third
        await asyncio.sleep(LEASE_S)
        seen.append((await claim(runner.store, "r-lease", "s0", worker_id="intruder")).kind)
    result = await asyncio.wait_for(task, 5)
    assert seen == ["busy", "busy", "busy"]  # never lapsed, so never taken for lost
    assert result.status == "succeeded"
    assert not [e for e in result.events if (e.data or {}).get("reclaimed")]


async def test_hundreds_of_running_nodes_are_watched_by_one_task() -> None:
    runner = LocalRunner(REG, options=StepOptions(lease_s=LEASE_S, cancel_poll_s=0.02))
    task = asyncio.ensure_future(runner.run(slow_graph(300, 0.5), 1, run_id="r-many"))
    await asyncio.wait_for(started(runner.store, "r-many", 300), 10)
    names = [t.get_name() for t in asyncio.all_tasks()]
    assert names.count("orchestrator-supervisor") == 1
    # the runner's task per node, its executor's task, and nothing per node beyond them
    assert len(names) <= 2 * 300 + 5
    assert (await asyncio.wait_for(task, 10)).status == "succeeded"


async def test_ending_a_run_ends_all_its_running_nodes_within_a_poll() -> None:
    runner = LocalRunner(REG, options=StepOptions(cancel_poll_s=0.05))
    task = asyncio.ensure_future(runner.run(slow_graph(50, 30), 1, run_id="r-end"))
    await asyncio.wait_for(started(runner.store, "r-end", 50), 10)
    assert await runner.store.finish_run("r-end", "cancelled")
    result = await asyncio.wait_for(task, 5)
    assert result.status == "cancelled"
    cancelled = [e.node_id for e in result.events if e.event_type == "cancelled"]
    assert sorted(cancelled) == sorted(f"s{i}" for i in range(50))  # one each, at the cancel
    assert [e for e in result.events if e.event_type == "error"] == []  # and no second end


async def test_a_node_whose_claim_was_superseded_stops_and_its_completion_is_refused() -> None:
    """Its lease lapsed (say the worker was cut off) and another claim took the node: at its
    next renewal the first execution learns it and stops (a 30 s node, here), its completion
    is refused, and the node's result is the later claim's."""
    runner = LocalRunner(REG, options=StepOptions(lease_s=LEASE_S, cancel_poll_s=0.02))
    task = asyncio.ensure_future(runner.run(slow_graph(1, 30), 1, run_id="r-taken"))
    await asyncio.wait_for(started(runner.store, "r-taken", 1), 5)
    run = runner.store._runs["r-taken"]
    run.leases["s0"] = (run.leases["s0"][0], 0.0)  # lapsed: the heartbeat did not arrive in time
    other = await claim(runner.store, "r-taken", "s0", worker_id="other")
    assert other.kind == "run"
    first = await asyncio.wait_for(task, 5)  # stopped at its next renewal, not after 30 s
    assert first.node_states["s0"] == "running"  # the later claim runs it
    assert [e.event_type for e in first.events if e.node_id == "s0"] == ["started", "started"]
    assert runner.store.stale_refusals("r-taken") == 2  # its renewal and its completion
    done = await runner.store.complete_node("r-taken", "s0", completed("r-taken", "s0", ["output"]),
                                            token=other.token)
    assert not done.stale
    assert (await runner.store.get_run("r-taken")).status == "succeeded"


class FlakyRenewals(MemoryStore):
    """Lease renewals fail the first two times (a store hiccup)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 2

    async def renew_leases(self, run_id: str, tokens: Mapping[str, int], *, lease_s: float) -> list[str]:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("store unavailable")
        return await super().renew_leases(run_id, tokens, lease_s=lease_s)


async def test_a_failed_renewal_is_tried_again_and_the_run_goes_on() -> None:
    store = FlakyRenewals()
    runner = LocalRunner(REG, store=store, options=StepOptions(lease_s=3.0, cancel_poll_s=0.02))
    result = await asyncio.wait_for(runner.run(slow_graph(1, 3.5), 1, run_id="r-flaky"), 10)
    assert result.status == "succeeded"
    assert store.failures == 0


async def test_a_store_is_not_kept_alive_by_its_supervisor() -> None:
    """Nested runs (each Loop iteration, each subgraph) run on a store of their own: once
    the run is over nothing may hold that store, its runs and their events."""
    import gc
    import weakref

    runner = LocalRunner(REG, options=StepOptions(cancel_poll_s=0.01))
    assert (await runner.run(slow_graph(3, 0.02), 1, run_id="r-gone")).status == "succeeded"
    gone = weakref.ref(runner.store)
    del runner
    await asyncio.sleep(0.05)  # the supervisor's task sees no watch and ends
    gc.collect()
    assert gone() is None


class DownStore(MemoryStore):
    """Every status read fails (Redis gone)."""

    async def run_status(self, run_id: str) -> str:
        raise ConnectionError("store unavailable")


async def test_a_failing_store_is_logged_once_not_once_per_run_per_poll(caplog: pytest.LogCaptureFixture) -> None:
    store = DownStore()
    runner = LocalRunner(REG, store=store, options=StepOptions(cancel_poll_s=0.01))
    with caplog.at_level(logging.WARNING, logger="orchestrator.step"):
        runs = [runner.run(slow_graph(2, 0.3), 1, run_id=f"r-down-{i}") for i in range(5)]
        results = await asyncio.wait_for(asyncio.gather(*runs), 10)
    assert {r.status for r in results} == {"succeeded"}  # a status read is not needed to finish
    failures = [r for r in caplog.records if "status read failed" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]
