"""Agno session storage for agent nodes: Redis keys that all expire, or process memory.

Agno's ``RedisDb`` (3.1.10) writes, besides one key per session and per run, global
"index" sets such as ``{prefix}:runs:index:status:COMPLETED`` and
``{prefix}:sessions:index:agent_id:<id>``: an SADD per record, never a TTL, and nothing
in ``RedisDb`` ever reads them (its queries scan the record keys and skip ``:index:``
keys). They only grow. :class:`ExpiringRedisDb` stores the same records without those
sets, so every key it writes carries the retention TTL:

=====================================  ======  =========================================
key                                    type    what, TTL
=====================================  ======  =========================================
{p}:agno:sessions:{session_id}         string  the session (agent/team data); retention
{p}:agno:runs:{run_id}                 string  one Agno run (messages, status); retention
{p}:agno:runs:by_session:{session_id}  zset    the session's run ids by run index; retention
=====================================  ======  =========================================

A session that keeps talking keeps its keys alive (each write renews the TTL); one left
alone expires ``retention_s`` after its last turn, as run state does.
"""

from __future__ import annotations

import os
from typing import Any

from agno.db.base import BaseDb
from agno.db.in_memory import InMemoryDb
from agno.db.redis import RedisDb
from agno.db.redis.utils import generate_redis_key, serialize_data
from agno.db.utils import build_single_run_row

from orchestrator.kernel.protocol import FlowContext

DEFAULT_RETENTION_S = 7 * 24 * 3600  # when the host passes no settings (matches Settings)
AGNO_SUFFIX = "agno"  # Agno's keys live under "{key_prefix}:agno:"

# One in-process store for runs with no Redis (local runs, tests): history and approvals
# then work within this process only.
_MEMORY_DB = InMemoryDb()  # type: ignore[no-untyped-call]
# (pid, url, prefix, expire) -> db: one connection pool per worker process, not per node.
_REDIS_DBS: dict[tuple[int, str, str, int], ExpiringRedisDb] = {}


class ExpiringRedisDb(RedisDb):
    """``RedisDb`` without the global index sets: every key it writes expires."""

    def __init__(self, *, db_url: str, db_prefix: str, expire_s: int) -> None:
        if expire_s <= 0:
            raise ValueError(f"expire_s must be a positive number of seconds, not {expire_s}")
        super().__init__(db_url=db_url, db_prefix=db_prefix, expire=expire_s)
        self.expire_s = expire_s

    def _store_record(self, table_type: str, record_id: str, data: dict[str, Any],
                      index_fields: list[str] | None = None) -> bool:
        stored: bool = super()._store_record(table_type, record_id, data, index_fields=None)
        return stored

    def upsert_run(self, run: Any, session_id: str, user_id: str | None = None,
                   run_index: int | None = None) -> None:
        """As ``RedisDb.upsert_run`` (run key + the session's run index), minus the
        global field indexes."""
        row = build_single_run_row(run=run, session_id=session_id, user_id=user_id,
                                   run_index=run_index)
        existing = self._get_record("runs", row["run_id"])
        if existing is not None and "run_index" in existing:
            row["run_index"] = existing["run_index"]  # an update keeps its place
        index_key = self._runs_by_session_index_key(session_id)
        run_key = generate_redis_key(prefix=self.db_prefix, table_type="runs",
                                     key_id=row["run_id"])
        pipe = self.redis_client.pipeline()
        pipe.set(run_key, serialize_data(row), ex=self.expire)
        pipe.zadd(index_key, {row["run_id"]: float(row.get("run_index") or 0)})
        pipe.expire(index_key, self.expire_s)
        pipe.execute()


def redis_db(url: str, prefix: str, expire_s: int) -> ExpiringRedisDb:
    """The process's shared store for this Redis, prefix and TTL (built after a fork)."""
    key = (os.getpid(), url, prefix, expire_s)
    db = _REDIS_DBS.get(key)
    if db is None:
        for stale in [k for k in _REDIS_DBS if k[0] != key[0]]:
            del _REDIS_DBS[stale]  # inherited from the parent: its sockets are not ours
        db = _REDIS_DBS[key] = ExpiringRedisDb(db_url=url, db_prefix=prefix, expire_s=expire_s)
    return db


def session_db(ctx: FlowContext) -> BaseDb:
    """Agno session storage: the run's Redis when the host passes ``redis_url``, else the
    process-local store."""
    redis_url = ctx.services.get("redis_url")
    if not redis_url:
        return _MEMORY_DB
    settings = ctx.services.get("settings")
    expire_s = int(getattr(settings, "retention_s", 0) or DEFAULT_RETENTION_S)
    prefix = f"{getattr(settings, 'key_prefix', None) or 'orc'}:{AGNO_SUFFIX}"
    return redis_db(str(redis_url), prefix, expire_s)
