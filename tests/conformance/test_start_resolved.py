"""A start node resolved at its run's start (kernel/start.py, ``RunStore.create_run``'s
``started``): on every store (memory, one Redis, the cluster) the start node is completed
with the run, its successors are what the start sends, and the rest of the run goes on
as if a worker had run it; a type, a node or a budget that does not allow it takes the
step as before."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.kernel.environment import StepEnvironment, StepOptions
from orchestrator.kernel.protocol import DataValue, EventType
from orchestrator.kernel.start import Starting
from orchestrator.kernel.step import run_step
from orchestrator.kernel.store import ClaimRequest, RunStore
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.store.creation import START_COUNTED_FROM
from orchestrator.store.redis_store import RedisRunStore
from tests.conformance.conftest import settings_for
from tests.fake_nodes import graph, make_registry
from tests.support import started_event

REGISTRY = make_registry()
STARTING = Starting(REGISTRY, "starter:1", StepOptions())
CHAIN = graph([("t", "entry", "Start"), ("r", "relay", "Relay"), ("r2", "relay", "Relay 2")],
              [("t", "out", "r", "in"), ("r", "out", "r2", "in")])


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[str]]] = []

    def __call__(self, run_id: str, node_ids: list[str]) -> None:
        self.sent.append((run_id, node_ids))


async def start(store: RunStore, g: dict[str, Any], run_input: Any = None, **kw: Any) -> tuple[str, Recorder]:
    sent = Recorder()
    run_id = await start_run(store, REGISTRY, g, RunRequest(run_input, starting=STARTING, **kw), dispatch=sent)
    return run_id, sent


async def kinds(store: RunStore, run_id: str) -> list[tuple[str, str]]:
    return [(ev.event_type, ev.node_id) for _, ev in await store.read_events(run_id)]


async def test_the_start_node_is_completed_with_the_run_and_its_successor_is_sent(store: RunStore) -> None:
    run_id, sent = await start(store, CHAIN, {"n": 1})
    assert sent.sent == [(run_id, ["r"])]
    assert await store.node_states(run_id) == {"t": "succeeded", "r": "pending", "r2": "pending"}
    assert (await store.read_outputs(run_id, ["t"]))["t"]["out"].value == {"n": 1}
    events = [ev for _, ev in await store.read_events(run_id)]
    assert [(e.event_type, e.node_id) for e in events] == [
        (EventType.RUN_STARTED, ""), (EventType.STARTED, "t"), (EventType.COMPLETED, "t")]
    done = events[2]
    assert done.data is not None and done.data["worker_id"] == "starter:1"
    assert done.data["outputs"] == {"out": {"type": "data", "value": {"n": 1}}}
    assert done.data["parameters"] == {"value": None, "defer": False, "silent": False}
    assert events[1].data == {"worker_id": "starter:1"}
    # The rest runs as after a worker's completion: the successor reads the start's output.
    env = StepEnvironment(store=store, registry=REGISTRY, worker_id="w1")
    first = await run_step(env, run_id, "r")
    assert first.ready == ["r2"]
    await run_step(env, run_id, "r2")
    record = await store.get_run(run_id)
    assert record.status == "succeeded"
    assert (await store.read_outputs(run_id, ["r2"]))["r2"]["out"].value == {"n": 1}


async def test_a_run_of_the_start_node_alone_ends_at_its_start(store: RunStore) -> None:
    alone = graph([("t", "entry", "Start", {"value": {"k": "v"}})], [])
    run_id, sent = await start(store, alone)
    assert sent.sent == []
    assert (await store.get_run(run_id)).status == "succeeded"
    assert await kinds(store, run_id) == [(EventType.RUN_STARTED, ""), (EventType.STARTED, "t"),
                                          (EventType.COMPLETED, "t"), (EventType.RUN_COMPLETED, "")]
    assert (await store.read_outputs(run_id, ["t"]))["t"]["out"].value == {"k": "v"}
    if isinstance(store, RedisRunStore):  # ended: not active, kept for the retention
        keys = store.keys
        assert await store.redis.zscore(keys.active_runs(keys.bucket(run_id)), run_id) is None
        assert await store.redis.ttl(keys.run(run_id)) > store.settings.active_ttl_s


async def test_a_start_node_with_no_output_skips_what_follows_and_the_run_ends_at_its_start(
        store: RunStore) -> None:
    silent = graph([("t", "entry", "Start", {"silent": True}), ("r", "relay", "Relay"), ("r2", "relay", "Relay 2")],
                   [("t", "out", "r", "in"), ("r", "out", "r2", "in")])
    run_id, sent = await start(store, silent)
    assert sent.sent == []
    assert await store.node_states(run_id) == {"t": "succeeded", "r": "skipped", "r2": "skipped"}
    assert await kinds(store, run_id) == [
        (EventType.RUN_STARTED, ""), (EventType.STARTED, "t"), (EventType.COMPLETED, "t"),
        (EventType.SKIPPED, "r"), (EventType.SKIPPED, "r2"), (EventType.RUN_COMPLETED, "")]
    assert (await store.get_run(run_id)).status == "succeeded"


async def test_a_successor_fed_twice_by_the_start_node_counts_both_arrivals(store: RunStore) -> None:
    """The start node's effect on the run is the countdown a worker's completion makes: a
    join whose two ports the trigger feeds is ready once, with both values."""
    g = graph([("t", "entry", "Start"), ("j", "join", "Join"), ("r", "relay", "Relay")],
              [("t", "out", "j", "left"), ("t", "out", "j", "right"), ("j", "out", "r", "in")])
    run_id, sent = await start(store, g, {"k": 1})
    assert sent.sent == [(run_id, ["j"])]
    env = StepEnvironment(store=store, registry=REGISTRY, worker_id="w1")
    assert (await run_step(env, run_id, "j")).ready == ["r"]
    assert (await store.read_outputs(run_id, ["j"]))["j"]["out"].value == {"left": {"k": 1}, "right": {"k": 1}}
    await run_step(env, run_id, "r")
    assert (await store.get_run(run_id)).status == "succeeded"


@pytest.mark.parametrize("node", [("t", "entry", "Start", {"defer": True}), ("t", "emit", "Start"),
                                  ("t", "entry", "Start", {"value": "{{ $run.input }}"})],
                         ids=["declines", "no-at-start", "expression"])
async def test_a_start_node_not_resolved_at_start_takes_its_step(store: RunStore, node: Any) -> None:
    g = graph([node, ("r", "relay", "Relay")], [("t", "out", "r", "in")])
    run_id, sent = await start(store, g, {"n": 2})
    assert sent.sent == [(run_id, ["t"])]
    assert await store.node_states(run_id) == {"t": "pending", "r": "pending"}
    assert await kinds(store, run_id) == [(EventType.RUN_STARTED, "")]
    env = StepEnvironment(store=store, registry=REGISTRY, worker_id="w1")
    assert (await run_step(env, run_id, "t")).ready == ["r"]


async def test_a_disabled_start_node_or_a_rerun_takes_its_step(store: RunStore) -> None:
    disabled = graph([("t", "entry", "Start"), ("r", "relay", "Relay")], [("t", "out", "r", "in")])
    disabled["nodes"][0]["settings"] = {"disabled": True}
    run_id, sent = await start(store, disabled, {"n": 3})
    assert sent.sent == [(run_id, ["t"])]
    run_id, sent = await start(store, CHAIN, {"n": 3}, start=["r"], seed_outputs={"t": {"out": DataValue("data", 1)}})
    assert sent.sent == [(run_id, ["r"])] and (await store.node_states(run_id))["r"] == "pending"


async def test_starting_the_run_again_changes_nothing(store: RunStore) -> None:
    run_id, _ = await start(store, CHAIN, {"n": 4}, run_id="again")
    before = await kinds(store, run_id)
    again, sent = await start(store, CHAIN, {"n": 4}, run_id="again")
    assert again == run_id and await kinds(store, run_id) == before
    assert sent.sent == [(run_id, ["t"])]  # harmless: its claim finds it done
    claim = await store.claim_node(run_id, ClaimRequest("t", lease_s=5, started=started_event(run_id, "t")),
                                   worker_id="w")
    assert claim.kind == "done"
    assert await store.node_states(run_id) == {"t": "succeeded", "r": "pending", "r2": "pending"}


async def test_the_successors_it_sends_are_marked_sent_for_the_sweeper(redis_store: RedisRunStore) -> None:
    run_id, sent = await start(redis_store, CHAIN, {"n": 5})
    assert sent.sent == [(run_id, ["r"])]
    keys = redis_store.keys
    assert await redis_store.redis.hget(keys.sent(run_id), "r") is not None  # sent again if its message is lost
    assert await redis_store.redis.hget(keys.sent(run_id), "t") is None
    assert await redis_store.redis.smembers(keys.ready(run_id)) == {"r"}


@pytest.mark.parametrize("kind", ["redis", "cluster"])
async def test_a_start_completion_counts_toward_the_run_budget_as_a_workers_would(
        request: pytest.FixtureRequest, kind: str) -> None:
    """From START_COUNTED_FROM bytes on it is counted in the create script; past the run's
    budget it is not applied, and the step fails it naming the budget. A small one is
    stored without a check, as a small run input is."""
    url, settings = settings_for(request, kind)
    store = RedisRunStore.from_url(url, settings.model_copy(update={"run_max_bytes": 16_000}))
    await store.redis.flushdb()

    async def counted(run_id: str) -> int:
        return int(await store.redis.hget(store.keys.run(run_id), "bytes") or 0)

    try:
        run_id, sent = await start(store, CHAIN, {"text": "x" * 20_000})
        assert sent.sent == [(run_id, ["t"])]  # its step fails it naming the budget
        assert await store.node_states(run_id) == {"t": "pending", "r": "pending", "r2": "pending"}
        assert await counted(run_id) == 0
        env = StepEnvironment(store=store, registry=REGISTRY, worker_id="w1")
        await run_step(env, run_id, "t")
        record = await store.get_run(run_id)
        assert record.status == "failed" and "ORCH_RUN_MAX_BYTES" in str(record.error)
        medium, sent = await start(store, CHAIN, {"text": "x" * (START_COUNTED_FROM + 100)})
        assert sent.sent == [(medium, ["r"])] and await counted(medium) > START_COUNTED_FROM
        small, sent = await start(store, CHAIN, {"text": "x"})
        assert sent.sent == [(small, ["r"])] and await counted(small) == 0
    finally:
        await store.close()


async def test_every_key_a_start_writes_has_the_runs_ttl(redis_store: RedisRunStore) -> None:
    """Active (its successor sent) or ended at its start, each key the create script wrote
    has a TTL: the active one, or the retention once the run ended."""
    from tests.conformance.test_redis_keys import run_key_ttls

    settings = redis_store.settings
    for g, ended in ((CHAIN, False), (graph([("t", "entry", "Start")], []), True)):
        run_id, _ = await start(redis_store, g, {"n": 6})
        ttls = await run_key_ttls(redis_store, run_id)
        assert all(0 < t <= (settings.retention_s if ended else settings.active_ttl_s) for t in ttls.values()), ttls
        if ended:
            assert all(t > settings.active_ttl_s for t in ttls.values()), ttls
