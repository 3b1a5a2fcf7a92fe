"""What only the Redis store promises: TTLs on every key, its event stream, its reads."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

import pytest

from orchestrator.kernel.errors import OrchestratorError, RunNotFoundError
from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.kernel.store import ClaimRequest
from orchestrator.store.keys import Keys
from orchestrator.store.redis_store import RedisRunStore
from tests.conformance.conftest import SETTINGS
from tests.support import Driver, completed, make_plan, record_for, started_event


async def run_key_ttls(store: RedisRunStore, run_id: str) -> dict[str, int]:
    keys = [k async for k in store.redis.scan_iter(match=store.keys.run(run_id) + "*")]
    assert keys, "the run wrote no keys"
    return {k: await store.redis.ttl(k) for k in keys}


async def deadline_of(store: RedisRunStore, run_id: str) -> float | None:
    """The run's score in its bucket's ``runs:active`` (None: not active)."""
    score = await store.redis.zscore(store.keys.active_runs(store.keys.bucket(run_id)), run_id)
    return None if score is None else float(score)


async def test_every_key_of_an_active_run_has_a_ttl(redis_store: RedisRunStore) -> None:
    plan = make_plan("abc", [("a", "out", "b", "in"), ("a", "out", "c", "in")])
    driver = Driver(redis_store, plan)
    await driver.start()
    await driver.step("a")
    await driver.step("b")  # "c" is still to run: the run stays active
    ttls = await run_key_ttls(redis_store, plan.run_id)
    assert all(ttl > 0 for ttl in ttls.values()), ttls
    fixed = {k: t for k, t in ttls.items() if ":lease:" not in k}
    assert all(t <= SETTINGS.active_ttl_s for t in fixed.values()), fixed
    assert await deadline_of(redis_store, plan.run_id) is not None


async def test_run_keys_get_the_retention_ttl_when_the_run_finishes(
    redis_store: RedisRunStore,
) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(redis_store, plan).run()
    ttls = await run_key_ttls(redis_store, plan.run_id)
    assert all(SETTINGS.active_ttl_s < t <= SETTINGS.retention_s for t in ttls.values()), ttls
    assert await deadline_of(redis_store, plan.run_id) is None


async def test_an_active_run_past_half_its_ttl_has_every_key_renewed_at_its_next_completion(
    redis_store: RedisRunStore,
) -> None:
    """The record's ``renew_at`` says when: a completion before it leaves the TTLs alone, the
    first one after it gives every key the full active TTL again and moves it on; a run
    whose record has no ``renew_at`` (an older release created it) is renewed by its TTL."""
    plan = make_plan("abcd", [("a", "out", "b", "in"), ("b", "out", "c", "in"), ("c", "out", "d", "in")])
    run_id, run_key = plan.run_id, redis_store.keys.run(plan.run_id)
    driver = Driver(redis_store, plan)
    await driver.start()
    due = float(str(await redis_store.redis.hget(run_key, "renew_at")))
    assert due > float(str(await redis_store.redis.hget(run_key, "created_at")))  # half the active TTL on
    keys = list(await run_key_ttls(redis_store, run_id))

    async def age(ttl_s: int) -> None:
        for key in keys:
            await redis_store.redis.expire(key, ttl_s)

    await age(400)  # under half the active TTL (1,000 s), but renew_at is not due
    await driver.step("a")
    assert all(t <= 400 for k, t in (await run_key_ttls(redis_store, run_id)).items() if ":lease:" not in k)
    await redis_store.redis.hset(run_key, "renew_at", "1")  # half the TTL passed
    await age(400)
    await driver.step("b")
    ttls = await run_key_ttls(redis_store, run_id)
    assert all(900 < t <= SETTINGS.active_ttl_s for k, t in ttls.items() if ":lease:" not in k), ttls
    assert float(str(await redis_store.redis.hget(run_key, "renew_at"))) > due - 1
    await redis_store.redis.hdel(run_key, "renew_at")  # a record without it: its TTL decides
    await age(400)
    await driver.step("c")
    ttls = await run_key_ttls(redis_store, run_id)
    assert all(900 < t <= SETTINGS.active_ttl_s for k, t in ttls.items() if ":lease:" not in k), ttls


async def test_cancelled_run_keys_get_the_retention_ttl(redis_store: RedisRunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(redis_store, plan).start()
    await redis_store.mark_dispatched(plan.run_id, ["a"])
    assert await redis_store.finish_run(plan.run_id, "cancelled")
    ttls = await run_key_ttls(redis_store, plan.run_id)
    assert all(SETTINGS.active_ttl_s < t <= SETTINGS.retention_s for t in ttls.values()), ttls


async def test_creating_a_run_twice_changes_nothing(redis_store: RedisRunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await redis_store.create_run(plan, record_for(plan))
    await redis_store.create_run(plan, record_for(plan))
    events = await redis_store.read_events(plan.run_id)
    assert [e.event_type for _, e in events] == ["run_started"]
    record = await redis_store.get_run(plan.run_id)
    assert (record.status, record.graph_id, record.run_input) == ("running", "g", {"x": 1})
    assert await redis_store.node_states(plan.run_id) == {"a": "pending", "b": "pending"}


async def test_plan_round_trips_through_redis(redis_store: RedisRunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await redis_store.create_run(plan, record_for(plan))
    fresh = RedisRunStore(redis_store.redis, redis_store.settings)  # another process: empty plan cache
    assert (await fresh.load_plan(plan.run_id)).to_json() == plan.to_json()


async def test_unknown_run_raises_run_not_found(redis_store: RedisRunStore) -> None:
    with pytest.raises(RunNotFoundError):
        await redis_store.get_run("nope")
    with pytest.raises(RunNotFoundError):
        await redis_store.load_plan("nope")
    assert not await redis_store.finish_run("nope", "cancelled")
    claim = await redis_store.claim_node("nope", ClaimRequest("a", lease_s=1, started=started_event("nope", "a")),
                                         worker_id="w")
    assert claim.kind == "closed"


async def test_claim_of_a_node_outside_the_plan_is_closed(redis_store: RedisRunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await redis_store.create_run(plan, record_for(plan))
    claim = await redis_store.claim_node(plan.run_id, ClaimRequest("zzz", lease_s=1,
                                                                   started=started_event(plan.run_id, "zzz")),
                                         worker_id="w")
    assert claim.kind == "closed"


async def test_read_events_resumes_after_a_given_id(redis_store: RedisRunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await Driver(redis_store, plan).run()
    everything = await redis_store.read_events(plan.run_id)
    middle = everything[2][0]
    tail = await redis_store.read_events(plan.run_id, after=middle)
    assert tail == everything[3:]
    assert await redis_store.read_events(plan.run_id, after=everything[-1][0], block_ms=10) == []


async def notify_messages(store: RedisRunStore, run_id: str, act: Any) -> list[str]:
    """The wake-up hints published on the run's notify channel while ``act()`` runs."""
    pubsub = store.redis.pubsub()
    # a cluster publishes on the channel's shard (SPUBLISH): a subscriber says SSUBSCRIBE
    sharded = store.keys.tagged
    channel = store.keys.notify(run_id)
    await (pubsub.ssubscribe(channel) if sharded else pubsub.subscribe(channel))
    await (pubsub.get_sharded_message(timeout=1) if sharded else pubsub.get_message(timeout=1))  # the confirmation
    await act()
    messages: list[str] = []
    for _ in range(20):
        if sharded:
            message = await pubsub.get_sharded_message(ignore_subscribe_messages=True, timeout=0.05)
        else:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.05)
        if message:
            messages.append(message["data"])
    await pubsub.aclose()
    return messages


