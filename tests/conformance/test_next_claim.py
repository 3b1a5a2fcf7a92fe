"""A completion that claims the nodes it hands its caller (``complete_node``'s
``Take.claim_taken``), identical for every RunStore: each claim is the one ``claim_node``
would grant (lease, fencing token, ``started`` event, the outputs it reads), made only for
the nodes the completion hands over (a chain's next link, a fan-out's branches, older
nodes of the run's queue), and dropped whenever ``claim_node`` would not grant it."""

from __future__ import annotations

import json

from orchestrator.kernel.compile import compile_run
from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.kernel.store import ClaimRequest, NodeStatus, RunRecord, RunStatus, RunStore, Take, TakenClaims
from orchestrator.kernel.validation import validate_graph
from orchestrator.store.creation import event_json
from orchestrator.store.redis_store import RedisRunStore, new_run_id
from tests.fake_nodes import graph, make_registry
from tests.support import Driver, claim, completed, events_of, make_plan, node_states, started_event

TAKEN = TakenClaims(lease_s=30, started_data={"worker_id": "w9"})
Edges = list[tuple[str, str, str, str]]


async def chain_with_a_running(store: RunStore) -> tuple[str, int]:
    """A run of the chain a -> b -> c with "a" claimed: (run id, a's token)."""
    plan = make_plan("abc", [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    await Driver(store, plan).start()
    granted = await claim(store, plan.run_id, "a")
    assert granted.kind == "run"
    return plan.run_id, granted.token


async def compiled_with_t_running(store: RunStore, relays: str, edges: Edges) -> tuple[str, int]:
    """A run of a compiled graph: trigger t and a relay node per letter of ``relays`` (each
    reading its flow sources' outputs), joined by ``edges``, with t claimed: (run id, t's
    token)."""
    g = graph([("t", "emit", "Start", {"value": 7}), *((n, "relay", f"Relay {n}") for n in relays)], edges)
    plan = compile_run(validate_graph(g, make_registry()), new_run_id(), None)
    await store.create_run(plan, RunRecord(run_id=plan.run_id, status=RunStatus.QUEUED, graph_id="g",
                                           run_input={"x": 1}))
    granted = await claim(store, plan.run_id, "t")
    assert granted.kind == "run"
    return plan.run_id, granted.token


async def compiled_chain_with_t_running(store: RunStore) -> tuple[str, int]:
    """A run of the compiled chain t -> b -> c with t claimed: (run id, t's token)."""
    return await compiled_with_t_running(store, "bc", [("t", "out", "b", "in"), ("b", "out", "c", "in")])


async def compiled_fan_out_with_t_running(store: RunStore) -> tuple[str, int]:
    """A run of a compiled graph t -> (b, c, d), each branch reading t's output, with t
    claimed: (run id, t's token)."""
    return await compiled_with_t_running(store, "bcd", [("t", "out", n, "in") for n in "bcd"])


def started_nodes(events: list[NodeEvent]) -> list[str]:
    return [e.node_id for e in events if e.event_type == "started"]


async def test_the_next_link_of_a_chain_is_claimed_with_the_completion(store: RunStore) -> None:
    run_id, token = await compiled_chain_with_t_running(store)
    ready = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]),
                                      take=Take(1, claim_taken=TAKEN), token=token)
    assert ready.nodes == ["b"] and list(ready.claims) == ["b"]
    granted = ready.claims["b"]
    assert granted.kind == "run" and granted.token > 0 and granted.attempt == 1
    assert granted.run_input == {"x": 1}
    assert granted.outputs["t"]["out"].value == "t.out"  # what b reads came with the claim
    assert (await node_states(store, run_id))["b"] == NodeStatus.RUNNING
    assert (await claim(store, run_id, "b", worker_id="w2")).kind == "busy"  # its lease is held
    assert started_nodes(await events_of(store, run_id)) == ["t", "b"]
    # The claim fences like any other: b completes under its token and hands on c,
    # unclaimed when the caller does not ask for claims.
    after = await store.complete_node(run_id, "b", completed(run_id, "b", ["out"]), take=Take(1),
                                      token=granted.token)
    assert not after.stale and after.nodes == ["c"] and after.claims == {}
    assert (await node_states(store, run_id))["c"] == NodeStatus.PENDING
    assert (await claim(store, run_id, "c")).kind == "run"  # the caller claims it itself


async def test_a_node_the_completion_does_not_hand_over_is_not_claimed(store: RunStore) -> None:
    run_id, token = await compiled_chain_with_t_running(store)
    ready = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]),
                                      take=Take(1, claim_taken=TAKEN), token=token)
    assert ready.nodes == ["b"] and list(ready.claims) == ["b"]
    assert (await node_states(store, run_id))["c"] == NodeStatus.PENDING  # not ready: not claimed
    assert started_nodes(await events_of(store, run_id)) == ["t", "b"]


