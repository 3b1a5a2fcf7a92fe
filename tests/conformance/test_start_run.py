"""start_run: validate, compile, store, dispatch the start nodes, against real Redis."""

from __future__ import annotations

import pytest

from orchestrator.kernel.errors import GraphError
from orchestrator.kernel.protocol import DataValue
from orchestrator.kernel.store import ClaimRequest
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph, make_registry
from tests.support import started_event
from tests.support.redis_writes import round_trips

CHAIN = graph([("t", "emit", "Start"), ("r", "relay", "Relay")], [("t", "out", "r", "in")])


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[str]]] = []

    def __call__(self, run_id: str, node_ids: list[str]) -> None:
        self.sent.append((run_id, node_ids))


async def test_start_run_stores_the_run_and_dispatches_the_trigger(
    redis_store: RedisRunStore,
) -> None:
    sent = Recorder()
    run_id = await start_run(redis_store, make_registry(), CHAIN,
                             RunRequest({"n": 1}, session_id="s1", meta={"who": "test"}), dispatch=sent)
    assert sent.sent == [(run_id, ["t"])]
    assert len(run_id) == 32
    record = await redis_store.get_run(run_id)
    assert (record.status, record.graph_id, record.run_input) == ("running", "g", {"n": 1})
    assert (record.session_id, record.meta) == ("s1", {"who": "test"})
    assert await redis_store.node_states(run_id) == {"t": "pending", "r": "pending"}
    # the start node is dispatched: a redelivered claim of it has nothing left to send
    done = await redis_store.claim_node(run_id, ClaimRequest("t", lease_s=5, started=started_event(run_id, "t")),
                                        worker_id="w")
    assert done.kind == "run"


async def test_start_run_awaits_an_async_dispatch(redis_store: RedisRunStore) -> None:
    sent: list[list[str]] = []

    async def dispatch(run_id: str, node_ids: list[str]) -> None:
        sent.append(node_ids)

    await start_run(redis_store, make_registry(), CHAIN, RunRequest(None, run_id="fixed"), dispatch=dispatch)
    assert sent == [["t"]]
    assert (await redis_store.get_run("fixed")).status == "running"


async def test_several_triggers_and_no_choice_is_an_error_naming_them(
    redis_store: RedisRunStore,
) -> None:
    two = graph([("t1", "emit", "One"), ("t2", "emit", "Two"), ("r", "relay", "Relay")],
                [("t1", "out", "r", "in")])
    with pytest.raises(GraphError, match="t1") as info:
        await start_run(redis_store, make_registry(), two, RunRequest(None), dispatch=Recorder())
    assert "t2" in str(info.value) and "Two" in str(info.value)
    sent = Recorder()
    run_id = await start_run(redis_store, make_registry(), two, RunRequest(None, start=["t2"]), dispatch=sent)
    assert sent.sent == [(run_id, ["t2"])]


async def test_an_invalid_graph_stores_nothing(redis_store: RedisRunStore) -> None:
    bad = graph([("t", "emit", "Start"), ("r", "nosuchtype", "R")], [("t", "out", "r", "in")])
    sent = Recorder()
    with pytest.raises(GraphError):
        await start_run(redis_store, make_registry(), bad, RunRequest(None), dispatch=sent)
    assert sent.sent == []
    assert await redis_store.redis.dbsize() == 0


async def test_graph_deadline_setting_sets_the_sweeper_deadline(redis_store: RedisRunStore) -> None:
    timed = {**CHAIN, "settings": {"deadline_s": 5}}
    run_id = await start_run(redis_store, make_registry(), timed, RunRequest(None), dispatch=Recorder())
    record = await redis_store.get_run(run_id)
    score = await redis_store.redis.zscore(redis_store.keys.active_runs(redis_store.keys.bucket(run_id)), run_id)
    assert score == pytest.approx(record.created_at + 5, abs=0.01)