async def test_each_append_publishes_its_stream_id_on_the_notify_channel(
    redis_store: RedisRunStore,
) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await redis_store.create_run(plan, record_for(plan))
    appended: list[str] = []

    async def act() -> None:
        appended.append(await redis_store.append_event(NodeEvent(
            run_id=plan.run_id, node_id="a", node_type="fake", event_type=EventType.PROGRESS)))

    assert await notify_messages(redis_store, plan.run_id, act) == appended


async def test_a_call_that_appends_several_events_publishes_one_hint_naming_the_last(
    redis_store: RedisRunStore,
) -> None:
    """A completion that ends the run appends the node's ``completed`` and ``run_completed``:
    one wake-up, with the id of the last; a subscriber reads everything after its own last
    id from the stream."""
    plan = make_plan("ab", [("a", "out", "b", "in")])
    driver = Driver(redis_store, plan)
    await driver.start()
    await driver.step("a")
    claim = await redis_store.claim_node(plan.run_id, ClaimRequest("b", lease_s=30,
                                                                    started=started_event(plan.run_id, "b")),
                                         worker_id="w1")
    before = (await redis_store.read_events(plan.run_id))[-1][0]

    async def act() -> None:
        await redis_store.complete_node(plan.run_id, "b", completed(plan.run_id, "b", {"out"}), token=claim.token)

    messages = await notify_messages(redis_store, plan.run_id, act)
    after = await redis_store.read_events(plan.run_id, after=before)
    assert [e.event_type for _, e in after] == [EventType.COMPLETED, EventType.RUN_COMPLETED]
    assert messages == [after[-1][0]]


async def test_blocking_read_wakes_up_on_a_new_event(redis_store: RedisRunStore) -> None:
    plan = make_plan("ab", [("a", "out", "b", "in")])
    await redis_store.create_run(plan, record_for(plan))
    last = (await redis_store.read_events(plan.run_id))[-1][0]
    reader = RedisRunStore.from_url(_url(redis_store), redis_store.settings)
    waiting = asyncio.create_task(reader.read_events(plan.run_id, after=last, block_ms=5000))
    await asyncio.sleep(0.05)
    await redis_store.complete_node(plan.run_id, "a", completed(plan.run_id, "a", ["out"]))
    got = await waiting
    await reader.close()
    assert [e.event_type for _, e in got][:1] == ["completed"]


