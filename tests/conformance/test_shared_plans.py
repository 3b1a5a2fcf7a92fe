"""Runs of a stored graph's version share its plan data (``Keys.plan_data``) instead of
each storing a copy, on one Redis and on a Redis Cluster: they still run to the end, a
worker reads the same plan, and the shared data outlives every run that names it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from orchestrator.kernel.scheduling import RunPlan
from orchestrator.store.creation import StartGuard
from orchestrator.store.redis_store import RedisRunStore
from tests.support import Driver, events_of, make_plan, node_states, record_for

# a diamond whose false branch is dead: the join counts one arrival from each side
EDGES = [("if", "true", "t", "in"), ("if", "false", "f", "in"), ("t", "out", "join", "in"),
         ("f", "out", "join", "in"), ("join", "out", "end", "in")]


async def guard_for(store: RedisRunStore, graph_id: str = "g") -> StartGuard:
    """A stored graph's start guard (its graph hash written as the graph store would)."""
    await store.redis.hset(store.keys.graph(graph_id),
                           mapping={"latest": "1", "created_at": "c1", "workspace": "default"})
    return StartGuard(graph_key=store.keys.graph(graph_id), runs_key=store.keys.graph_runs(graph_id),
                      created_at="c1", workspace="default", version=1, latest=True, keep_s=3600)


@dataclass
class StoredDriver(Driver):
    """A :class:`Driver` whose run is created as a stored graph's start is (guarded)."""

    guard: StartGuard | None = None

    async def start(self) -> list[str]:
        await self.store.create_run(self.plan, record_for(self.plan), guard=self.guard)  # type: ignore[call-arg]
        await self.store.mark_dispatched(self.plan.run_id, self.plan.start)
        return list(self.plan.start)


async def shared_key_of(store: RedisRunStore, run_id: str) -> str:
    """The plan data key the run's record names."""
    return str(await store.redis.hget(store.keys.run(run_id), "shared"))


def template() -> RunPlan:
    return make_plan(["if", "t", "f", "join", "end"], EDGES, run_id="template")


def run_of(plan: RunPlan, run_id: str) -> RunPlan:
    run = plan.for_run(run_id)
    run.labels = {"workspace": "default", "trace": run_id}
    return run


async def test_runs_of_one_plan_each_run_to_the_end_from_the_shared_data(redis_store: RedisRunStore) -> None:
    guard, plan = await guard_for(redis_store), template()
    drivers = [StoredDriver(redis_store, run_of(plan, f"run-{i}"), live={"if": {"true"}}, guard=guard)
               for i in range(3)]
    for driver in drivers:
        await driver.run()
        assert driver.ran == ["if", "t", "join", "end"]
        states = await node_states(redis_store, driver.plan.run_id)
        assert states == {"if": "succeeded", "t": "succeeded", "f": "skipped", "join": "succeeded",
                          "end": "succeeded"}
        assert (await redis_store.get_run(driver.plan.run_id)).status == "succeeded"
        assert [e.node_id for e in await events_of(redis_store, driver.plan.run_id)
                if e.event_type == "skipped"] == ["f"]
        # no copy of the adjacency per run
        assert not await redis_store.redis.exists(redis_store.keys.adj(driver.plan.run_id))


async def test_a_worker_reads_the_runs_own_id_and_labels_with_the_shared_plan(redis_store: RedisRunStore) -> None:
    guard, plan = await guard_for(redis_store), template()
    first, second = run_of(plan, "run-a"), run_of(plan, "run-b")
    for run in (first, second):
        await StoredDriver(redis_store, run, guard=guard).start()
    worker = RedisRunStore(redis_store.redis, redis_store.settings)  # another process: holds no plan
    for run in (first, second):
        loaded = await worker.load_plan(run.run_id)
        assert (loaded.run_id, loaded.labels, loaded.order) == (run.run_id, run.labels, run.order)
        assert loaded.to_json() == run.to_json()