async def test_seeded_outputs_are_readable_before_any_node_runs(redis_store: RedisRunStore) -> None:
    seed = {"old": {"out": DataValue("data", {"k": 1})}}
    run_id = await start_run(redis_store, make_registry(), CHAIN, RunRequest(None, seed_outputs=seed),
                             dispatch=Recorder())
    outputs = await redis_store.read_outputs(run_id, ["old"])
    assert outputs["old"]["out"].value == {"k": 1}
    assert await redis_store.redis.ttl(redis_store.keys.outputs(run_id)) > 0


async def test_a_graph_of_thousands_of_nodes_is_created_whole(redis_store: RedisRunStore) -> None:
    # create.lua fills each hash with variadic commands in slices of 4,000 arguments: Lua's
    # unpack refuses more than ~8,000 at once, and 4,200 nodes are 8,400 field/value arguments.
    count = 4_200
    nodes = [("t", "emit", "Start"), *((f"r{i}", "relay", f"Relay {i}") for i in range(count - 1))]
    edges = [("t", "out", "r0", "in"), *((f"r{i}", "out", f"r{i + 1}", "in") for i in range(count - 2))]
    run_id = await start_run(redis_store, make_registry(), graph(nodes, edges), RunRequest(None),
                             dispatch=Recorder())
    states = await redis_store.node_states(run_id)
    assert len(states) == count and set(states.values()) == {"pending"}
    keys = redis_store.keys
    assert await redis_store.redis.hlen(keys.adj(run_id)) == count  # each node's adjacency (with its claim data)
    assert await redis_store.redis.hget(keys.pending(run_id), f"r{count - 2}") == "1"
    assert await redis_store.redis.smembers(keys.ready(run_id)) == {"t"}


class RefRecorder:
    """A dispatcher that takes the plan reference, as the Celery one does."""

    carries_plan = True

    def __init__(self) -> None:
        self.refs: dict[str, str] = {}

    def __call__(self, run_id: str, node_ids: list[str], plan: str = "") -> None:
        self.refs[run_id] = plan


async def test_runs_of_one_graph_share_its_compiled_plan_and_a_worker_reads_it_once(
    redis_store: RedisRunStore,
) -> None:
    registry, sent = make_registry(), RefRecorder()
    first = await start_run(redis_store, registry, CHAIN, RunRequest({"n": 1}), dispatch=sent)
    second = await start_run(redis_store, registry, CHAIN, RunRequest({"n": 2}), dispatch=sent)
    assert sent.refs[first] and sent.refs[first] == sent.refs[second]  # one content, one reference
    worker = RedisRunStore(redis_store.redis, redis_store.settings)  # another process: nothing cached
    assert (await worker.load_plan(first, sent.refs[first])).run_id == first
    calls: list[int] = []
    with round_trips(calls):
        plan = await worker.load_plan(second, sent.refs[second])
    assert calls == [] and plan.run_id == second  # no read: derived from the first run's plan
    assert plan.order == (await redis_store.load_plan(second)).order
    # the same graph with another parameter is other content: another reference, its own plan
    changed = graph([("t", "emit", "Start", {"value": "other"}), ("r", "relay", "Relay")], [("t", "out", "r", "in")])
    third = await start_run(redis_store, registry, changed, RunRequest(None), dispatch=sent)
    assert sent.refs[third] not in ("", sent.refs[first])
    assert (await worker.load_plan(third, sent.refs[third])).parsed.node_by_id["t"].data == {"value": "other"}


async def test_a_start_choice_of_a_known_graph_naming_no_node_is_refused_every_time(
    redis_store: RedisRunStore,
) -> None:
    registry = make_registry()
    await start_run(redis_store, registry, CHAIN, RunRequest(None), dispatch=Recorder())
    before = await redis_store.redis.dbsize()
    for _ in range(2):
        with pytest.raises(GraphError, match="'nope'"):
            await start_run(redis_store, registry, CHAIN, RunRequest(None, start=["nope"]), dispatch=Recorder())
    assert await redis_store.redis.dbsize() == before
    sent = Recorder()
    run_id = await start_run(redis_store, registry, CHAIN, RunRequest(None, start=["r"]), dispatch=sent)
    assert sent.sent == [(run_id, ["r"])]
