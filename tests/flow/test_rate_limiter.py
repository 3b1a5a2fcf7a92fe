"""The Redis rate limiter (GCRA with reservations, adaptive after 429s), on a real redis-server."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from orchestrator.kernel.limits import LimitRequest
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.store.keys import Keys
from orchestrator.store.limits import RateLimiter


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as s:
        yield s


@pytest.fixture
async def limiter(server: EmbeddedRedis) -> AsyncIterator[RateLimiter]:
    redis = Redis.from_url(server.url, max_connections=256)
    await redis.flushdb()
    yield RateLimiter(redis, Keys(prefix="t"))
    await redis.aclose()


async def test_a_quota_is_spaced_and_refusals_get_distinct_reserved_slots(limiter: RateLimiter) -> None:
    ten_per_s = LimitRequest("k", rate=10, per_s=1)
    waits = [(await limiter.take([ten_per_s], holder=f"h{i}")).wait_s for i in range(5)]
    assert waits[0] == 0
    # each later holder is refused with its own slot, 0.1 s apart: no herd wakes at once
    assert all(0.05 < b - a < 0.15 for a, b in itertools.pairwise(waits))
    await asyncio.sleep(waits[2] + 0.02)
    again = await limiter.take([ten_per_s], holder="h2")
    assert again.wait_s == 0  # the reservation is taken, no new slot charged
    newcomer = await limiter.take([ten_per_s], holder="late")
    assert newcomer.wait_s > waits[4] - waits[2] - 0.05  # queued behind every reservation


async def test_a_refusal_on_one_key_is_reported_with_that_key(limiter: RateLimiter) -> None:
    wide = LimitRequest("wide", rate=1000, per_s=1)
    narrow = LimitRequest("narrow", rate=1, per_s=10)
    assert (await limiter.take([wide, narrow], holder="a")).wait_s == 0
    second = await limiter.take([wide, narrow], holder="b")
    assert second.key == "narrow" and 9 < second.wait_s <= 10


async def test_tokens_charged_as_estimate_are_corrected_with_real_usage(limiter: RateLimiter) -> None:
    tokens = LimitRequest("tpm", rate=600, per_s=60, cost=100)  # 10 tokens/s, 100 per call
    assert (await limiter.take([tokens], holder="a")).wait_s == 0
    await limiter.adjust(tokens, -90)  # it used 10, not 100
    small = LimitRequest("tpm", rate=600, per_s=60, cost=10)
    got = await limiter.take([small], holder="b")
    assert got.wait_s < 2.5  # without the correction: ~10 s


async def test_a_429_blocks_everyone_until_retry_after_and_a_key_learns_a_rate(limiter: RateLimiter) -> None:
    unknown = LimitRequest("provider", learn=True, per_s=60)
    for i in range(30):  # no declared rate: unlimited until a 429
        assert (await limiter.take([unknown], holder=f"h{i}")).wait_s == 0
    await limiter.penalize(unknown, retry_after_s=2)
    blocked = await limiter.take([unknown], holder="x")
    assert 1.5 < blocked.wait_s <= 2.0
    assert blocked.rates[0] == pytest.approx(27, rel=0.05)  # 90% of the 30 granted in the last minute
    after = await limiter.take([unknown], holder="y")
    assert after.wait_s >= blocked.wait_s + 60 / 27 - 0.3  # spaced at the learned rate


async def test_many_concurrent_acquires_never_grant_more_than_the_quota(limiter: RateLimiter) -> None:
    quota = LimitRequest("burst", rate=20, per_s=1)
    start = time.monotonic()
    results = await asyncio.gather(*(limiter.take([quota], holder=f"c{i}") for i in range(200)))
    elapsed = time.monotonic() - start
    assert elapsed < 5
    granted = [r for r in results if r.wait_s == 0]
    assert 1 <= len(granted) <= 1 + elapsed * 20 + 1  # slots fall due while the calls go on
    # every one of the 200 got its own slot, 50 ms apart: the last is ~10 s out
    assert 199 / 20 - elapsed - 0.1 <= max(r.wait_s for r in results) <= 199 / 20 + 0.1


async def test_an_execution_that_runs_again_under_the_same_holder_is_counted_once(limiter: RateLimiter) -> None:
    one_a_minute = LimitRequest("once", rate=1, per_s=60)
    assert (await limiter.take([one_a_minute], holder="run:node:1", once=True)).wait_s == 0
    # its worker died; the node runs again (same attempt, same holder): no second charge
    assert (await limiter.take([one_a_minute], holder="run:node:1", once=True)).wait_s == 0
    other = await limiter.take([one_a_minute], holder="run:other:1", once=True)
    assert 58 < other.wait_s <= 60  # and the unit it used is not given back either


async def test_each_request_of_a_provider_is_a_new_charge_even_under_the_same_holder(limiter: RateLimiter) -> None:
    one_a_minute = LimitRequest("calls", rate=1, per_s=60)
    assert (await limiter.take([one_a_minute], holder="run:node:1:1")).wait_s == 0
    # the request got a 429 and the node runs again: its new call is a new charge
    assert (await limiter.take([one_a_minute], holder="run:node:1:1")).wait_s > 58


async def test_holders_that_come_back_late_together_go_out_at_the_rate_not_in_a_burst(limiter: RateLimiter) -> None:
    ten_per_s = LimitRequest("late", rate=10, per_s=1)
    for i in range(20):  # 20 reservations, 0.1 s apart
        await limiter.take([ten_per_s], holder=f"h{i}")
    await asyncio.sleep(2.2)  # every holder is late now; they all come back at once
    results = [await limiter.take([ten_per_s], holder=f"h{i}") for i in range(20)]
    granted = [r for r in results if r.wait_s == 0]
    assert 8 <= len(granted) <= 13  # about one second's worth goes out now ...
    assert all(0 < r.wait_s <= 1.1 for r in results if r.wait_s)  # ... the rest shortly after


async def test_a_late_holder_spaced_out_is_promised_its_slot_and_refused_only_once(limiter: RateLimiter) -> None:
    ten_per_s = LimitRequest("promise", rate=10, per_s=1)
    for i in range(30):  # 30 reservations, 0.1 s apart
        await limiter.take([ten_per_s], holder=f"h{i}")
    await asyncio.sleep(3.2)  # every holder is late now; they all come back at once
    first = {f"h{i}": (await limiter.take([ten_per_s], holder=f"h{i}")).wait_s for i in range(30)}
    spaced = {h: w for h, w in first.items() if w > 0}
    assert len(spaced) >= 15
    waits = sorted(spaced.values())
    assert all(b - a > 0.05 for a, b in itertools.pairwise(waits)), "each its own slot, 0.1 s apart"
    started = time.monotonic()
    for holder, wait_s in sorted(spaced.items(), key=lambda hw: hw[1]):  # each comes back when told
        await asyncio.sleep(max(0.0, wait_s - (time.monotonic() - started)))
        assert (await limiter.take([ten_per_s], holder=holder)).wait_s == 0, f"{holder} refused again"


async def test_a_probe_that_would_be_granted_takes_nothing_and_a_refused_one_reserves(limiter: RateLimiter) -> None:
    one_per_min = LimitRequest("probe", rate=1, per_s=60)
    assert (await limiter.take([one_per_min], holder="a", probe=True)).wait_s == 0
    assert (await limiter.take([one_per_min], holder="b", probe=True)).wait_s == 0  # a's probe took nothing
    assert (await limiter.take([one_per_min], holder="a")).wait_s == 0  # the real acquire takes it
    refused = await limiter.take([one_per_min], holder="b", probe=True)
    assert 55 < refused.wait_s <= 60
    later = await limiter.take([one_per_min], holder="c", probe=True)
    assert later.wait_s > refused.wait_s + 55, "b's refused probe holds the next slot"