async def test_a_redelivered_completion_claims_nothing_again(store: RunStore) -> None:
    run_id, token = await compiled_chain_with_t_running(store)
    first = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]),
                                      take=Take(1, claim_taken=TAKEN), token=token)
    assert "b" in first.claims
    again = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]),
                                      take=Take(1, claim_taken=TAKEN), token=token)
    assert again.nodes == [] and again.claims == {}  # b is claimed: nothing is handed over twice
    assert started_nodes(await events_of(store, run_id)) == ["t", "b"]


async def test_a_stale_completion_claims_nothing(store: RunStore) -> None:
    run_id, token = await compiled_chain_with_t_running(store)
    ready = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]),
                                      take=Take(1, claim_taken=TAKEN), token=token + 1)
    assert ready.stale and ready.nodes == [] and ready.claims == {}
    assert (await node_states(store, run_id))["b"] == NodeStatus.PENDING
    assert started_nodes(await events_of(store, run_id)) == ["t"]


async def test_the_last_completion_of_a_run_claims_nothing(store: RunStore) -> None:
    run_id, token = await compiled_with_t_running(store, "b", [("t", "out", "b", "in")])
    ready = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]),
                                      take=Take(1, claim_taken=TAKEN), token=token)
    assert "b" in ready.claims
    end = await store.complete_node(run_id, "b", completed(run_id, "b", ["out"]),
                                    take=Take(1, claim_taken=TAKEN), token=ready.claims["b"].token)
    assert end.nodes == [] and end.claims == {}
    assert (await store.get_run(run_id)).status == "succeeded"
    assert started_nodes(await events_of(store, run_id)) == ["t", "b"]


async def test_every_branch_a_fan_out_hands_over_is_claimed_with_the_completion(store: RunStore) -> None:
    run_id, token = await compiled_fan_out_with_t_running(store)
    ready = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]),
                                      take=Take(3, claim_taken=TAKEN), token=token)
    assert ready.nodes == ["b", "c", "d"] and sorted(ready.claims) == ["b", "c", "d"]
    assert all(c.kind == "run" and c.outputs["t"]["out"].value == "t.out" for c in ready.claims.values())
    states = await node_states(store, run_id)
    assert [states[n] for n in "bcd"] == [NodeStatus.RUNNING] * 3
    assert (await claim(store, run_id, "c", worker_id="w2")).kind == "busy"  # each lease is held
    assert started_nodes(await events_of(store, run_id)) == ["t", "b", "c", "d"]
    for n in "bcd":  # each branch completes under its own token; the last one ends the run
        done = await store.complete_node(run_id, n, completed(run_id, n, ["out"]), take=Take(1),
                                         token=ready.claims[n].token)
        assert not done.stale
    assert (await store.get_run(run_id)).status == "succeeded"


async def test_branches_left_on_the_queue_are_not_claimed(store: RunStore) -> None:
    run_id, token = await compiled_fan_out_with_t_running(store)
    ready = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]),
                                      take=Take(2, claim_taken=TAKEN), token=token)
    assert ready.nodes == ["b", "c"] and sorted(ready.claims) == ["b", "c"] and ready.backlog == 1
    assert (await node_states(store, run_id))["d"] == NodeStatus.PENDING
    assert await store.take_queued(run_id, 1) == ["d"]
    assert (await claim(store, run_id, "d")).kind == "run"  # whoever takes it claims it itself


async def test_a_completion_claims_the_queued_nodes_it_takes(store: RunStore) -> None:
    run_id, token = await compiled_fan_out_with_t_running(store)
    first = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]), take=Take(1, claim_taken=TAKEN),
                                      token=token)
    assert first.nodes == ["b"] and list(first.claims) == ["b"] and first.backlog == 2
    # b's completion readies nothing and takes c and d, older nodes of the run's queue: claimed with it
    second = await store.complete_node(run_id, "b", completed(run_id, "b", ["out"]),
                                       take=Take(2, claim_taken=TAKEN), token=first.claims["b"].token)
    assert second.nodes == ["c", "d"] and sorted(second.claims) == ["c", "d"] and second.backlog == 0
    for n in "cd":
        granted = second.claims[n]
        assert granted.kind == "run" and granted.attempt == 1 and granted.run_input == {"x": 1}
        assert granted.outputs["t"]["out"].value == "t.out"  # what its step reads came with the claim
    states = await node_states(store, run_id)
    assert [states[n] for n in "cd"] == [NodeStatus.RUNNING] * 2
    assert (await claim(store, run_id, "d", worker_id="w2")).kind == "busy"  # its lease is held
    started = [e for e in await events_of(store, run_id) if e.event_type == "started"]
    assert [e.node_id for e in started] == ["t", "b", "c", "d"]
    for e in started[1:]:  # as the step would have written it
        assert (e.node_type, e.node_name, e.data, e.attempt) == ("relay", f"Relay {e.node_id}", {"worker_id": "w9"}, 1)
    for n in "cd":  # each completes under the claim's token; the last one ends the run
        done = await store.complete_node(run_id, n, completed(run_id, n, ["out"]), take=Take(1, claim_taken=TAKEN),
                                         token=second.claims[n].token)
        assert not done.stale
    assert (await store.get_run(run_id)).status == "succeeded"


