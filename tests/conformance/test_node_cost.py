"""What a node costs the Redis store: its claim and its completion (storage budgets
counted inside it) are one round trip each, and a completion of an active run re-sets
no TTL; the keys a run fills as it progresses still expire (against real Redis)."""

from __future__ import annotations

import json

from orchestrator.kernel.protocol import DataValue
from orchestrator.kernel.store import ClaimRequest, Take
from orchestrator.store.redis_store import DEFAULT_WORKSPACE, RedisRunStore
from tests.conformance.conftest import command_stats, reset_stats
from tests.conformance.test_next_claim import TAKEN, compiled_chain_with_t_running
from tests.conformance.test_redis_keys import run_key_ttls
from tests.support import Driver, completed, make_plan, started_event
from tests.support.redis_writes import bytes_written, round_trips


async def commands(store: RedisRunStore) -> dict[str, int]:
    return await command_stats(store.redis)


async def test_a_claim_and_a_budgeted_completion_are_one_round_trip_each(redis_store: RedisRunStore) -> None:
    assert redis_store.budget.enabled  # the shipped defaults count every completion's bytes
    plan = make_plan("abc", [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    driver = Driver(redis_store, plan)
    await driver.start()
    await driver.step("a")  # scripts loaded, the run's workspace known from its claim
    run_id, calls = plan.run_id, list[int]()
    with round_trips(calls):
        claim = await redis_store.claim_node(run_id, ClaimRequest("b", lease_s=30, started=started_event(run_id, "b")),
                                             worker_id="w1")
        assert claim.kind == "run"
        ready = await redis_store.complete_node(run_id, "b", completed(run_id, "b", {"out"}))
    assert ready.nodes == ["c"]
    assert len(calls) == 2
    record = await redis_store.redis.hget(redis_store.keys.run(run_id), "bytes")
    assert int(record or 0) > 0  # the completion's bytes were counted


async def test_a_chain_link_claimed_by_the_previous_completion_costs_one_round_trip(
    redis_store: RedisRunStore,
) -> None:
    # A first run's step loads the scripts and, on a cluster, the workspace's byte counts
    # in the other buckets (refreshed now and then, not on every completion).
    warm = Driver(redis_store, make_plan("ab", [("a", "out", "b", "in")]))
    await warm.start()
    await warm.step("a")
    run_id, token = await compiled_chain_with_t_running(redis_store)
    # The run's record names no workspace: its bytes count in the default one's.
    workspace_key = redis_store.budget.request(1, workspace=DEFAULT_WORKSPACE, run_id=run_id)[1][0]
    calls: list[int] = []
    with round_trips(calls):
        to_b = await redis_store.complete_node(run_id, "t", completed(run_id, "t", {"out"}),
                                               take=Take(1, claim_taken=TAKEN), token=token)
    assert to_b.claims["b"].kind == "run"
    bytes_after_t = int(await redis_store.redis.get(workspace_key) or 0)
    with round_trips(calls):  # b runs on the claim it came with: its completion is all it costs
        to_c = await redis_store.complete_node(run_id, "b", completed(run_id, "b", {"out"}),
                                               take=Take(1, claim_taken=TAKEN), token=to_b.claims["b"].token)
    assert to_c.nodes == ["c"] and to_c.claims["c"].kind == "run"
    assert len(calls) == 2
    # Both completions that claimed were counted against the budgets (the day counters
    # at their fixed place among the script's keys).
    assert 0 < bytes_after_t < int(await redis_store.redis.get(workspace_key) or 0)


async def test_a_completion_of_an_active_run_sets_no_ttl(redis_store: RedisRunStore) -> None:
    plan = make_plan("abc", [("a", "out", "b", "in"), ("b", "out", "c", "in")])
    driver = Driver(redis_store, plan)
    await driver.start()
    await driver.step("a")
    await reset_stats(redis_store.redis)
    await driver.step("b")
    counted = await commands(redis_store)
    assert counted.get("expire", 0) + counted.get("pexpire", 0) == 0, counted
    await driver.step("c")  # the end: every key gets the retention TTL
    ended = await commands(redis_store)
    assert ended.get("expire", 0) >= 15


async def test_keys_a_run_creates_while_it_progresses_expire_with_it(redis_store: RedisRunStore) -> None:
    plan = make_plan("abcd", [("a", "out", "b", "in"), ("a", "out", "c", "in"), ("a", "out", "d", "in")])
    run_id = plan.run_id
    driver = Driver(redis_store, plan)
    await driver.start()
    await redis_store.claim_node(run_id, ClaimRequest("a", lease_s=30, started=started_event(run_id, "a")),
                                 worker_id="w1")
    # a worker with one free slot: the ready nodes wait on the run's queue (a new key)
    ready = await redis_store.complete_node(run_id, "a", completed(run_id, "a", {"out"}), take=Take(1))
    assert len(ready.nodes) == 1 and ready.queued == 3
    ttls = await run_key_ttls(redis_store, run_id)
    assert redis_store.keys.queue(run_id) in ttls
    assert all(ttl > 0 for ttl in ttls.values()), ttls



async def test_a_completion_sends_its_output_text_once(redis_store: RedisRunStore) -> None:
    """A value that only passes through the completion is encoded once: its JSON text goes
    to Redis as it is, not escaped again inside the script's other arguments (a text full
    of quotes would double in size at every extra encoding)."""
    warm = Driver(redis_store, make_plan("ab", [("a", "out", "b", "in")]))  # the scripts loaded
    await warm.start()
    await warm.step("a")
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(redis_store, plan).start()
    run_id = plan.run_id
    claim = await redis_store.claim_node(run_id, ClaimRequest("a", lease_s=30, started=started_event(run_id, "a")),
                                         worker_id="w1")
    completion = completed(run_id, "a", {"out"})
    value = '"' * 100_000  # JSON text 200,002 bytes: every quote escaped
    completion.outputs["out"] = DataValue("data", value)
    sizes: list[int] = []
    with bytes_written(sizes):
        ready = await redis_store.complete_node(run_id, "a", completion, token=claim.token)
    assert ready.nodes == ["b"]
    assert 200_000 < sum(sizes) < 210_000, sizes  # the text once, and the rest of the call
    stored = await redis_store.redis.hget(redis_store.keys.outputs(run_id), "a")
    assert json.loads(stored)["out"]["value"] == value


async def test_a_chain_links_completion_reads_nothing_it_already_knows(redis_store: RedisRunStore) -> None:
    """The completion that claims the chain's next link reads neither the run's status nor
    the link's status or plan membership a second time (its countdown and claim data
    established them in the same call), nor the live count it has just incremented, nor
    the output it has just stored; the run record's fields it needs are one read."""
    warm = Driver(redis_store, make_plan("ab", [("a", "out", "b", "in")]))  # the scripts loaded
    await warm.start()
    await warm.step("a")
    run_id, token = await compiled_chain_with_t_running(redis_store)
    await reset_stats(redis_store.redis)
    to_b = await redis_store.complete_node(run_id, "t", completed(run_id, "t", {"out"}),
                                           take=Take(1, claim_taken=TAKEN), token=token)
    assert to_b.claims["b"].kind == "run"
    assert to_b.claims["b"].outputs["t"]["out"].value is not None  # t's output, handed over as stored
    counted = await commands(redis_store)
    assert counted.get("hexists", 0) == 0, counted
    # The fencing token, t's status, the adjacency of t and of b (with b's initial count
    # and claim data), b's status: five HGETs (fourteen once: the run's status, b's status
    # and its live count read again, b's attempt, b's resume payload, which a node made
    # ready in this call cannot have; nine before the run record's shared-plan name, status
    # and stored bytes became one HMGET, and b's initial count and claim data moved into
    # the adjacency).
    assert counted["hget"] == 5, counted
    # Two HMGETs: the run record's fields (shared plan, status, bytes, TTL renewal) and the
    # run's input for b's claim; b's token and claim count are not read (b was never
    # claimed), nor t's output, which this call stored.
    assert counted["hmget"] == 2, counted
    assert counted.get("ttl", 0) == 0 and counted.get("sismember", 0) == 0, counted
    # One wake-up hint for the call's two events (t completed, b started).
    publish = "spublish" if redis_store.keys.tagged else "publish"  # a cluster's is sharded
    assert counted["xadd"] == 2 and counted[publish] == 1, counted
    # Nor its lease or sent time: b was never claimed or sent.
    assert counted.get("exists", 0) == 0 and counted.get("hdel", 0) == 0, counted
    # t's live port, b's pending count, the run's remaining count and bytes: b's token and
    # claim count are one HSET (two more HINCRBYs before).
    assert counted["hincrby"] == 4, counted
