"""``RunStore.complete_chain``, identical for every RunStore: the completions of a chain's
links stored as one step leave the run, its events and its answers exactly as one
``complete_node`` per link (each next link claimed by the completion before it) would,
and the chain stops, applying nothing of the rest, at the first link that completion did
not hand over alone or whose completion is refused."""

from __future__ import annotations

from orchestrator.kernel.store import ChainLink, NodeStatus, RunStatus, RunStore, Take
from tests.conformance.test_next_claim import (
    TAKEN,
    compiled_chain_with_t_running,
    compiled_fan_out_with_t_running,
    compiled_with_t_running,
)
from tests.support import claim, completed, events_of, node_states, stale_refusals


def link(run_id: str, node_id: str) -> ChainLink:
    return ChainLink(node_id, completed(run_id, node_id, ["out"]))


def story(events: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    """What a run's events say happened, in order, without times and worker ids."""
    return [(e.node_id, e.event_type) for e in events]


async def stepwise(store: RunStore, run_id: str, token: int, nodes: str) -> None:
    """The same links stored one ``complete_node`` each, each next one under the claim the
    one before made."""
    for node in nodes:
        ready = await store.complete_node(run_id, node, completed(run_id, node, ["out"]),
                                          take=Take(1, claim_taken=TAKEN), token=token)
        token = ready.claims[ready.nodes[0]].token if ready.nodes else 0


async def test_a_whole_chain_is_stored_as_one_completion_per_link_would_store_it(store: RunStore) -> None:
    run_id, token = await compiled_chain_with_t_running(store)
    ready = await store.complete_chain(run_id, [link(run_id, n) for n in "tbc"], take=Take(1, claim_taken=TAKEN),
                                       token=token)
    assert ready.applied == 3 and ready.nodes == [] and not ready.stale
    assert await node_states(store, run_id) == {n: NodeStatus.SUCCEEDED for n in "tbc"}
    assert (await store.get_run(run_id)).status == RunStatus.SUCCEEDED
    outputs = await store.read_outputs(run_id, ["b", "c"])
    assert outputs["c"]["out"].value == "c.out"

    other, other_token = await compiled_chain_with_t_running(store)
    await stepwise(store, other, other_token, "tbc")
    assert story(await events_of(store, run_id)) == story(await events_of(store, other))
    # t's started event is its own claim's; each link's, the claim the completion before made
    assert [(e.data or {}).get("worker_id") for e in await events_of(store, run_id) if e.event_type == "started"] \
        == [None, "w9", "w9"]


async def test_the_rest_of_a_run_goes_on_after_a_chain_that_ends_before_it(store: RunStore) -> None:
    run_id, token = await compiled_with_t_running(store, "bcd", [("t", "out", "b", "in"), ("b", "out", "c", "in"),
                                                                  ("c", "out", "d", "in")])
    ready = await store.complete_chain(run_id, [link(run_id, n) for n in "tb"], take=Take(1, claim_taken=TAKEN),
                                       token=token)
    assert ready.applied == 2 and ready.nodes == ["c"]
    granted = ready.claims["c"]  # the last link handed c over, claimed, as complete_node does
    assert granted.kind == "run" and granted.outputs["b"]["out"].value == "b.out"
    assert (await node_states(store, run_id))["c"] == NodeStatus.RUNNING
    after = await store.complete_node(run_id, "c", completed(run_id, "c", ["out"]),
                                      take=Take(1, claim_taken=TAKEN), token=granted.token)
    assert after.nodes == ["d"]


async def test_a_superseded_first_link_stores_nothing(store: RunStore) -> None:
    run_id, token = await compiled_chain_with_t_running(store)
    before = await events_of(store, run_id)
    refused = await stale_refusals(store, run_id)
    ready = await store.complete_chain(run_id, [link(run_id, n) for n in "tbc"], take=Take(1, claim_taken=TAKEN),
                                       token=token + 1)
    assert ready.stale and ready.applied == 0
    assert await node_states(store, run_id) == {"t": NodeStatus.RUNNING, "b": NodeStatus.PENDING,
                                                "c": NodeStatus.PENDING}
    assert story(await events_of(store, run_id)) == story(before)
    assert await stale_refusals(store, run_id) == refused + 1


async def test_a_link_handed_over_with_others_is_not_applied(store: RunStore) -> None:
    """t fans out to b, c and d: its completion hands over more than b, so b's completion
    (computed by a host that expected b alone) is dropped, and the answer is t's, with the
    claims it made: the caller runs b, c and d as nodes handed over."""
    run_id, token = await compiled_fan_out_with_t_running(store)
    ready = await store.complete_chain(run_id, [link(run_id, n) for n in "tb"], take=Take(3, claim_taken=TAKEN),
                                       token=token)
    assert ready.applied == 1 and ready.nodes == ["b", "c", "d"] and sorted(ready.claims) == ["b", "c", "d"]
    states = await node_states(store, run_id)
    assert states["t"] == NodeStatus.SUCCEEDED and states["b"] == NodeStatus.RUNNING
    assert ("b", "completed") not in story(await events_of(store, run_id))


async def test_a_chain_of_a_run_that_ended_stores_the_first_link_only(store: RunStore) -> None:
    run_id, token = await compiled_chain_with_t_running(store)
    await store.finish_run(run_id, RunStatus.CANCELLED)
    ready = await store.complete_chain(run_id, [link(run_id, n) for n in "tbc"], take=Take(1, claim_taken=TAKEN),
                                       token=token)
    assert ready.applied == 1 and ready.nodes == []
    states = await node_states(store, run_id)
    assert states["b"] not in (NodeStatus.SUCCEEDED, NodeStatus.RUNNING)
    assert (await claim(store, run_id, "b")).kind == "closed"
