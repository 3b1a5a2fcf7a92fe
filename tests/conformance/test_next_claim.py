"""A completion that claims the node its caller runs next (``complete_node``'s
``Take.claims``), identical for every RunStore: the claim is the one ``claim_node`` would
grant (lease, fencing token, ``started`` event, the outputs it reads), made only for the
node handed over first, and dropped whenever ``claim_node`` would not grant it."""

from __future__ import annotations

from orchestrator.kernel.store import ClaimRequest, NodeStatus, RunStore, Take
from tests.support import Driver, claim, completed, events_of, make_plan, node_states, started_event


def next_claim(run_id: str, node_id: str, read: list[str]) -> ClaimRequest:
    return ClaimRequest(node_id=node_id, lease_s=30, started=started_event(run_id, node_id), read=read)


async def chain_with_a_running(store: RunStore) -> tuple[str, int]:
    """A run of the chain a -> b -> c with "a" claimed: (run id, a's token)."""
    plan = make_plan("abc", [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    await Driver(store, plan).start()
    granted = await claim(store, plan.run_id, "a")
    assert granted.kind == "run"
    return plan.run_id, granted.token


async def test_the_next_link_of_a_chain_is_claimed_with_the_completion(store: RunStore) -> None:
    run_id, token = await chain_with_a_running(store)
    ready = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]),
                                      take=Take(1, claims=[next_claim(run_id, "b", ["a"])]), token=token)
    assert ready.nodes == ["b"] and ready.claim is not None
    assert ready.claim.kind == "run" and ready.claim.token > 0 and ready.claim.attempt == 1
    assert ready.claim.run_input == {"x": 1}
    assert ready.claim.outputs["a"]["out"].value == "a.out"  # what b reads came with the claim
    assert (await node_states(store, run_id))["b"] == NodeStatus.RUNNING
    assert (await claim(store, run_id, "b", worker_id="w2")).kind == "busy"  # its lease is held
    started = [e.node_id for e in await events_of(store, run_id) if e.event_type == "started"]
    assert started == ["a", "b"]
    # The claim fences like any other: b completes under its token and hands on c.
    after = await store.complete_node(run_id, "b", completed(run_id, "b", ["out"]), take=Take(1),
                                      token=ready.claim.token)
    assert not after.stale and after.nodes == ["c"] and after.claim is None  # c was not named


async def test_a_node_not_handed_over_first_is_not_claimed(store: RunStore) -> None:
    run_id, token = await chain_with_a_running(store)
    ready = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]),
                                      take=Take(1, claims=[next_claim(run_id, "c", ["b"])]), token=token)
    assert ready.nodes == ["b"] and ready.claim is None
    states = await node_states(store, run_id)
    assert (states["b"], states["c"]) == (NodeStatus.PENDING, NodeStatus.PENDING)
    assert (await claim(store, run_id, "b")).kind == "run"  # the caller claims it itself


async def test_a_redelivered_completion_claims_nothing_again(store: RunStore) -> None:
    run_id, token = await chain_with_a_running(store)
    upcoming = [next_claim(run_id, "b", ["a"])]
    first = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]),
                                      take=Take(1, claims=upcoming), token=token)
    assert first.claim is not None
    again = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]),
                                      take=Take(1, claims=upcoming), token=token)
    assert again.nodes == [] and again.claim is None  # b is claimed: nothing is handed over twice
    started = [e.node_id for e in await events_of(store, run_id) if e.event_type == "started"]
    assert started == ["a", "b"]


async def test_a_stale_completion_claims_nothing(store: RunStore) -> None:
    run_id, token = await chain_with_a_running(store)
    ready = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]),
                                      take=Take(1, claims=[next_claim(run_id, "b", ["a"])]), token=token + 1)
    assert ready.stale and ready.claim is None
    assert (await node_states(store, run_id))["b"] == NodeStatus.PENDING


async def test_the_last_completion_of_a_run_claims_nothing(store: RunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(store, plan).start()
    run_id = plan.run_id
    first = await claim(store, run_id, "a")
    ready = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]),
                                      take=Take(1, claims=[next_claim(run_id, "b", ["a"])]), token=first.token)
    assert ready.claim is not None
    end = await store.complete_node(run_id, "b", completed(run_id, "b", ["out"]),
                                    take=Take(1, claims=[next_claim(run_id, "a", [])]),
                                    token=ready.claim.token)
    assert end.nodes == [] and end.claim is None
    assert (await store.get_run(run_id)).status == "succeeded"
