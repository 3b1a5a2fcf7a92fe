"""Fencing tokens and the claim's clock, identical for every RunStore: a completion,
renewal or event append from a claim that a later claim superseded is refused (nothing
applied, no event, counted); a worker whose lease merely lapsed still completes; a retry
is not run before it is due."""

from __future__ import annotations

import asyncio

from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.kernel.store import NodeCompletion, NodeStatus, RunStore
from tests.support import Driver, claim, completed, events_of, make_plan, node_states, stale_refusals

LAPSE_S = 0.001  # a lease that is over by the time the test looks again


async def lapsed_then_reclaimed(store: RunStore) -> tuple[str, int, int]:
    """A run whose node "a" was claimed by w1, whose lease lapsed, then claimed by w2:
    (run id, w1's token, w2's token)."""
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    first = await claim(store, plan.run_id, "a", worker_id="w1", lease_s=LAPSE_S)
    await asyncio.sleep(0.02)
    second = await claim(store, plan.run_id, "a", worker_id="w2")
    assert (first.kind, second.kind) == ("run", "run")
    return plan.run_id, first.token, second.token


async def test_each_claim_of_a_node_gets_a_larger_token(store: RunStore) -> None:
    _, first, second = await lapsed_then_reclaimed(store)
    assert 0 < first < second


async def test_a_stale_completion_after_a_later_claim_is_refused_and_counted(store: RunStore) -> None:
    run_id, stale, current = await lapsed_then_reclaimed(store)
    before = await events_of(store, run_id)
    refused = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), token=stale)
    assert refused.stale and refused.nodes == []
    assert await events_of(store, run_id) == before  # no event of the stale worker
    assert await store.read_outputs(run_id, ["a"]) == {}
    assert (await node_states(store, run_id))["a"] == NodeStatus.RUNNING  # w2 still runs it
    assert await stale_refusals(store, run_id) == 1
    applied = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), token=current)
    assert not applied.stale and applied.nodes == ["b"]
    assert [e.event_type for e in await events_of(store, run_id)].count("completed") == 1


async def test_a_stale_completion_loses_even_after_the_later_claim_completed(store: RunStore) -> None:
    run_id, stale, current = await lapsed_then_reclaimed(store)
    await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), token=current)
    events = await events_of(store, run_id)
    late = completed(run_id, "a", ["out"])
    late.outputs["out"].value = "stale"
    assert (await store.complete_node(run_id, "a", late, token=stale)).stale
    assert (await store.read_outputs(run_id, ["a"]))["a"]["out"].value == "a.out"
    assert await events_of(store, run_id) == events


async def test_a_worker_whose_lease_lapsed_with_nobody_claiming_still_completes(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    slow = await claim(store, run_id, "a", worker_id="w1", lease_s=LAPSE_S)
    await asyncio.sleep(0.02)  # cut off a while: the lease lapsed, nobody took the node
    ready = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), token=slow.token)
    assert not ready.stale and ready.nodes == ["b"]
    assert await stale_refusals(store, run_id) == 0


async def test_a_lapsed_lease_is_renewed_until_a_later_claim_supersedes_it(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    w1 = await claim(store, run_id, "a", worker_id="w1", lease_s=LAPSE_S)
    await asyncio.sleep(0.02)
    assert await store.renew_leases(run_id, {"a": w1.token}, lease_s=30) == []  # taken again
    assert (await claim(store, run_id, "a", worker_id="w2")).kind == "busy"
    await store.renew_leases(run_id, {"a": w1.token}, lease_s=LAPSE_S)
    await asyncio.sleep(0.02)
    w2 = await claim(store, run_id, "a", worker_id="w2")
    assert w2.kind == "run"
    assert await store.renew_leases(run_id, {"a": w1.token}, lease_s=30) == ["a"]
    assert (await claim(store, run_id, "a", worker_id="w3")).kind == "busy"  # w2 keeps it
    assert await stale_refusals(store, run_id) == 1


async def test_an_event_from_a_superseded_claim_is_refused(store: RunStore) -> None:
    run_id, stale, current = await lapsed_then_reclaimed(store)
    progress = NodeEvent(run_id=run_id, node_id="a", node_type="fake", node_name="a",
                         event_type=EventType.PROGRESS, data={"step": 1})
    assert await store.append_event(progress, token=stale) == ""
    assert await store.append_event(progress, token=current) != ""
    assert [e.data for e in await events_of(store, run_id) if e.event_type == "progress"] == [{"step": 1}]
    assert await stale_refusals(store, run_id) == 1


async def test_a_live_lease_is_busy_even_for_the_worker_that_holds_it(store: RunStore) -> None:
    """A copy of the message redelivered to the worker running the node must not start a
    second execution that supersedes the first."""
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    first = await claim(store, plan.run_id, "a", worker_id="w1")
    again = await claim(store, plan.run_id, "a", worker_id="w1")
    assert (first.kind, again.kind) == ("run", "busy")
    events = await events_of(store, plan.run_id)
    assert [e.event_type for e in events].count("started") == 1


async def test_a_retry_claimed_before_it_is_due_is_early_and_changes_nothing(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    await store.complete_node(run_id, "a", NodeCompletion(status=NodeStatus.RETRYING, next_attempt=2,
                                                          retry_delay_s=30))
    before = await events_of(store, run_id)
    early = await claim(store, run_id, "a", worker_id="w2")
    assert early.kind == "early" and early.retry_in_s is not None and 25 < early.retry_in_s <= 30
    assert (await node_states(store, run_id))["a"] == NodeStatus.RETRYING
    assert await events_of(store, run_id) == before


async def test_a_retry_is_claimed_once_it_is_due(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    await store.complete_node(run_id, "a", NodeCompletion(status=NodeStatus.RETRYING, next_attempt=2,
                                                          retry_delay_s=0.05))
    await asyncio.sleep(0.1)
    again = await claim(store, run_id, "a", worker_id="w2")
    assert (again.kind, again.attempt) == ("run", 2)
