"""Lanes assigned to workspaces (orchestrator/store/lanes.py), in a real redis-server and in
memory: workspaces that hashing would put on one lane are given lanes of their own."""

from __future__ import annotations

import asyncio
import random
import zlib
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from pydantic import ValidationError
from redis.asyncio import Redis

from orchestrator.kernel.memory import MemoryStore
from orchestrator.local.embedded_redis import EmbeddedRedis, free_port
from orchestrator.queue.lanes import lane_of, new_run_id, run_id_with_tag
from orchestrator.service import runs
from orchestrator.settings import Settings
from orchestrator.store.ceiling import weights
from orchestrator.store.keys import Keys
from orchestrator.store.lanes import (
    LaneAssigner,
    LaneTableShape,
    MemoryLaneAssigner,
    RedisLaneAssigner,
    WorkspaceLanes,
    hash_tag,
)
from tests.support import redis_server as start_redis

LANES = 8
# Eight workspaces hashing would put on one lane of 8 (crc32 mod 256 mod 8 all equal)
COLLIDING = [w for w in (f"ws-{i}" for i in range(400)) if hash_tag(w) % LANES == hash_tag("ws-3") % LANES][:LANES]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    s = start_redis()
    yield s
    s.stop()


@pytest.fixture
async def redis(server: EmbeddedRedis) -> AsyncIterator[Redis]:
    client = Redis.from_url(server.url, decode_responses=True)
    await client.flushdb()
    yield client
    await client.aclose()


Make = Callable[[float], LaneAssigner]


@pytest.fixture(params=["redis", "memory"])
def make(request: pytest.FixtureRequest, redis: Redis) -> Make:
    """An assigner of LANES lanes freeing a workspace idle for ``idle_s`` (memory: a real clock)."""
    if request.param == "redis":
        return lambda idle_s: RedisLaneAssigner(redis, Keys("t"), LaneTableShape(LANES, idle_s))
    return lambda idle_s: MemoryLaneAssigner(LaneTableShape(LANES, idle_s))


def test_the_workspaces_of_these_tests_would_share_one_lane_if_hashed() -> None:
    assert len(COLLIDING) == LANES
    assert len({lane_of(new_run_id(w), LANES) for w in COLLIDING}) == 1


async def test_eight_workspaces_hashing_puts_on_one_lane_are_given_eight_lanes(make: Make) -> None:
    lanes = WorkspaceLanes(make(3600))
    ids = [run_id_with_tag(await lanes.tag(w)) for w in COLLIDING]
    assert sorted(lane_of(i, LANES) for i in ids) == list(range(LANES))
    assert lane_of(ids[0], LANES) == hash_tag(COLLIDING[0]) % LANES, "a lone workspace keeps its hash lane"
    again = [lane_of(run_id_with_tag(await lanes.tag(w)), LANES) for w in COLLIDING]
    assert again == [lane_of(i, LANES) for i in ids], "a workspace keeps its lane while active"


async def test_beyond_as_many_workspaces_as_lanes_they_share_evenly(make: Make) -> None:
    assigner = make(3600)
    taken = [await assigner.assign(f"w{i}", 1) for i in range(3 * LANES)]
    per_lane = [sum(lanes == (lane,) for lanes in taken) for lane in range(LANES)]
    assert per_lane == [3] * LANES


async def test_a_workspace_of_weight_three_has_three_lanes_its_runs_take_in_turn(make: Make) -> None:
    lanes = WorkspaceLanes(make(3600), weights={"acme": 3, "huge": 50})
    acme = [lane_of(run_id_with_tag(await lanes.tag("acme")), LANES) for _ in range(6)]
    assert len(set(acme)) == 3 and acme[:3] == acme[3:], "three lanes, in turn"
    others = {lane_of(run_id_with_tag(await lanes.tag(w)), LANES) for w in COLLIDING[:5]}
    assert len(others) == 5 and not others & set(acme), "five workspaces on the five other lanes"
    assert len(await lanes.lanes_of("huge")) == LANES, "a weight beyond the lanes: every lane"


async def test_a_workspace_idle_for_lane_idle_s_frees_its_lane(make: Make) -> None:
    assigner = make(0.6)
    first = {w: await assigner.assign(w, 1) for w in COLLIDING}
    await asyncio.sleep(0.35)
    for w in COLLIDING[1:]:  # all but the first start runs again
        assert await assigner.assign(w, 1) == first[w]
    await asyncio.sleep(0.35)  # the first is now idle 0.7 s, the others 0.35 s
    newcomer = await assigner.assign("newcomer", 1)
    assert newcomer == first[COLLIDING[0]], "the idle workspace's lane went to the newcomer, shared by no one"
    assert COLLIDING[0] not in await assigner.table()


