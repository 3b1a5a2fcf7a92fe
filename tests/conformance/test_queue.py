"""The run's queue, identical for every RunStore: a completion that asks to ``take`` n nodes
queues what became ready and hands back the oldest n; the rest wait for a free slot."""

from __future__ import annotations

from orchestrator.kernel.store import NodeCompletion, NodeStatus, RunStore, Take
from orchestrator.store import fanin
from orchestrator.store.redis_store import RedisRunStore
from tests.support import Driver, claim, completed, make_plan, node_states


def fan(width: int, *, join: bool = False) -> list[tuple[str, str, str, str]]:
    edges = [("a", "out", f"b{i}", "in") for i in range(width)]
    return edges + ([(f"b{i}", "out", "z", "in") for i in range(width)] if join else [])


async def started(store: RunStore, plan_nodes: str | list[str], edges: list[tuple[str, str, str, str]]) -> str:
    plan = make_plan(plan_nodes, edges)
    await Driver(store, plan).start()
    await claim(store, plan.run_id, "a")
    return plan.run_id


async def test_a_completion_takes_the_oldest_ready_nodes_and_queues_the_rest(store: RunStore) -> None:
    run_id = await started(store, ["a", "b0", "b1", "b2", "b3"], fan(4))
    ready = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), take=Take(1))
    assert (ready.nodes, ready.queued, ready.backlog) == (["b0"], 4, 3)
    assert await store.queue_length(run_id) == 3
    assert await store.take_queued(run_id, 2) == ["b1", "b2"]
    assert await store.take_queued(run_id, 5) == ["b3"]
    assert await store.take_queued(run_id, 5) == []


async def test_queued_nodes_are_not_taken_for_undispatched_but_taken_ones_are(store: RunStore) -> None:
    run_id = await started(store, ["a", "b0", "b1", "b2"], fan(3))
    await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), take=Take(1))
    # A redelivered completion returns what nobody answers for: the node taken (not yet
    # claimed: its taker may have died), not the two the queue still holds.
    again = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), take=Take(1))
    assert again.nodes == ["b0"]
    await claim(store, run_id, "b0")
    again = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]))
    assert again.nodes == []


async def test_take_zero_queues_everything(store: RunStore) -> None:
    run_id = await started(store, ["a", "b0", "b1"], fan(2))
    ready = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), take=Take(0))
    assert (ready.nodes, ready.queued, ready.backlog) == ([], 2, 2)


async def test_the_queue_is_first_in_first_out_across_completions(store: RunStore) -> None:
    plan = make_plan(["s", "a", "c", "a0", "a1", "c0"], [
        ("s", "out", "a", "in"), ("s", "out", "c", "in"),
        ("a", "out", "a0", "in"), ("a", "out", "a1", "in"), ("c", "out", "c0", "in")])
    run_id = plan.run_id
    await Driver(store, plan).start()
    await claim(store, run_id, "s")
    assert (await store.complete_node(run_id, "s", completed(run_id, "s", ["out"]), take=Take(2))).nodes == ["a", "c"]
    await claim(store, run_id, "a")
    await claim(store, run_id, "c")
    assert (await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), take=Take(0))).backlog == 2
    ready = await store.complete_node(run_id, "c", completed(run_id, "c", ["out"]), take=Take(1))
    assert (ready.nodes, ready.backlog) == (["a0"], 2)  # the oldest first: a's, then c's
    assert await store.take_queued(run_id, 3) == ["a1", "c0"]


async def test_a_retrying_node_frees_its_slot_for_a_queued_one(store: RunStore) -> None:
    run_id = await started(store, ["a", "b0", "b1", "b2"], fan(3))
    await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), take=Take(1))  # b0 taken
    await claim(store, run_id, "b0")
    retrying = NodeCompletion(status=NodeStatus.RETRYING, next_attempt=2)
    ready = await store.complete_node(run_id, "b0", retrying, take=Take(1))
    assert (ready.nodes, ready.queued, ready.backlog) == (["b1"], 0, 1)


async def test_an_ended_run_hands_out_nothing_and_its_queued_nodes_did_not_run(store: RunStore) -> None:
    run_id = await started(store, ["a", "b0", "b1", "b2"], fan(3))
    await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), take=Take(1))
    assert await store.finish_run(run_id, "cancelled")
    assert await store.take_queued(run_id, 5) == []
    states = await node_states(store, run_id)
    assert [states[n] for n in ("b1", "b2")] == ["not_run", "not_run"]
    assert await store.queue_length(run_id) == 0


async def test_a_fan_in_fed_from_the_queue_still_waits_for_every_branch(store: RunStore) -> None:
    run_id = await started(store, ["a", "b0", "b1", "b2", "z"], fan(3, join=True))
    ready = await store.complete_node(run_id, "a", completed(run_id, "a", ["out"]), take=Take(1))
    running = list(ready.nodes)
    done = []
    while running:
        node = running.pop(0)
        await claim(store, run_id, node)
        done.append(node)
        running += (await store.complete_node(run_id, node, completed(run_id, node, ["out"]), take=Take(1))).nodes
    assert done == ["b0", "b1", "b2", "z"]
    assert (await store.get_run(run_id)).status == "succeeded"


async def test_redis_counts_every_runs_queued_nodes_for_back_pressure(redis_store: RedisRunStore) -> None:
    async def counted() -> int:  # what back-pressure reads (a cluster: the sum over buckets)
        return await fanin.queued_nodes(redis_store.redis, redis_store.keys, max_age_s=0)

    first = await started(redis_store, ["a", "b0", "b1", "b2", "b3"], fan(4))
    second = await started(redis_store, ["a", "b0", "b1"], fan(2))
    await redis_store.complete_node(first, "a", completed(first, "a", ["out"]), take=Take(1))
    await redis_store.complete_node(second, "a", completed(second, "a", ["out"]), take=Take(0))
    assert await counted() == 3 + 2
    await redis_store.take_queued(first, 2)
    assert await counted() == 1 + 2
    await redis_store.finish_run(second, "cancelled")  # what its queue held will not run
    assert await counted() == 1
