"""The barrier's behaviour, identical for every RunStore (MemoryStore, RedisRunStore)."""

from __future__ import annotations

import asyncio
import time

import pytest

from orchestrator.kernel.protocol import NodeEvent
from orchestrator.kernel.store import NodeCompletion, NodeStatus, RunStore
from tests.support import Driver, claim, completed, events_of, make_plan, node_states


async def test_chain_runs_each_node_once_in_order(store: RunStore) -> None:
    plan = make_plan("abc", [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    driver = Driver(store, plan)
    await driver.run()
    assert driver.ran == ["a", "b", "c"]
    assert driver.ready_lists == [("a", ["b"]), ("b", ["c"]), ("c", [])]
    assert (await store.get_run(plan.run_id)).status == "succeeded"
    assert set((await node_states(store, plan.run_id)).values()) == {"succeeded"}


async def test_diamond_join_waits_for_both_branches(store: RunStore) -> None:
    plan = make_plan("abcd", [("a", "out", "b", "in"), ("a", "out", "c", "in"),
                              ("b", "out", "d", "in"), ("c", "out", "d", "in")])
    driver = Driver(store, plan)
    await driver.run()
    assert driver.ready_lists == [("a", ["b", "c"]), ("b", []), ("c", ["d"]), ("d", [])]
    assert (await store.get_run(plan.run_id)).status == "succeeded"


async def test_merge_fires_when_other_branch_is_dead(store: RunStore) -> None:
    plan = make_plan(["if", "t", "f", "merge"], [
        ("if", "true", "t", "in"), ("if", "false", "f", "in"),
        ("t", "out", "merge", "in"), ("f", "out", "merge", "in"),
    ])
    driver = Driver(store, plan, live={"if": {"true"}})
    await driver.run()
    assert driver.ran == ["if", "t", "merge"]
    states = await node_states(store, plan.run_id)
    assert states == {"if": "succeeded", "t": "succeeded", "f": "skipped", "merge": "succeeded"}
    outputs = await store.read_outputs(plan.run_id, ["t", "f"])
    assert "f" not in outputs or outputs["f"] == {}
    assert outputs["t"]["out"].value == "t.out"
    skipped = [e.node_id for e in await events_of(store, plan.run_id) if e.event_type == "skipped"]
    assert skipped == ["f"]


async def test_skip_propagates_three_levels_down_a_dead_branch(store: RunStore) -> None:
    plan = make_plan(["if", "x1", "x2", "x3", "y", "m"], [
        ("if", "false", "x1", "in"), ("x1", "out", "x2", "in"), ("x2", "out", "x3", "in"),
        ("if", "true", "y", "in"), ("x3", "out", "m", "in"), ("y", "out", "m", "in"),
    ])
    driver = Driver(store, plan, live={"if": {"true"}})
    await driver.run()
    states = await node_states(store, plan.run_id)
    assert [states[n] for n in ("x1", "x2", "x3")] == ["skipped"] * 3
    assert states["m"] == "succeeded"
    assert driver.ran == ["if", "y", "m"]
    assert (await store.get_run(plan.run_id)).status == "succeeded"


async def test_node_with_a_dead_required_port_is_skipped_with_its_successors(
    store: RunStore,
) -> None:
    plan = make_plan(["s", "a", "c", "b", "after"], [
        ("s", "out", "a", "in"), ("s", "out", "c", "in"),
        ("a", "out", "b", "main"), ("c", "out", "b", "extra"), ("b", "out", "after", "in"),
    ], required={"b": {"main", "extra"}})
    driver = Driver(store, plan, live={"c": set()})
    await driver.run()
    states = await node_states(store, plan.run_id)
    assert states["b"] == "skipped" and states["after"] == "skipped"
    assert (await store.get_run(plan.run_id)).status == "succeeded"


async def test_second_completion_changes_nothing_and_returns_undispatched(store: RunStore) -> None:
    plan = make_plan("abc", [("a", "out", "b", "in"), ("a", "out", "c", "in")])
    driver = Driver(store, plan)
    await driver.start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    first = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))
    assert first.nodes == ["b", "c"]
    await store.mark_dispatched(run_id, ["b"])  # the worker died before sending "c"
    before = await events_of(store, run_id)
    again = await store.complete_node(run_id, "a", completed(run_id, "a", []))
    assert again.nodes == ["c"]
    assert len(await events_of(store, run_id)) == len(before)
    assert (await store.read_outputs(run_id, ["a"]))["a"]["out"].value == "a.out"
    assert (await node_states(store, run_id))["b"] == "pending"


