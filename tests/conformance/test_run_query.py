"""The read side every store offers the API and the CLI (``RunQuery``), identical for
MemoryStore and RedisRunStore: paging events by id, waiting for the next one, node states."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.kernel.errors import RunNotFoundError
from orchestrator.kernel.store import RunQuery, RunStore
from tests.support import Driver, claim, make_plan, record_for


async def test_every_store_is_a_run_query(store: RunStore) -> None:
    assert isinstance(store, RunQuery)


async def test_events_page_after_an_id_and_keep_their_order(store: RunStore) -> None:
    plan = make_plan("abc", [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    await Driver(store, plan).run()
    everything = await store.read_events(plan.run_id)
    assert everything[0][1].event_type == "run_started"
    assert everything[-1][1].event_type == "run_completed"
    first, rest = everything[:2], everything[2:]
    assert await store.read_events(plan.run_id, count=2) == first
    assert await store.read_events(plan.run_id, after=first[-1][0]) == rest
    assert await store.read_events(plan.run_id, after=everything[-1][0]) == []


async def test_a_blocking_read_returns_the_next_event_when_it_arrives(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    driver = Driver(store, plan)
    await driver.start()
    last = (await store.read_events(plan.run_id))[-1][0]
    waiting = asyncio.create_task(store.read_events(plan.run_id, after=last, block_ms=5000))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await driver.step("a")
    got = await asyncio.wait_for(waiting, 5)
    assert got and got[0][0] != last


async def test_a_blocking_read_with_nothing_new_times_out_empty(store: RunStore) -> None:
    plan = make_plan("a", [])
    await Driver(store, plan).run()
    last = (await store.read_events(plan.run_id))[-1][0]
    assert await store.read_events(plan.run_id, after=last, block_ms=50) == []


async def test_node_states_name_every_node(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).run()
    assert await store.node_states(plan.run_id) == {"a": "succeeded", "b": "succeeded"}
    assert await store.run_status(plan.run_id) == "succeeded"


async def test_an_unknown_run_is_named(store: RunStore) -> None:
    with pytest.raises(RunNotFoundError, match="nope"):
        await store.get_run("nope")


async def test_a_claim_carries_the_run_s_workspace(store: RunStore) -> None:
    plan = make_plan("a", [])
    record = record_for(plan)
    record.meta = {"workspace": "team-a"}
    await store.create_run(plan, record)
    granted = await claim(store, plan.run_id, "a")
    assert granted.kind == "run" and granted.workspace == "team-a"
