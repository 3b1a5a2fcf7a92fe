"""Group commit on the Redis store (one Redis and a cluster): the completions of one run
that a process's loop makes together go to Redis as one script call, and come out as
separate calls in the same order would: each caller gets its own answer, a fenced or
redelivered completion in the group changes nothing, and a completion over a budget
fails alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import RedisCluster

from orchestrator.kernel.compile import compile_run
from orchestrator.kernel.protocol import DataValue
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.kernel.store import ClaimRequest, NodeCompletion, NodeStatus, Ready, RunRecord, RunStatus, Take
from orchestrator.kernel.validation import validate_graph
from orchestrator.store.redis_client import is_cluster
from orchestrator.store.redis_store import RedisRunStore, new_run_id
from tests.conformance.conftest import command_stats, reset_stats
from tests.conformance.test_next_claim import TAKEN
from tests.fake_nodes import graph, make_registry
from tests.support import completed, make_plan, record_for, started_event

KB = 1024
BRANCHES = 20


def fan_out(run_id: str, branches: int = BRANCHES) -> RunPlan:
    edges = [("a", "out", f"b{i}", "in") for i in range(branches)]
    edges += [(f"b{i}", "out", "j", "in") for i in range(branches)]
    return make_plan(["a", *(f"b{i}" for i in range(branches)), "j"], edges, run_id=run_id)


async def claim(store: RedisRunStore, run_id: str, node_id: str, *, lease_s: float = 30, worker_id: str = "w1") -> int:
    granted = await store.claim_node(run_id, ClaimRequest(node_id, lease_s=lease_s,
                                                          started=started_event(run_id, node_id)), worker_id=worker_id)
    assert granted.kind == "run", (node_id, granted)
    return granted.token


async def branches_claimed(store: RedisRunStore, run_id: str, branches: int = BRANCHES,
                           lease_s: float = 30) -> dict[str, int]:
    """The run of ``fan_out`` with ``a`` done and every branch claimed: branch -> token."""
    plan = fan_out(run_id, branches)
    await store.create_run(plan, record_for(plan))
    await store.mark_dispatched(run_id, ["a"])
    await store.complete_node(run_id, "a", completed(run_id, "a", {"out"}), token=await claim(store, run_id, "a"))
    return {f"b{i}": await claim(store, run_id, f"b{i}", lease_s=lease_s) for i in range(branches)}


async def test_a_fan_outs_branches_completed_together_are_one_script_call(redis_store: RedisRunStore) -> None:
    run_id = "group-fan"
    tokens = await branches_claimed(redis_store, run_id)
    await reset_stats(redis_store.redis)
    readies = await asyncio.gather(*(redis_store.complete_node(run_id, node, completed(run_id, node, {"out"}),
                                                               token=token) for node, token in tokens.items()))
    scripts = (await command_stats(redis_store.redis)).get("evalsha", 0)
    assert scripts == 1, f"{BRANCHES} completions went as {scripts} script calls"
    # Each caller got its own answer: the join is readied once, by the last branch.
    assert [r.nodes for r in readies] == [[]] * (BRANCHES - 1) + [["j"]]
    states = await redis_store.node_states(run_id)
    assert all(states[f"b{i}"] == "succeeded" for i in range(BRANCHES)), states
    assert states["j"] == "pending"
    outputs = await redis_store.read_outputs(run_id, ["b0", f"b{BRANCHES - 1}"])
    assert set(outputs) == {"b0", f"b{BRANCHES - 1}"}
    completed_events = [e for _, e in await redis_store.read_events(run_id) if e.event_type == "completed"]
    assert sorted(e.node_id for e in completed_events) == sorted(["a", *tokens])  # each once
    await redis_store.mark_dispatched(run_id, ["j"])
    token = await claim(redis_store, run_id, "j")
    await redis_store.complete_node(run_id, "j", completed(run_id, "j", {"out"}), token=token)
    assert (await redis_store.get_run(run_id)).status == "succeeded"


@pytest.mark.parametrize("taking", ["every", "some"])
async def test_completions_that_claim_what_they_hand_over_share_one_call(redis_store: RedisRunStore,
                                                                         taking: str) -> None:
    """Branches that take and claim what they ready (a worker's), with the same claim data
    (sent once for the call) or, for some, none."""
    run_id = f"group-take-{taking}"
    tokens = await branches_claimed(redis_store, run_id)
    await reset_stats(redis_store.redis)

    def take(i: int) -> Take | None:
        return Take(1, claim_taken=TAKEN) if taking == "every" or i % 2 else None

    readies = await asyncio.gather(*(redis_store.complete_node(
        run_id, f"b{i}", completed(run_id, f"b{i}", {"out"}), take=take(i), token=tokens[f"b{i}"])
        for i in range(BRANCHES)))
    assert (await command_stats(redis_store.redis)).get("evalsha", 0) == 1
    last = readies[-1]  # b19 takes: it readied j, took it and claimed it
    assert last.nodes == ["j"] and last.claims["j"].kind == "run"
    assert all(not r.nodes and not r.claims for r in readies[:-1])
    started_j = [e for _, e in await redis_store.read_events(run_id) if e.event_type == "started" and e.node_id == "j"]
    assert len(started_j) == 1 and started_j[0].data.get("worker_id") == "w9"


async def test_a_fenced_and_a_redelivered_completion_change_nothing_in_their_group(
        redis_store: RedisRunStore) -> None:
    run_id = "group-fenced"
    tokens = await branches_claimed(redis_store, run_id, branches=4, lease_s=0.001)
    await redis_store.complete_node(run_id, "b0", completed(run_id, "b0", {"out"}), token=tokens["b0"])
    await asyncio.sleep(0.02)  # b1's lease lapsed: another worker's claim fences the first
    superseded, tokens["b1"] = tokens["b1"], await claim(redis_store, run_id, "b1", worker_id="w2")
    assert superseded < tokens["b1"]
    readies: list[Ready] = await asyncio.gather(
        redis_store.complete_node(run_id, "b0", completed(run_id, "b0", {"out"}), token=tokens["b0"]),  # again
        redis_store.complete_node(run_id, "b1", completed(run_id, "b1", {"out"}), token=superseded),
        redis_store.complete_node(run_id, "b2", completed(run_id, "b2", {"out"}), token=tokens["b2"]),
    )
    assert [r.stale for r in readies] == [False, True, False]
    states = await redis_store.node_states(run_id)
    assert (states["b0"], states["b1"], states["b2"], states["b3"]) == ("succeeded", "running", "succeeded", "running")
    assert await redis_store.stale_refusals(run_id) == 1
    completed_b0 = [e for _, e in await redis_store.read_events(run_id)
                    if e.event_type == "completed" and e.node_id == "b0"]
    assert len(completed_b0) == 1  # the redelivered completion appended nothing


async def test_a_completion_over_the_run_budget_fails_alone_in_its_group(redis_store: RedisRunStore) -> None:
    settings = redis_store.settings.model_copy(update={"workspace_max_bytes": 0, "run_max_bytes": 250 * KB})
    store = RedisRunStore(redis_store.redis, settings)
    run_id = "group-budget"
    tokens = await branches_claimed(store, run_id, branches=3)

    def done(size_kb: int) -> NodeCompletion:
        return NodeCompletion(status=NodeStatus.SUCCEEDED, outputs={"out": DataValue("data", "x" * (size_kb * KB))})

    await reset_stats(store.redis)
    await asyncio.gather(store.complete_node(run_id, "b0", done(100), token=tokens["b0"]),
                         store.complete_node(run_id, "b1", done(200), token=tokens["b1"]),  # 300 KB: over
                         store.complete_node(run_id, "b2", done(1), token=tokens["b2"]))
    # one call for the three, then b1's failure naming the budget in one more
    assert (await command_stats(store.redis)).get("evalsha", 0) == 2
    states = await store.node_states(run_id)
    assert (states["b0"], states["b1"], states["b2"]) == ("succeeded", "failed", "succeeded")
    record = await store.get_run(run_id)
    assert record.status == "failed"
    assert record.error is not None and record.error["limit"] == "ORCH_RUN_MAX_BYTES"
    assert record.error["node_id"] == "b1"
    assert states["j"] == "not_run"


async def test_a_groups_bytes_are_counted_within_the_budgets_once_and_whole(redis_store: RedisRunStore) -> None:
    """The bytes of a group's completions reach the run's count and today's workspace
    counter (with its expiry) whole, read and written once for the group."""
    settings = redis_store.settings.model_copy(update={"workspace_max_bytes": 64 * 1024 * KB,
                                                       "run_max_bytes": 64 * 1024 * KB})
    store = RedisRunStore(redis_store.redis, settings)
    run_id = "group-bytes"
    tokens = await branches_claimed(store, run_id, branches=6)
    _, day_keys, _ = store.budget.request(1, workspace="default", run_id=run_id)  # record_for: no workspace
    run_before = int(await store.redis.hget(store.keys.run(run_id), "bytes") or 0)
    day_before = int(await store.redis.get(day_keys[0]) or 0)
    await reset_stats(store.redis)
    await asyncio.gather(*(store.complete_node(run_id, node, NodeCompletion(
        status=NodeStatus.SUCCEEDED, outputs={"out": DataValue("data", "x" * ((i + 1) * KB))}), token=token)
        for i, (node, token) in enumerate(tokens.items())))
    stats = await command_stats(store.redis)
    assert (stats.get("evalsha", 0), stats.get("mget", 0), stats.get("incrby", 0)) == (1, 1, 1), stats
    run_added = int(await store.redis.hget(store.keys.run(run_id), "bytes")) - run_before
    day_added = int(await store.redis.get(day_keys[0])) - day_before
    assert run_added == day_added >= 21 * KB  # 1 + 2 + ... + 6 KB of outputs, and their events
    assert await store.redis.ttl(day_keys[0]) > 0


async def test_nodes_a_group_takes_from_the_queue_keep_their_marks_when_claimed_in_it(
        redis_store: RedisRunStore) -> None:
    """A completion takes three queued nodes and claims them in its call; one of them another
    worker holds. The two claimed stay marked dispatched (no mark dropped and set again);
    the busy one is undispatched again, as before; the queue's count is the queue's length."""
    run_id = "group-queue"
    plan = fan_out(run_id)
    await redis_store.create_run(plan, record_for(plan))
    await redis_store.mark_dispatched(run_id, ["a"])
    token = await claim(redis_store, run_id, "a")
    first = await redis_store.complete_node(run_id, "a", completed(run_id, "a", {"out"}),
                                            take=Take(1, claim_taken=TAKEN), token=token)
    assert first.nodes == ["b0"] and first.claims["b0"].kind == "run"
    await claim(redis_store, run_id, "b2", worker_id="w2")  # still queued, but held
    queue, dispatched = redis_store.keys.queue(run_id), redis_store.keys.dispatched(run_id)
    await reset_stats(redis_store.redis)
    ready = await redis_store.complete_node(run_id, "b0", completed(run_id, "b0", {"out"}),
                                            take=Take(3, claim_taken=TAKEN), token=first.claims["b0"].token)
    assert ready.nodes == ["b1", "b2", "b3"]
    assert set(ready.claims) == {"b1", "b3"} and all(c.kind == "run" for c in ready.claims.values())
    stats = await command_stats(redis_store.redis)
    assert (stats.get("sadd", 0), stats.get("srem", 0)) == (0, 1), stats
    marks = await redis_store.redis.smembers(dispatched)
    assert {"b1", "b3"} <= marks and "b2" not in marks
    assert await redis_store.redis.lrange(queue, 0, -1) == [f"b{i}" for i in range(4, BRANCHES)]
    bucket = redis_store.keys.bucket(run_id)
    assert int(await redis_store.redis.get(redis_store.keys.queued_nodes(bucket))) == BRANCHES - 4


async def net_output_bytes(redis: Any) -> int:
    """Bytes Redis wrote to its clients (summed over a cluster's primaries)."""
    if is_cluster(redis):
        per_node = await redis.info("stats", target_nodes=RedisCluster.PRIMARIES)
        return sum(int(stats["total_net_output_bytes"]) for stats in per_node.values())
    return int((await redis.info("stats"))["total_net_output_bytes"])


async def test_claims_handed_over_together_carry_each_text_once(redis_store: RedisRunStore) -> None:
    """A source with 100 KB of outputs hands its 20 branches over, claimed in its own call:
    the reply carries the outputs (and the run's input) once, not once per branch, and each
    branch's claim still holds them whole, parsed for it alone."""
    relays = [f"r{i}" for i in range(BRANCHES)]
    g = graph([("t", "emit", "Start", {"value": 7}), *((n, "relay", f"Relay {n}") for n in relays)],
              [("t", "out", n, "in") for n in relays])
    plan = compile_run(validate_graph(g, make_registry()), new_run_id(), None)
    run_id = plan.run_id
    await redis_store.create_run(plan, RunRecord(run_id=run_id, status=RunStatus.QUEUED, graph_id="g",
                                                 run_input={"doc": "y" * (20 * KB)}))
    token = await claim(redis_store, run_id, "t")
    big = NodeCompletion(status=NodeStatus.SUCCEEDED, outputs={"out": DataValue("data", {"text": "x" * (100 * KB)})})
    before = await net_output_bytes(redis_store.redis)
    ready = await redis_store.complete_node(run_id, "t", big, take=Take(BRANCHES, claim_taken=TAKEN), token=token)
    sent = await net_output_bytes(redis_store.redis) - before
    assert sorted(ready.claims) == sorted(relays)
    assert sent < 2 * 120 * KB, f"the reply was {sent} bytes for 120 KB of texts"
    claims = list(ready.claims.values())
    for c in claims:
        assert c.kind == "run" and c.outputs["t"]["out"].value == {"text": "x" * (100 * KB)}
        assert c.run_input == {"doc": "y" * (20 * KB)}
    # each its own values: a node changing what it got changes no other node's
    assert claims[0].outputs["t"]["out"].value is not claims[1].outputs["t"]["out"].value
    assert claims[0].run_input is not claims[1].run_input