def _url(store: RedisRunStore) -> str:
    if store.settings.redis_url and store.keys.tagged:
        return store.settings.redis_url
    kw = store.redis.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"


async def test_a_client_without_decoded_responses_is_refused(redis_store: RedisRunStore) -> None:
    from orchestrator.store.redis_client import client

    raw = client(_url(redis_store))
    with pytest.raises(OrchestratorError, match="decode_responses"):
        RedisRunStore(raw, redis_store.settings)
    await raw.aclose()


async def test_on_a_cluster_every_key_of_a_run_is_in_one_slot_and_runs_spread_over_every_primary(
        redis_store: RedisRunStore) -> None:
    if not redis_store.keys.tagged:
        pytest.skip("one Redis: no slots")
    from redis.asyncio import RedisCluster

    cluster: RedisCluster = redis_store.redis  # type: ignore[assignment]
    primaries: dict[str, int] = {}
    for i in range(60):
        plan = make_plan("ab", [("a", "out", "b", "in")], run_id=f"spread-{i}")
        await Driver(redis_store, plan).start()
        slots = {cluster.keyslot(k) for k in redis_store.keys.run_keys(plan.run_id)}
        slots.add(cluster.keyslot(redis_store.keys.active_runs(redis_store.keys.bucket(plan.run_id))))
        assert len(slots) == 1, slots
        node = cluster.get_node_from_key(redis_store.keys.run(plan.run_id))
        primaries[node.name] = primaries.get(node.name, 0) + 1
    assert len(primaries) == 3 and min(primaries.values()) >= 10, primaries


async def test_the_metrics_count_every_active_run_whatever_its_bucket(redis_store: RedisRunStore) -> None:
    from orchestrator.api.health import refresh_from_redis
    from orchestrator.telemetry import metrics

    plans = [make_plan("ab", [("a", "out", "b", "in")]) for _ in range(12)]
    for plan in plans:
        await Driver(redis_store, plan).start()
    await Driver(redis_store, plans[0]).step("a")
    await Driver(redis_store, plans[0]).step("b")  # one run ended
    if redis_store.keys.tagged:
        assert len({redis_store.keys.bucket(p.run_id) for p in plans}) > 3, "the runs are in several buckets"
    await refresh_from_redis(redis_store.redis, redis_store.keys, [])
    assert metrics.REGISTRY.get_sample_value("orchestrator_runs", {"status": "active"}) == 11


async def test_a_start_no_replica_confirms_fails_naming_the_setting_and_dispatches_nothing(
        redis_store: RedisRunStore) -> None:
    from orchestrator.errors import StoreNotReplicatedError
    from orchestrator.service.runs import RunRequest, start_run
    from tests.fake_nodes import graph, make_registry

    settings = redis_store.settings.model_copy(update={"redis_wait_replicas": 1, "redis_wait_timeout_ms": 50})
    store = RedisRunStore(redis_store.redis, settings)  # this Redis (and this cluster) has no replicas
    sent: list[Any] = []
    g = graph([("t", "emit", "Start"), ("r", "relay", "Relay")], [("t", "out", "r", "in")])
    with pytest.raises(StoreNotReplicatedError, match="ORCH_REDIS_WAIT_REPLICAS") as refused:
        await start_run(store, make_registry(), g, RunRequest(None), dispatch=lambda r, n: sent.append((r, n)))
    assert "0 of the 1 replicas" in str(refused.value)
    assert sent == []


async def test_workspaces_lanes_live_on_the_control_tag_with_a_ttl_and_show_in_the_metrics(
        redis_store: RedisRunStore) -> None:
    from orchestrator.api.health import refresh_from_redis
    from orchestrator.store.lanes import LaneTableShape, RedisLaneAssigner
    from orchestrator.telemetry import metrics

    assigner = RedisLaneAssigner(redis_store.redis, redis_store.keys, LaneTableShape(4, 60))
    taken = [await assigner.assign(f"ws-{i}", 2 if i == 0 else 1) for i in range(3)]
    assert len({lane for lanes in taken for lane in lanes}) == 4, "no two workspaces share a lane of 4"
    for key in (redis_store.keys.lanes(), redis_store.keys.lanes_seen()):
        assert 0 < await redis_store.redis.ttl(key) <= 120
    await refresh_from_redis(redis_store.redis, redis_store.keys, [])
    for i, lanes in enumerate(taken):
        for lane in lanes:
            assert metrics.REGISTRY.get_sample_value(
                "orchestrator_workspace_lane", {"workspace": f"ws-{i}", "lane": str(lane)}) == 1


@pytest.mark.parametrize("cluster", [False, True])
def test_a_completions_lease_keys_are_the_key_layouts_lease_keys(cluster: bool) -> None:
    store = RedisRunStore.__new__(RedisRunStore)  # its key helpers only: no connection
    store.keys = Keys("orc", 4, True) if cluster else Keys("orc")
    store._keys_of = OrderedDict()
    for run_id, node_id in (("r1", "n1"), ("a" * 32, "node:with:colons")):
        assert store._lease(run_id, node_id) == store.keys.lease(run_id, node_id)
