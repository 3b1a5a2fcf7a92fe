"""Agno session storage for agent nodes: one namespace per workspace, Redis keys that all
expire, or process memory.

**Workspaces.** A chat or session id is chosen by the caller (``POST /chats/{id}/messages``,
``session_id`` of ``POST /graphs/{id}/runs``), so two workspaces may well pick the same one.
History is therefore kept per workspace: :func:`session_db` opens the run's workspace's
store, whose Redis key prefix carries the workspace, and every record Agno writes there
(sessions, runs, the per-session run index) lives under it. Another workspace with the
same session id reads and writes its own, separate conversation. Within a workspace a
session id is one conversation whichever of its graphs runs the turn (every key of the
workspace may read all its graphs' runs anyway, and a conversation may pass from one
graph to another); pick distinct ids for distinct conversations.

Agno's ``RedisDb`` (3.1.10) writes, besides one key per session and per run, global
"index" sets such as ``{prefix}:runs:index:status:COMPLETED`` and
``{prefix}:sessions:index:agent_id:<id>``: an SADD per record, never a TTL, and nothing
in ``RedisDb`` ever reads them (its queries scan the record keys and skip ``:index:``
keys). They only grow. :class:`ExpiringRedisDb` stores the same records without those
sets, so every key it writes carries the retention TTL. ``{a}`` below is
``{p}:agno`` for workspace ``default`` (the keys it always had, so a single-workspace
deployment keeps its history) and ``{p}:agno:ws:{workspace}`` for any other (a workspace id
has no ``:``, and no Agno table is named ``ws``, so the namespaces never overlap):

=====================================  ======  =========================================
key                                    type    what, TTL
=====================================  ======  =========================================
{a}:sessions:{session_id}              string  the session (agent/team data); retention
{a}:runs:{run_id}                      string  one Agno run (messages, status); retention
{a}:runs:by_session:{session_id}       zset    the session's run ids by run index; retention
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
from agno.utils.string import generate_id
from redis import Redis

from orchestrator.host.credentials import DEFAULT_WORKSPACE
from orchestrator.host.node_host import node_host
from orchestrator.host.workspace import checked_workspace
from orchestrator.kernel.protocol import FlowContext

DEFAULT_RETENTION_S = 7 * 24 * 3600  # when the host passes no settings (matches Settings)
AGNO_SUFFIX = "agno"  # Agno's keys live under "{key_prefix}:agno:"
WORKSPACE_INFIX = "ws"  # ... and another workspace's under "{key_prefix}:agno:ws:{workspace}:"

# One in-process store for runs with no Redis (local runs, tests): history and approvals
# then work within this process only; such a host has no workspaces.
_MEMORY_DB = InMemoryDb()  # type: ignore[no-untyped-call]
# (pid, url) -> client: one connection pool per worker process, not per node or workspace.
_REDIS_CLIENTS: dict[tuple[int, str], Redis] = {}
# (pid, url, prefix, expire) -> db: one per workspace, all on the process's client.
_REDIS_DBS: dict[tuple[int, str, str, int], ExpiringRedisDb] = {}


class ExpiringRedisDb(RedisDb):
    """``RedisDb`` without the global index sets: every key it writes expires."""

    def __init__(self, *, redis_client: Redis, db_url: str, db_prefix: str, expire_s: int) -> None:
        if expire_s <= 0:
            raise ValueError(f"expire_s must be a positive number of seconds, not {expire_s}")
        super().__init__(id=generate_id(f"{db_url}#{db_prefix}"), redis_client=redis_client,
                         db_prefix=db_prefix, expire=expire_s)
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
    pid = os.getpid()
    key = (pid, url, prefix, expire_s)
    db = _REDIS_DBS.get(key)
    if db is None:
        for stale in [k for k in _REDIS_DBS if k[0] != pid]:
            del _REDIS_DBS[stale]  # inherited from the parent: its sockets are not ours
        for old in [k for k in _REDIS_CLIENTS if k[0] != pid]:
            del _REDIS_CLIENTS[old]
        client = _REDIS_CLIENTS.get((pid, url))
        if client is None:
            client = _REDIS_CLIENTS[(pid, url)] = Redis.from_url(url, decode_responses=True)
        db = _REDIS_DBS[key] = ExpiringRedisDb(redis_client=client, db_url=url, db_prefix=prefix,
                                               expire_s=expire_s)
    return db


def agno_prefix(key_prefix: str, workspace: str) -> str:
    """The Redis key prefix of ``workspace``'s Agno records (see the module docstring)."""
    if workspace == DEFAULT_WORKSPACE:
        return f"{key_prefix}:{AGNO_SUFFIX}"
    return f"{key_prefix}:{AGNO_SUFFIX}:{WORKSPACE_INFIX}:{checked_workspace(workspace)}"


async def session_db(ctx: FlowContext) -> BaseDb:
    """Agno session storage of the run's workspace: on the run's Redis when the host passes
    ``redis_url``, else the process-local store."""
    host = node_host(ctx)
    url = host.plain_redis_url()  # on a Redis Cluster: ORCH_CONTROL_REDIS_URL (Agno's client is not a cluster's)
    if not url:
        return _MEMORY_DB
    expire_s = int(host.settings.retention_s or DEFAULT_RETENTION_S)
    return redis_db(url, agno_prefix(host.settings.key_prefix or "orc", host.workspace), expire_s)