async def test_a_taken_node_whose_claim_is_not_granted_is_left_to_its_caller(store: RunStore) -> None:
    run_id, token = await compiled_fan_out_with_t_running(store)
    first = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]), take=Take(1, claim_taken=TAKEN),
                                      token=token)
    assert await store.take_queued(run_id, 1) == ["c"]
    assert (await claim(store, run_id, "c", worker_id="w2")).kind == "run"  # another worker runs c
    second = await store.complete_node(run_id, "b", completed(run_id, "b", ["out"]),
                                       take=Take(1, claim_taken=TAKEN), token=first.claims["b"].token)
    assert second.nodes == ["d"] and list(second.claims) == ["d"]
    assert (await claim(store, run_id, "c", worker_id="w3")).kind == "busy"  # w2's claim stands


async def test_a_retrying_completion_claims_the_queued_node_it_takes(store: RunStore) -> None:
    run_id, token = await compiled_fan_out_with_t_running(store)
    first = await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]), take=Take(1, claim_taken=TAKEN),
                                      token=token)
    retry = completed(run_id, "b", [], status=NodeStatus.RETRYING)
    retry.next_attempt, retry.retry_delay_s = 2, 60.0
    freed = await store.complete_node(run_id, "b", retry, take=Take(1, claim_taken=TAKEN),
                                      token=first.claims["b"].token)
    assert freed.nodes == ["c"] and freed.claims["c"].kind == "run"


async def test_the_started_event_of_a_taken_node_is_the_json_the_step_would_write(redis_store: RedisRunStore) -> None:
    run_id, token = await compiled_fan_out_with_t_running(redis_store)
    await redis_store.complete_node(run_id, "t", completed(run_id, "t", ["out"]), take=Take(3, claim_taken=TAKEN),
                                    token=token)
    entries = await redis_store.redis.xrange(redis_store.keys.events(run_id))
    raw = [json.loads(f["e"]) for _, f in entries]
    written = next(e for e in raw if e["event_type"] == "started" and e["node_id"] == "c")
    expected = json.loads(event_json(NodeEvent(run_id=run_id, node_id="c", node_type="relay", node_name="Relay c",
                                               event_type=EventType.STARTED, data={"worker_id": "w9"})))
    assert list(written) == list(expected)  # the same fields in the same order
    assert {**written, "timestamp": 0} == {**expected, "timestamp": 0} and written["timestamp"] > 0


async def test_a_claim_carries_the_stored_outputs_of_what_it_reads_and_nothing_else(store: RunStore) -> None:
    run_id, token = await chain_with_a_running(store)
    await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), token=token)
    request = ClaimRequest(node_id="b", lease_s=30, started=started_event(run_id, "b"), read=["x", "a", "c"])
    granted = await store.claim_node(run_id, request, worker_id="w1")
    assert granted.kind == "run" and list(granted.outputs) == ["a"]  # x is no node, c has not run
    assert granted.outputs["a"]["out"].value == "a.out"


async def test_a_take_claims_the_nodes_it_takes(store: RunStore) -> None:
    run_id, token = await compiled_fan_out_with_t_running(store)
    await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]), take=Take(0), token=token)
    taken = await store.take_claimed(run_id, 2, TAKEN)  # a drain's take: b and c, claimed in the same step
    assert taken.nodes == ["b", "c"] and sorted(taken.claims) == ["b", "c"]
    assert all(c.kind == "run" and c.outputs["t"]["out"].value == "t.out" for c in taken.claims.values())
    assert (await claim(store, run_id, "b", worker_id="w2")).kind == "busy"
    assert await store.queue_length(run_id) == 1
    started = [e for e in await events_of(store, run_id) if e.event_type == "started"]
    assert [(e.node_id, e.data) for e in started[1:]] == [("b", {"worker_id": "w9"}), ("c", {"worker_id": "w9"})]
    await store.finish_run(run_id, "cancelled")
    assert (await store.take_claimed(run_id, 2, TAKEN)).nodes == []  # nothing once the run ended


async def test_a_node_a_take_cannot_claim_is_still_taken(store: RunStore) -> None:
    run_id, token = await compiled_fan_out_with_t_running(store)
    await store.complete_node(run_id, "t", completed(run_id, "t", ["out"]), take=Take(0), token=token)
    assert (await claim(store, run_id, "b", worker_id="w2")).kind == "run"  # a redelivered message's claim
    taken = await store.take_claimed(run_id, 1, TAKEN)
    assert taken.nodes == ["b"] and taken.claims == {}  # busy: the caller's own claim says so
