"""Storage budgets: the bytes one run and one workspace keep in Redis, which every
workspace shares.

What counts (the JSON or the bytes as stored):

* a run: its nodes' outputs, the events its nodes append (``completed``, ``error``,
  ``progress``, agent events, ...), the files its nodes store in Redis and the outputs it
  starts with (a rerun's prefix, a test step's upstream data);
* a workspace: all of that for each of its runs, and the files uploaded to it
  (``POST /files``) that are kept in Redis.

Also counted: a run's input of 64 KiB or more (``runs.INPUT_COUNTED_FROM``, held in its record).

Not counted: a run's record and plan (and a smaller input), and the store's own lifecycle events (``started``,
``skipped``, run-level events; a few hundred bytes each, bounded by the graph's size);
files in S3 (the bucket's own quota and lifecycle bound them).

``ORCH_RUN_MAX_BYTES`` and ``ORCH_WORKSPACE_MAX_BYTES`` (0: no budget) bound them. A write
that would take a run or its workspace past its budget is refused before anything is
stored, with a :class:`StorageBudgetError` naming the setting: the node that wrote it
fails and its run stops (``orchestrator/store/redis_store.py``), an upload gets 429 (``api/files.py``).
The check and the count are one Lua script, so concurrent writers never pass a budget
together.

How bytes leave the count: a run's count is a field of its record (``bytes``), gone when
the record expires. A workspace's is one counter per UTC day of the bytes written that
day (``{p}:wsbytes:{ws}:{day}``), which expires at the end of that day plus
``retention_s`` plus ``active_ttl_s``: by then everything written that day has expired
(run state expires ``retention_s`` after the run ends, and an active run's keys live at
most ``active_ttl_s`` past its last progress; a file ``retention_s`` after its upload).
The workspace's usage is the sum of its live counters. Why day counters rather than
decrementing at expiry: the count follows expiry by itself, with no sweeper pass, no
keyspace notifications and nothing to repair after a crash. The price: bytes stay counted
up to a day (and ``active_ttl_s``) longer than they are kept, never shorter, except for a
run active longer than ``active_ttl_s`` without progress, whose earliest bytes may leave
the count before they expire. Deleting a file gives its bytes back to its day's counter.

The budgets keep any workspace from filling Redis; what still fills it (many workspaces,
graphs and sessions, a Redis shared with something else) meets its ``maxmemory``: the
shipped configurations set one with ``noeviction`` (nothing is dropped silently), and a
write Redis refuses for memory becomes :func:`store_full`'s :class:`StoreFullError` (the
API answers 507 naming it; a node step fails with it).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import OutOfMemoryError, ResponseError

from orchestrator.errors import StorageBudgetError, StoreFullError
from orchestrator.settings import StoreSettings
from orchestrator.store.keys import Keys

DAY_S = 86400
OTHERS_MAX_AGE_S = 1.0  # a cluster: other buckets' use of a workspace budget is re-read this often
DAY_KEYS_MEMO_SIZE = 1024  # (workspace, day, bucket) day-counter key lists kept; cleared when full

# KEYS: the workspace's day counters, today's first, then (ARGV[5] == '1') the run record.
# ARGV: bytes, workspace budget, run budget, today's counter expires at (epoch s), has run.
# Returns {verdict, used}: 'ok' (counted), 'run' / 'workspace' (refused: that budget's use
# before this write) or 'gone' (the run record expired: nothing is counted or stored).
RESERVE_LUA = """
local n, ws_max, run_max = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local counters, run = #KEYS, nil
if ARGV[5] == '1' then run, counters = KEYS[#KEYS], #KEYS - 1 end
if run then
  if redis.call('EXISTS', run) == 0 then return {'gone', 0} end
  local used = tonumber(redis.call('HGET', run, 'bytes') or '0')
  if run_max > 0 and used + n > run_max then return {'run', used} end
end
local total = 0
for i = 1, counters do total = total + tonumber(redis.call('GET', KEYS[i]) or '0') end
if ws_max > 0 and total + n > ws_max then return {'workspace', total} end
if run then redis.call('HINCRBY', run, 'bytes', n) end
redis.call('INCRBY', KEYS[1], n)
redis.call('EXPIREAT', KEYS[1], ARGV[4])
return {'ok', total + n}
"""
# KEYS[1] a day counter; ARGV[1] bytes to give back (a counter that expired stays gone).
RELEASE_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local left = redis.call('DECRBY', KEYS[1], ARGV[1])
if left <= 0 then redis.call('DEL', KEYS[1]) end
return left
"""

def store_full(exc: Exception) -> StoreFullError | None:
    """The StoreFullError of a Redis error that refused a write for memory, else None
    (redis-py's OutOfMemoryError, or the same error raised inside a script)."""
    if not isinstance(exc, OutOfMemoryError) and "used memory > 'maxmemory'" not in str(exc):
        return None
    return StoreFullError("the state store (Redis) is full: it refuses writes past its maxmemory (noeviction); "
                          "free space (lower ORCH_RETENTION_S, the storage budgets ORCH_RUN_MAX_BYTES and "
                          "ORCH_WORKSPACE_MAX_BYTES) or raise maxmemory")


class _StoreFullErrors:
    """:func:`store_full_errors`' context: a class, not a generator (every script call of a
    node step enters one; ``contextlib.contextmanager`` cost several calls each time)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, ResponseError):
            full = store_full(exc)
            if full is not None:
                raise full from None
        # anything else goes on as it is (None: nothing is swallowed)


_STORE_FULL_ERRORS = _StoreFullErrors()


def store_full_errors() -> AbstractContextManager[None]:
    """Redis errors that refused a write for memory, raised as StoreFullError."""
    return _STORE_FULL_ERRORS


ScriptCall = Callable[[AsyncScript, list[Any], list[Any]], Awaitable[Any]]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class StorageBudget:
    """The budgets of the module docstring on one Redis (any ``decode_responses``).
    ``call`` runs a script (``orchestrator.store.batching.CommandBatcher.script`` shares round trips);
    by default each call is its own."""

    def __init__(self, redis: Redis, settings: StoreSettings, call: ScriptCall | None = None) -> None:
        self.redis = redis
        self.keys = Keys.of(settings)
        self.run_max_bytes = settings.run_max_bytes
        self.workspace_max_bytes = settings.workspace_max_bytes
        self.counted_s = settings.retention_s + settings.active_ttl_s  # past the end of a counter's day
        self._reserve = redis.register_script(RESERVE_LUA)
        self._release = redis.register_script(RELEASE_LUA)
        self._others: dict[str, tuple[float, dict[int, int]]] = {}  # workspace -> (when, bytes per bucket)
        self._refreshing: dict[str, asyncio.Future[None]] = {}  # workspace -> its sum under way
        self._day_keys_memo: dict[tuple[str, int, int], tuple[str, ...]] = {}
        self._days_memo: tuple[int, tuple[int, ...]] = (-1, ())  # today, and the days of :meth:`_days`
        self._call: ScriptCall = call or (lambda script, keys, args: script(keys=keys, args=args))

    @property
    def enabled(self) -> bool:
        return self.run_max_bytes > 0 or self.workspace_max_bytes > 0

    def _days(self, now_s: float) -> list[int]:
        """Today, then every earlier day whose counter may still be alive (worked out once a
        day: every completion asks)."""
        today = int(now_s // DAY_S)
        known, days = self._days_memo
        if known != today:
            days = tuple(today - i for i in range(math.ceil(self.counted_s / DAY_S) + 2))
            self._days_memo = (today, days)
        return list(days)

    async def reserve(self, nbytes: int, *, workspace: str, run_id: str | None = None) -> int | None:
        """Count ``nbytes`` for ``workspace`` (and ``run_id``) if they fit in the budgets;
        the day they are counted in (for :meth:`release`), or None when nothing was counted
        (budgets off, nothing to count, or the run is gone). Raises
        :class:`StorageBudgetError` naming the budget they would pass."""
        if nbytes <= 0 or not self.enabled:
            return None
        await self.refresh_others(workspace)
        days, keys, args = self.request(nbytes, workspace=workspace, run_id=run_id)
        if run_id is not None:
            keys.append(self.keys.run(run_id))
        verdict, used = await self._call(self._reserve, keys, [*args, "1" if run_id is not None else "0"])
        kind = _text(verdict)
        self.check(kind, int(used), nbytes, workspace=workspace, run_id=run_id)
        return days[0] if kind == "ok" else None

    def _bucket(self, workspace: str, run_id: str | None) -> int:
        """Where the bytes are counted: the run's bucket (its record is in the same script),
        else the workspace's. One bucket (one Redis): always 0."""
        return self.keys.bucket(run_id if run_id is not None else workspace)

    def request(self, nbytes: int, *, workspace: str, run_id: str | None = None
                ) -> tuple[list[int], list[Any], list[Any]]:
        """What a reservation of ``nbytes`` for ``workspace`` passes to a script: the days,
        the day counters' keys (today's first), and (bytes, workspace budget, run budget,
        today's counter expires at). ``orchestrator/store/lua/complete.lua`` reserves a
        completion's bytes with them in the same script that stores it."""
        days = self._days(time.time())
        bucket = self._bucket(workspace, run_id)
        keys: list[Any] = list(self._day_keys(workspace, days, bucket))
        expire_at = (days[0] + 1) * DAY_S + self.counted_s
        return days, keys, [nbytes, self._workspace_allowance(workspace, bucket), self.run_max_bytes, expire_at]

    def _day_keys(self, workspace: str, days: list[int], bucket: int) -> tuple[str, ...]:
        """The day counters' keys of ``days`` (today first), built once per workspace, day
        and bucket: every completion passes them (a dozen keys)."""
        memo = (workspace, days[0], bucket)
        keys = self._day_keys_memo.get(memo)
        if keys is None:
            if len(self._day_keys_memo) >= DAY_KEYS_MEMO_SIZE:
                self._day_keys_memo.clear()
            keys = self._day_keys_memo[memo] = tuple(self.keys.workspace_bytes(workspace, d, bucket) for d in days)
        return keys

    def _workspace_allowance(self, workspace: str, bucket: int) -> int:
        """The workspace budget a script checks in ``bucket``: the whole budget on one
        Redis; on a cluster what the other buckets leave of it (their counters summed by
        :meth:`refresh_others`, one to two ``OTHERS_MAX_AGE_S`` old: across buckets the
        budget holds with that lag, within a bucket exactly)."""
        if self.workspace_max_bytes <= 0 or self.keys.buckets <= 1:
            return self.workspace_max_bytes
        others = self._others.get(workspace, (0.0, {}))[1]
        used_elsewhere = sum(n for b, n in others.items() if b != bucket)
        return max(1, self.workspace_max_bytes - used_elsewhere)

    @property
    def sums_others(self) -> bool:
        """Whether :meth:`refresh_others` has anything to do (a workspace budget on a cluster)."""
        return self.workspace_max_bytes > 0 and self.keys.buckets > 1

    async def refresh_others(self, workspace: str) -> None:
        """Sum the workspace's counters per bucket (a cluster) when the last sum is older
        than OTHERS_MAX_AGE_S. One refresh per workspace at a time (single flight); while it
        runs, callers use the previous sum unless that is older than twice the age (or
        there is none), then they wait for the new one."""
        if self.workspace_max_bytes <= 0 or self.keys.buckets <= 1:
            return
        at = self._others.get(workspace, (-math.inf, {}))[0]
        age = time.monotonic() - at
        if age < OTHERS_MAX_AGE_S:
            return
        task = self._refreshing.get(workspace)
        if task is None:
            task = asyncio.ensure_future(self._refresh(workspace))
            self._refreshing[workspace] = task
            task.add_done_callback(lambda done: self._refreshed(workspace, done))
        if age >= 2 * OTHERS_MAX_AGE_S:
            await asyncio.shield(task)

    async def _refresh(self, workspace: str) -> None:
        self._others[workspace] = (time.monotonic(), await self.per_bucket(workspace))

    def _refreshed(self, workspace: str, done: asyncio.Future[None]) -> None:
        self._refreshing.pop(workspace, None)
        if not done.cancelled():
            done.exception()  # retrieved here too: every waiter may have gone

    async def per_bucket(self, workspace: str) -> dict[int, int]:
        """The workspace's bytes per bucket: one MGET per bucket (its day counters share the
        bucket's slot), all in one pipeline (a cluster sends one batch per node)."""
        days = self._days(time.time())
        async with self.redis.pipeline(transaction=False) as pipe:
            for bucket in range(self.keys.buckets):
                # a raw command: redis-py's cluster pipeline refuses mget() even within one slot
                pipe.execute_command("MGET", *(self.keys.workspace_bytes(workspace, day, bucket) for day in days))
            replies = await pipe.execute()
        return {bucket: total for bucket, values in enumerate(replies)
                if (total := sum(int(v) for v in values if v is not None))}

    def check(self, verdict: str, used: int, nbytes: int, *, workspace: str, run_id: str | None) -> None:
        """Raise the :class:`StorageBudgetError` of a refused reservation's ``verdict``
        (``run`` / ``workspace``; ``ok`` and ``gone`` pass)."""
        if verdict == "run":
            raise StorageBudgetError(
                f"run {run_id} would keep {used + nbytes} bytes of outputs, events and files in the store, "
                f"above its budget ORCH_RUN_MAX_BYTES ({self.run_max_bytes} bytes)",
                limit="ORCH_RUN_MAX_BYTES", used=used, requested=nbytes, bound=self.run_max_bytes, run_id=run_id)
        if verdict == "workspace":
            raise StorageBudgetError(
                f"workspace {workspace!r} would keep {used + nbytes} bytes of outputs, events and files in the store, "
                f"above its budget ORCH_WORKSPACE_MAX_BYTES ({self.workspace_max_bytes} bytes); they count until "
                "they expire (ORCH_RETENTION_S)",
                limit="ORCH_WORKSPACE_MAX_BYTES", used=used, requested=nbytes, bound=self.workspace_max_bytes,
                run_id=run_id)

    async def release(self, nbytes: int, *, workspace: str, day: int) -> None:
        """Give back ``nbytes`` counted on ``day`` (a file deleted before it expired)."""
        if nbytes > 0 and self.enabled:
            # a file counted in its run's bucket (a cluster) is not found here: it is given back
            # when its counter expires (docs/architecture.md, Redis Cluster)
            await self._call(self._release, [self.keys.workspace_bytes(workspace, day, self._bucket(workspace, None))],
                             [nbytes])

    async def used(self, workspace: str) -> int:
        """The bytes ``workspace`` keeps now, as counted."""
        if self.keys.buckets > 1:
            return sum((await self.per_bucket(workspace)).values())
        keys = [self.keys.workspace_bytes(workspace, day) for day in self._days(time.time())]
        values = await self.redis.mget(keys)
        return sum(int(v) for v in values if v is not None)