async def test_the_shared_data_outlives_every_run_naming_it(redis_store: RedisRunStore) -> None:
    guard, plan = await guard_for(redis_store), template()
    done, running = run_of(plan, "run-done"), run_of(plan, "run-open")
    await StoredDriver(redis_store, running, guard=guard).start()
    await StoredDriver(redis_store, done, live={"if": {"true"}}, guard=guard).run()  # its end: retention TTL
    for run in (done, running):
        shared = await shared_key_of(redis_store, run.run_id)
        assert await redis_store.redis.pttl(shared) >= await redis_store.redis.pttl(redis_store.keys.run(run.run_id))


async def test_shared_data_gone_from_redis_is_sent_again_by_the_starter(redis_store: RedisRunStore) -> None:
    guard, plan = await guard_for(redis_store), template()
    first = run_of(plan, "run-1")
    await StoredDriver(redis_store, first, guard=guard).start()
    shared = await shared_key_of(redis_store, first.run_id)
    again = run_of(plan, "run-1")  # the same run id: the same bucket, the same shared key
    await redis_store.redis.delete(shared, *redis_store.all_run_keys(first.run_id))  # all expired
    driver = StoredDriver(redis_store, again, live={"if": {"true"}}, guard=guard)
    await driver.run()
    assert driver.ran == ["if", "t", "join", "end"]
    t_out = json.loads((await redis_store.redis.hget(shared, "t")).split("\n")[0])["out"]
    assert [edge[1:] for edge in t_out] == [["join", "out", "in", 2]]  # join's two flow in-edges


async def test_a_cancelled_run_of_a_shared_plan_ends_every_open_node_in_plan_order(
        redis_store: RedisRunStore) -> None:
    guard, plan = await guard_for(redis_store), template()
    driver = StoredDriver(redis_store, run_of(plan, "run-c"), live={"if": {"true"}}, guard=guard)
    await driver.start()
    await driver.step("if")  # "t" ready, "f" skipped; "join" and "end" never written: pending
    assert await redis_store.finish_run(driver.plan.run_id, "cancelled")
    states = await node_states(redis_store, driver.plan.run_id)
    assert states == {"if": "succeeded", "t": "not_run", "f": "skipped", "join": "not_run", "end": "not_run"}
    events = await events_of(redis_store, driver.plan.run_id)
    assert [e.node_id for e in events if e.event_type == "not_run"] == ["t", "join", "end"]


async def test_a_run_on_plan_data_an_older_release_wrote_runs_to_the_same_end(redis_store: RedisRunStore) -> None:
    """Plan data of format 2 (out edges without their target's initial count, no claim data
    in the adjacency field: the ``:pending:`` fields hold the counts) still counts down right:
    a run of such data (a rolling upgrade's) ends as a run of today's does."""
    guard, plan = await guard_for(redis_store), template()
    first = StoredDriver(redis_store, run_of(plan, "run-new"), live={"if": {"true"}}, guard=guard)
    await first.run()
    key = await shared_key_of(redis_store, "run-new")
    for node in plan.order:
        countdown, claim = (await redis_store.redis.hget(key, node)).split("\n")  # today's format
        adj = json.loads(countdown)
        assert all(len(edge) == 5 for edge in adj["out"]) and "read" in json.loads(claim)
        adj["out"] = [edge[:4] for edge in adj["out"]]
        await redis_store.redis.hset(key, node, json.dumps(adj))
        if plan.nodes[node].pending:  # format 2 kept the counts in fields of their own
            await redis_store.redis.hset(key, f":pending:{node}", plan.nodes[node].pending)
    older = StoredDriver(redis_store, run_of(plan, "run-old"), live={"if": {"true"}}, guard=guard)
    await older.run()
    assert older.ran == ["if", "t", "join", "end"]
    assert await node_states(redis_store, "run-old") == await node_states(redis_store, "run-new")
    assert (await redis_store.get_run("run-old")).status == "succeeded"