async def test_claim_of_a_finished_node_returns_done_with_pending_dispatch(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    driver = Driver(store, plan)
    await driver.start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))
    answer = await claim(store, run_id, "a", worker_id="w2")
    assert answer.kind == "done"
    assert answer.pending_dispatch == ["b"]


async def test_claim_while_another_worker_holds_the_lease_is_busy(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    first = await claim(store, run_id, "a", worker_id="w1")
    second = await claim(store, run_id, "a", worker_id="w2")
    assert (first.kind, first.claims) == ("run", 1)
    assert second.kind == "busy"
    assert await store.renew_leases(run_id, {"a": first.token}, lease_s=30) == []
    assert await store.renew_leases(run_id, {}, lease_s=30) == []


async def test_reclaim_after_the_lease_expired_says_so_in_its_started_event(
    store: RunStore,
) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a", lease_s=0.001)
    await asyncio.sleep(0.02)  # let the dead worker's lease lapse
    answer = await claim(store, run_id, "a", worker_id="w2")
    assert (answer.kind, answer.claims) == ("run", 2)
    started = [e for e in await events_of(store, run_id) if e.event_type == "started"]
    assert [e.data for e in started] == [None, {"reclaimed": True}]


async def test_stop_run_failure_ends_the_run_failed(store: RunStore) -> None:
    plan = make_plan("abc", [("a", "out", "b", "in"), ("a", "out", "c", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    ready = await store.complete_node(run_id, "a", completed(
        run_id, "a", [], status="failed", stop_run=True, error={"message": "boom"}))
    assert ready.nodes == []
    record = await store.get_run(run_id)
    assert record.status == "failed" and record.error == {"message": "boom"}
    assert record.finished_at is not None
    kinds = [e.event_type for e in await events_of(store, run_id)]
    assert kinds[-1] == "run_failed" and kinds.count("run_failed") == 1
    answer = await claim(store, run_id, "b", worker_id="w1")
    assert answer.kind == "closed"


async def test_events_appear_exactly_once_in_order(store: RunStore) -> None:
    plan = make_plan("abc", [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    await Driver(store, plan).run()
    events = await events_of(store, plan.run_id)
    assert [(e.event_type, e.node_id) for e in events] == [
        ("run_started", ""),
        ("started", "a"), ("completed", "a"),
        ("started", "b"), ("completed", "b"),
        ("started", "c"), ("completed", "c"),
        ("run_completed", ""),
    ]


async def test_cancelled_run_closes_claims_and_dispatches_nothing(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    assert await store.finish_run(run_id, "cancelled", {"message": "user"})
    assert not await store.finish_run(run_id, "timed_out")
    ready = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))
    assert ready.nodes == []
    assert await store.read_outputs(run_id, ["a"]) == {}  # "a" ended cancelled with its run
    assert (await claim(store, run_id, "b")).kind == "closed"
    assert (await store.get_run(run_id)).status == "cancelled"
    kinds = [e.event_type for e in await events_of(store, run_id)]
    assert kinds.count("run_cancelled") == 1 and "run_timed_out" not in kinds


async def test_suspended_node_waits_then_resumes_with_its_payload(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    wait = completed(run_id, "a", [], status="waiting")
    wait.payload = {"question": "ok?"}
    assert (await store.complete_node(run_id, "a", wait)).nodes == []
    assert (await store.get_run(run_id)).status == "waiting"
    assert (await node_states(store, run_id))["a"] == "waiting"
    waiting = [e for e in await events_of(store, run_id) if e.event_type == "run_waiting"]
    assert [e.data for e in waiting] == [{"node_id": "a", "payload": {"question": "ok?"}}]
    assert not await store.resume_node(run_id, "b", {"yes": True})
    assert await store.resume_node(run_id, "a", {"yes": True})
    assert not await store.resume_node(run_id, "a", {"yes": True})
    await store.mark_dispatched(run_id, ["a"])  # the caller sends the resumed node again
    assert (await store.get_run(run_id)).status == "running"
    resume = await store.get_resume(run_id, "a")
    assert resume == {"payload": {"question": "ok?"}, "input": {"yes": True}}
    answer = await claim(store, run_id, "a", worker_id="w2")
    assert (answer.kind, answer.claims) == ("run", 2)
    assert (await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))).nodes == ["b"]
    kinds = [e.event_type for e in await events_of(store, run_id)]
    assert kinds.count("run_resumed") == 1
    started = [e.data for e in await events_of(store, run_id) if e.event_type == "started"]
    assert started == [None, {"resumed": True}]


async def test_a_failure_that_stops_the_run_marks_what_did_not_run_not_run(store: RunStore) -> None:
    plan = make_plan("abcd", [("a", "out", "b", "in"), ("b", "out", "c", "in"), ("a", "out", "d", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    assert (await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))).nodes == ["b", "d"]
    await claim(store, run_id, "b")
    await store.complete_node(run_id, "b", completed(
        run_id, "b", [], status="failed", stop_run=True, error={"message": "boom"}))
    states = await node_states(store, run_id)
    assert states["b"] == NodeStatus.FAILED
    # not skipped (it never had its chance) and not pending (the run is over): not_run,
    # like "d", which was ready but not yet claimed
    assert (states["c"], states["d"]) == (NodeStatus.NOT_RUN, NodeStatus.NOT_RUN)
    events = await events_of(store, run_id)
    kinds = [e.event_type for e in events]
    assert "skipped" not in kinds
    in_plan_order = [(n, n) for n in plan.order if n in ("c", "d")]
    assert [(e.node_id, e.node_name) for e in events if e.event_type == "not_run"] == in_plan_order
    assert kinds.index("not_run") < kinds.index("run_failed")


@pytest.mark.parametrize("ending", ["cancelled", "timed_out"])
async def test_a_cancelled_run_ends_its_running_node_cancelled_with_an_event_at_once(
    store: RunStore, ending: str,
) -> None:
    plan = make_plan("abc", [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    running = await claim(store, run_id, "a")
    assert await store.finish_run(run_id, ending)
    states = await node_states(store, run_id)
    assert states == {"a": NodeStatus.CANCELLED, "b": NodeStatus.NOT_RUN, "c": NodeStatus.NOT_RUN}
    events = await events_of(store, run_id)
    assert [(e.node_id, e.event_type, e.data) for e in events[-4:]] == [
        ("a", "cancelled", {"reason": ending}), ("b", "not_run", None), ("c", "not_run", None),
        ("", f"run_{ending}", {"status": ending, "error": None}),
    ]
    assert (events[-4].node_name, events[-4].node_type) == ("a", "fake")
    # the worker of "a" sees the run ended later: its completion and events change nothing
    failed = completed(run_id, "a", [], status="failed", error={"message": "cancelled"})
    assert await store.append_event(failed.events[0], token=running.token) == ""
    assert (await store.complete_node(run_id, "a", failed, token=running.token)).nodes == []
    assert (await node_states(store, run_id))["a"] == NodeStatus.CANCELLED
    assert len(await events_of(store, run_id)) == len(events)


async def test_a_failure_that_stops_the_run_cancels_the_nodes_still_running(store: RunStore) -> None:
    plan = make_plan("abc", [("a", "out", "b", "in"), ("a", "out", "c", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))
    await claim(store, run_id, "b")
    await claim(store, run_id, "c")
    await store.complete_node(run_id, "b", completed(run_id, "b", [], status="failed", stop_run=True))
    assert (await node_states(store, run_id))["c"] == NodeStatus.CANCELLED
    kinds = [(e.node_id, e.event_type) for e in await events_of(store, run_id)]
    assert kinds[-2:] == [("c", "cancelled"), ("", "run_failed")]


async def test_run_events_carry_the_time_they_happened(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))
    await asyncio.sleep(0.05)
    await claim(store, run_id, "b")
    await store.complete_node(run_id, "b", completed(run_id, "b", ["out"]))
    events = await events_of(store, run_id)
    started, done = events[0], events[-1]
    assert (started.event_type, done.event_type) == ("run_started", "run_completed")
    assert done.timestamp - started.timestamp >= 0.05


async def test_skipped_events_carry_the_time_they_were_emitted(store: RunStore) -> None:
    plan = make_plan("abcd", [("a", "out", "b", "in"), ("b", "out", "c", "in"), ("b", "other", "d", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))
    await asyncio.sleep(0.3)
    await claim(store, run_id, "b")
    before = time.time()
    await store.complete_node(run_id, "b", completed(run_id, "b", ["out"]))  # "d" is dead
    skipped = [e for e in await events_of(store, run_id) if e.event_type == "skipped"]
    assert [e.node_id for e in skipped] == ["d"]
    assert skipped[0].timestamp >= before - 0.01


async def test_cancelled_run_marks_unstarted_nodes_not_run_with_an_event_each(store: RunStore) -> None:
    plan = make_plan("abc", [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    assert await store.finish_run(run_id, "cancelled")
    assert set((await node_states(store, run_id)).values()) == {NodeStatus.NOT_RUN}
    events = await events_of(store, run_id)
    assert [e.node_id for e in events if e.event_type == "not_run"] == ["a", "b", "c"]
    assert events[-1].event_type == "run_cancelled"


async def test_a_scheduled_retry_frees_the_node_and_the_next_claim_runs_the_next_attempt(
    store: RunStore,
) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a", worker_id="w1")
    retry = NodeEvent(run_id=run_id, node_id="a", node_type="fake", node_name="a",
                      event_type="retry", data={"delay_s": 0.5})
    retrying = NodeCompletion(status=NodeStatus.RETRYING, events=[retry], next_attempt=2)
    assert (await store.complete_node(run_id, "a", retrying)).nodes == []
    assert (await store.complete_node(run_id, "a", retrying)).nodes == []  # a repeat changes nothing
    assert (await node_states(store, run_id))["a"] == NodeStatus.RETRYING
    again = await claim(store, run_id, "a", worker_id="w2")  # the lease was released
    assert (again.kind, again.attempt, again.claims) == ("run", 2, 1)
    assert (await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))).nodes == ["b"]
    events = await events_of(store, run_id)
    started = [(e.attempt, e.data) for e in events if e.event_type == "started"]
    assert started == [(1, None), (2, None)]  # a retry is not a reclaim
    assert [e.event_type for e in events if e.node_id == "a"] == ["started", "retry", "started", "completed"]


async def test_a_run_cancelled_during_a_retry_wait_refuses_the_next_attempt(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    await claim(store, run_id, "a")
    await store.complete_node(run_id, "a", NodeCompletion(status=NodeStatus.RETRYING, next_attempt=2))
    assert await store.finish_run(run_id, "cancelled")
    assert (await claim(store, run_id, "a")).kind == "closed"
    assert (await node_states(store, run_id))["a"] == NodeStatus.NOT_RUN
