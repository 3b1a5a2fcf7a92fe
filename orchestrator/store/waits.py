"""Timers of waiting nodes: a Redis sorted set of due resumes, on Redis's clock.

A node that suspends with a ``wake`` in its payload (the Wait node: a duration, a point
in time, or the timeout of a form or resume URL) gets an entry in ``{p}:waits:due``
(member ``"<run>\\n<node>"``, score the due time in epoch seconds of Redis's ``TIME``).
The entry is written *before* the suspension is stored (``RedisRunStore.complete_node``),
so no crash between the two leaves a waiting node without its timer; a node that is still
running when its entry falls due is simply tried again on the next pass.

The sweeper (``orchestrator/service/waits.py``, ``wake_due``) reads the entries due by
Redis's clock, resumes each node with the ``wake.input`` of its payload, and removes the
entries whose node resumed, finished, or whose run ended. Nothing sleeps in a worker, and
a restart of every process loses nothing: the set and the suspended payloads are in Redis.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from redis.asyncio import Redis

from orchestrator.store.keys import Keys

_SCRIPT = (Path(__file__).parent / "lua" / "wait_timer.lua").read_text()
SEPARATOR = "\n"


def member(run_id: str, node_id: str) -> str:
    return f"{run_id}{SEPARATOR}{node_id}"


def parse_member(value: str) -> tuple[str, str] | None:
    run_id, sep, node_id = value.partition(SEPARATOR)
    return (run_id, node_id) if sep and run_id and node_id else None


class WaitTimers:
    """The due set of one key prefix (``redis`` decodes responses)."""

    def __init__(self, redis: Redis, keys: Keys, ttl_s: int) -> None:
        self.redis = redis
        self.keys = keys  # one due set per bucket (one Redis: one set)
        self.ttl_s = int(ttl_s)
        self._schedule = redis.register_script(_SCRIPT)

    async def schedule(self, run_id: str, node_id: str, wake: dict[str, Any]) -> float:
        """Add the node's entry from a payload's ``wake`` (``after_s`` or ``at``); the due time."""
        if "at" in wake:
            mode, value = "at", float(wake["at"])
        else:
            mode, value = "after", float(wake.get("after_s") or 0.0)
        due = await self._schedule(keys=[self._key(run_id)],
                                   args=[member(run_id, node_id), mode, repr(value), self.ttl_s])
        return float(due)

    def _key(self, run_id: str) -> str:
        return self.keys.wait_timers(self.keys.bucket(run_id))

    async def due(self, now: float, limit: int = 500) -> list[tuple[str, str]]:
        """Entries due at ``now`` (Redis's clock), oldest first (every bucket's, in one pipeline)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for bucket in range(self.keys.buckets):
                pipe.zrangebyscore(self.keys.wait_timers(bucket), "-inf", now, start=0, num=limit, withscores=True)
            replies = cast(list[list[tuple[str, float]]], await pipe.execute())
        entries = sorted((score, value) for reply in replies for value, score in reply)[:limit]
        return [parsed for _, value in entries if (parsed := parse_member(value)) is not None]

    async def due_at(self, run_id: str, node_id: str) -> float | None:
        score = await self.redis.zscore(self._key(run_id), member(run_id, node_id))
        return None if score is None else float(score)

    async def remove(self, run_id: str, node_id: str) -> None:
        await self.redis.zrem(self._key(run_id), member(run_id, node_id))
