"""Cluster-wide rate limits in Redis: one script call per acquire (``lua/limit.lua``).

Algorithm: GCRA (the generic cell rate algorithm: one "theoretical arrival time" per key,
O(1) memory, one HMGET/HSET per key), with two additions:

* **Reservations.** A refused acquire takes the next free slot for its holder (a node
  execution key) and answers when it is; the holder comes back then (rescheduled, its slot
  free meanwhile) and its acquire takes the reservation. So a thousand nodes waiting on one
  key wake one slot apart rather than all at once (no herd re-asking every window).
  Reservations never taken (the run ended) are dropped after 10 minutes.
* **Spaced grants.** What actually goes out is spaced by a second GCRA ("gtat"): holders
  that come back late together (a loaded worker) are granted at most 1 s ahead of the rate
  and the rest told to wait the difference, keeping their reservations; without it, late
  holders bunched in the provider's window (measured: 143-737 429s of 1,000 calls, then 0).
  A holder spaced out is *promised* its grant slot (``:p``; the spacing moves past it), so it
  goes out when it comes back instead of being spaced again with the rest of its late burst
  (measured: 9,147 ``throttled`` events for 1,000 nodes without the promise).
* **Adaptive limits.** A provider's 429 (:meth:`RateLimiter.penalize`) blocks the key for
  everyone until its ``Retry-After`` and cuts its rate, once per cool-down (the larger of
  1 s and the ``Retry-After``), not once per 429 of the same burst: a key with no declared
  rate learns one (90% of what was granted in the last 60 s), then each cut is 20% and each
  grant adds 0.05% back (it probes upwards slowly); a declared rate is cut 20% at a time
  but never below half of it, and each grant adds back 0.2% of it (the quota again within
  ~250 grants). Additive increase, multiplicative decrease.

Why GCRA rather than a sliding-window log: measured in ``bench/flow_control.py`` (the
``limiter`` section), one sequential acquire through this class costs 250-370 us on this
loaded 2-core machine against 140-165 us for a minimal sliding-window-log script (ours also
keeps reservations, the grant ring for learning and the metrics), but the log keeps one
entry per unit in the window (5,200 units: 560-600 KB; a 100k tokens-per-minute key would
hold 100k members, and a token charge would be one member per token) while GCRA keeps one
number (~120 bytes); and GCRA's spacing (burst 1) never puts more than the quota in any
window, which is what a provider's sliding window checks.

Keys: ``{p}:limit:<key>`` (hash), ``{p}:limit:<key>:r`` (zset of reservations) and
``{p}:limit:<key>:g`` (zset of holders granted in the last 10 minutes, for a node's own limits:
a node re-run under the same attempt, after its worker died, is not charged twice), expiring after ``ttl_s`` of
idleness (a day by default).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.kernel.limits import LimitDecision, LimitRequest
from orchestrator.store.keys import Keys
from orchestrator.telemetry import flow_metrics

_SOURCE = (Path(__file__).parent / "lua" / "limit.lua").read_text()
DEFAULT_TTL_S = 86400.0
UNAVAILABLE_WAIT_S = 1.0  # a limiter Redis cannot answer: the node waits this long and asks again
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError)


@dataclass(frozen=True)
class Acquired:
    """A decision with the rate each requested key runs at now (declared or learned)."""

    wait_s: float
    key: str
    rates: tuple[float, ...]


def _spec(request: LimitRequest) -> dict[str, Any]:
    return {"rate": request.rate, "per_s": request.per_s, "cost": request.cost, "burst": request.burst,
            "learn": request.learn}


class RateLimiter:
    """The Redis limiter; also the kernel's ``Limiter`` for nodes' ``settings.limits``."""

    def __init__(self, redis: Redis, keys: Keys, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_s = ttl_s
        self._script = redis.register_script(_SOURCE)

    async def _call(self, keys: list[str], args: dict[str, Any]) -> list[Any]:
        reply: list[Any] = await self._script(keys=keys, args=[json.dumps({**args, "ttl_s": self.ttl_s})])
        return reply

    async def take(self, requests: Sequence[LimitRequest], *, holder: str, once: bool = False,
                   probe: bool = False) -> Acquired:
        """Acquire every request at once (fully scoped keys); see the module docstring.
        ``once``: ``holder`` is charged once however often it asks (a node execution that
        runs again after its worker died); without it every grant is a new charge (each of a
        provider's requests is a new call). ``probe``: ask before building the request; a
        grant is not taken (the acquire right before sending takes it), a refusal reserves
        the holder's slot as usual."""
        if not requests:
            return Acquired(0.0, "", ())
        reply = await self._call([self.keys.limit(r.key) for r in requests],
                                 {"op": "acquire", "holder": holder, "once": once, "probe": probe,
                                  "limits": [_spec(r) for r in requests]})
        wait_s = int(reply[0]) / 1000
        index = int(reply[1])
        rates = tuple(float(x) for x in reply[2:])
        key = requests[index - 1].key if index > 0 else ""
        if probe and not wait_s:
            return Acquired(wait_s, key, rates)  # nothing taken: counted by the acquire that follows
        for request, rate in zip(requests, rates, strict=False):
            flow_metrics.acquired(request.key, wait_s if request.key == key else 0.0, rate or None)
        return Acquired(wait_s, key, rates)

    async def acquire(self, requests: Sequence[LimitRequest], *, holder: str,
                      workspace: str | None) -> LimitDecision:
        """The kernel's interface: a node's own limits, scoped to its workspace."""
        scoped = [LimitRequest(key=f"ws:{workspace or 'default'}:{r.key}", rate=r.rate, per_s=r.per_s,
                               cost=r.cost, burst=r.burst, learn=r.learn) for r in requests]
        try:
            got = await self.take(scoped, holder=holder, once=True)
        except UNAVAILABLE:  # a node waits for a limit that cannot be asked; it never fails for it
            return LimitDecision(UNAVAILABLE_WAIT_S, "limiter unavailable")
        return LimitDecision(got.wait_s, got.key)

    async def adjust(self, request: LimitRequest, delta: float) -> None:
        """Charge ``delta`` more units to the key (negative: give back), e.g. the real
        tokens of a call minus the estimate charged before it."""
        if delta:
            await self._call([self.keys.limit(request.key)],
                             {"op": "adjust", "delta": delta, "limits": [_spec(request)]})

    async def penalize(self, request: LimitRequest, retry_after_s: float | None) -> None:
        """A provider answered 429 for this key: block it until ``retry_after_s`` from now
        for everyone and cut its rate (see the module docstring)."""
        flow_metrics.refused(request.key)
        await self._call([self.keys.limit(request.key)],
                         {"op": "penalize", "retry_after_s": retry_after_s or 0, "limits": [_spec(request)]})