async def test_a_second_process_sees_the_same_assignment(server: EmbeddedRedis, redis: Redis) -> None:
    other = Redis.from_url(server.url, decode_responses=True)
    try:
        here = WorkspaceLanes(RedisLaneAssigner(redis, Keys("t"), LaneTableShape(LANES, 3600)))
        there = WorkspaceLanes(RedisLaneAssigner(other, Keys("t"), LaneTableShape(LANES, 3600)))
        mine = [await here.lanes_of(w) for w in COLLIDING]
        assert [await there.lanes_of(w) for w in reversed(COLLIDING)] == mine[::-1]
    finally:
        await other.aclose()


async def test_raising_orch_lanes_spreads_the_workspaces_that_shared_the_one_lane(redis: Redis) -> None:
    one = RedisLaneAssigner(redis, Keys("t"), LaneTableShape(1, 3600))
    assert [await one.assign(w, 1) for w in COLLIDING] == [(0,)] * LANES
    eight = RedisLaneAssigner(redis, Keys("t"), LaneTableShape(LANES, 3600))
    assert sorted([await eight.assign(w, 1) for w in COLLIDING]) == [(lane,) for lane in range(LANES)]


async def test_the_script_and_the_memory_table_choose_alike(redis: Redis) -> None:
    script = RedisLaneAssigner(redis, Keys("t"), LaneTableShape(LANES, 3600))
    memory = MemoryLaneAssigner(LaneTableShape(LANES, 3600))
    rng = random.Random(19)
    for _ in range(200):  # workspaces starting runs, some with weights that change
        workspace, weight = f"w{rng.randrange(30)}", rng.choice([1, 1, 1, 2, 3, 9])
        assert await script.assign(workspace, weight) == await memory.assign(workspace, weight)
    assert await script.table() == await memory.table()


async def test_a_redis_that_cannot_be_asked_gives_the_hash_lane_and_the_start_goes_on() -> None:
    down = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    try:
        lanes = WorkspaceLanes(RedisLaneAssigner(down, Keys("t"), LaneTableShape(LANES, 3600)))
        assert await lanes.tag("acme") == hash_tag("acme")
    finally:
        await down.aclose()


class Counting:
    """An assigner that counts its calls (each one a round trip for the Redis one)."""

    def __init__(self, inner: LaneAssigner) -> None:
        self.inner, self.calls = inner, 0

    async def assign(self, workspace: str, weight: int) -> tuple[int, ...]:
        self.calls += 1
        return await self.inner.assign(workspace, weight)

    async def table(self) -> dict[str, tuple[int, ...]]:
        return await self.inner.table()


async def test_only_a_workspace_s_first_start_in_a_process_waits_for_its_lanes(redis: Redis) -> None:
    clock = Clock()
    counting = Counting(RedisLaneAssigner(redis, Keys("t"), LaneTableShape(LANES, 3600)))
    lanes = WorkspaceLanes(counting, refresh_s=30, stale_s=600, clock=clock)
    first, *others = await asyncio.gather(*(lanes.tag("acme") for _ in range(20)))  # starts at once: one ask
    assert others == [first] * 19
    for _ in range(100):
        assert await lanes.tag("acme") == first
    assert counting.calls == 1
    clock.now += 31  # stale: served at once, asked again in the background (which touches it)
    assert await lanes.tag("acme") == first and counting.calls == 1
    await asyncio.sleep(0.1)
    assert counting.calls == 2
    clock.now += 700  # too old to serve: asked before the start
    assert await lanes.tag("acme") == first and counting.calls == 3


async def test_a_memory_store_assigns_lanes_too() -> None:
    store = MemoryStore()
    ids = [await runs.new_run_id(store, w) for w in COLLIDING]
    assert sorted(lane_of(i, LANES) for i in ids) == list(range(LANES))


def test_a_bad_weight_is_refused_at_start_naming_the_setting_and_the_workspace() -> None:
    assert weights(Settings(workspace_limits='{"acme": {"weight": 3}, "b": {"max_in_flight": 4}}')) == {"acme": 3}
    with pytest.raises(ValidationError, match=r"ORCH_WORKSPACE_LIMITS\['acme'\].weight must be a whole number >= 1"):
        Settings(workspace_limits='{"acme": {"weight": 0}}')
    with pytest.raises(ValidationError, match=r"ORCH_WORKSPACE_LIMITS\['acme'\].weight"):
        Settings(workspace_limits='{"acme": {"weight": "3"}}')
    with pytest.raises(ValidationError, match=r"ORCH_WORKSPACE_LIMITS\['acme'\] has unknown field\(s\) wieght"):
        Settings(workspace_limits='{"acme": {"wieght": 3}}')


def test_hash_tag_is_the_tag_of_the_hash_lanes() -> None:
    assert all(f"{hash_tag(w):02x}" == new_run_id(w)[:2] for w in COLLIDING)
    assert all(hash_tag(w) == zlib.crc32(w.encode()) & 0xFF for w in COLLIDING)
