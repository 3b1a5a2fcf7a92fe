"""The workspace ceiling of nodes in flight (units with leases in Redis), on a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.settings import Settings
from orchestrator.store.ceiling import WorkspaceCeiling, ceilings
from orchestrator.store.keys import Keys

LEASE_S = 0.3


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as s:
        yield s


@pytest.fixture
async def redis(server: EmbeddedRedis) -> AsyncIterator[Redis]:
    client = Redis.from_url(server.url)
    await client.flushdb()
    yield client
    await client.aclose()


def ceiling_of(redis: Redis, default: int = 2, **per: int) -> WorkspaceCeiling:
    return WorkspaceCeiling(redis, Keys("t"), default=default, per_workspace=per, lease_s=LEASE_S)


async def test_a_workspace_runs_at_most_its_ceiling_and_a_leave_frees_a_unit_at_once(redis: Redis) -> None:
    ceiling = ceiling_of(redis)
    assert (await ceiling.enter("a", "r:n1:1")).wait_s == 0
    assert (await ceiling.enter("a", "r:n2:1")).wait_s == 0
    refused = await ceiling.enter("a", "r:n3:1")
    assert refused.wait_s > 0 and refused.key == "workspace:a:in_flight"
    assert (await ceiling.enter("b", "q:n1:1")).wait_s == 0, "another workspace has its own units"
    await ceiling.leave("a", "r:n1:1")
    assert (await ceiling.enter("a", "r:n3:1")).wait_s == 0


async def test_the_same_execution_entering_again_takes_its_own_unit_not_a_second(redis: Redis) -> None:
    ceiling = ceiling_of(redis, default=1)
    assert (await ceiling.enter("a", "r:n1:1")).wait_s == 0
    assert (await ceiling.enter("a", "r:n1:1")).wait_s == 0  # redelivered after its worker died
    assert (await ceiling.enter("a", "r:n2:1")).wait_s > 0


async def test_units_of_a_process_that_died_come_back_when_their_leases_lapse(redis: Redis) -> None:
    dead, alive = ceiling_of(redis), ceiling_of(redis)
    assert (await dead.enter("a", "r:n1:1")).wait_s == 0
    assert (await dead.enter("a", "r:n2:1")).wait_s == 0
    dead.leases._task.cancel()  # type: ignore[union-attr]  # its process is gone: no renewal
    assert (await alive.enter("a", "r:n3:1")).wait_s > 0
    await asyncio.sleep(LEASE_S + 0.1)
    assert (await alive.enter("a", "r:n3:1")).wait_s == 0
    assert (await alive.enter("a", "r:n4:1")).wait_s == 0


async def test_units_held_longer_than_a_lease_are_renewed_and_kept(redis: Redis) -> None:
    ceiling, other = ceiling_of(redis, default=1), ceiling_of(redis, default=1)
    assert (await ceiling.enter("a", "r:long:1")).wait_s == 0
    await asyncio.sleep(LEASE_S * 3)  # renewed every lease / 3
    assert (await other.enter("a", "r:n2:1")).wait_s > 0
    await ceiling.leave("a", "r:long:1")
    assert (await other.enter("a", "r:n2:1")).wait_s == 0


async def test_a_workspace_s_own_ceiling_overrides_the_default_and_zero_means_none(redis: Redis) -> None:
    ceiling = ceiling_of(redis, default=1, big=3, free=0)
    assert [(await ceiling.enter("big", f"r:n{i}:1")).wait_s == 0 for i in range(4)] == [True] * 3 + [False]
    assert all([(await ceiling.enter("free", f"r:n{i}:1")).wait_s == 0 for i in range(10)])


def test_malformed_workspace_limits_are_refused_naming_the_setting_and_entry() -> None:
    assert ceilings(Settings(workspace_max_in_flight=5, workspace_limits='{"acme": {"max_in_flight": 9}}')) \
        == (5, {"acme": 9})
    with pytest.raises(ValueError, match=r"ORCH_WORKSPACE_LIMITS\['acme'\].max_in_flight"):
        ceilings(Settings(workspace_limits='{"acme": {"max_in_flight": -1}}'))
    with pytest.raises(ValueError, match="not JSON"):
        ceilings(Settings(workspace_limits="{acme"))
    assert WorkspaceCeiling.build(None, Keys("t"), Settings()) is None  # type: ignore[arg-type]  # off: no cost
