"""Stored graphs in Redis: versioned, validated at save and at load.

Keys (``orchestrator/store/keys.py``): ``{p}:graph:{gid}`` (hash: latest version, name,
times, webhook secret), ``{p}:graph:{gid}:v:{n}`` (graph JSON of version n),
``{p}:graph:{gid}:plans`` (compiled plans per version, ``plan_cache.py``),
``{p}:graphs`` (zset gid -> updated_at), ``{p}:graph:{gid}:runs`` (zset run id ->
created_at) and ``{p}:hooks`` (hash webhook path -> gid).

Contract:

* every saved version passed ``validate_graph`` with the node registry, and so does every
  version read back (a registry change can invalidate a stored graph: the read raises
  the ``GraphError`` naming the node); a version validated once with a registry is not
  validated again in the same process (versions never change), and its compiled plan is
  kept in Redis for every process (``orchestrator/service/plan_cache.py``);
* an update writes version n+1; old versions stay readable;
* a webhook path belongs to one graph; saving a second graph with the same path raises
  :class:`GraphConflictError`, which names the holder only when it is of the same
  workspace (webhook paths are one namespace across workspaces, like graph ids);
* the per-graph webhook secret is stored in the graph hash and is never part of a read.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from orchestrator.errors import GraphConflictError, GraphNotFoundError
from orchestrator.kernel.errors import GraphSchemaError, ParameterError
from orchestrator.kernel.graph import ID_PATTERN
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.validation import GraphLimits, validate_graph
from orchestrator.service import admission
from orchestrator.service.plan_cache import GraphHead, PlanCache, StoredPlan, compile_template, fingerprint, start_key
from orchestrator.settings import KernelLimits, Settings
from orchestrator.store.keys import Keys
from orchestrator.telemetry.budgets import graph_budget

WEBHOOK_NODE_TYPE = "webhook_trigger"  # the trigger type whose data.path routes POST /hooks/{path}
HOOK_PATH_PATTERN = r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+){0,15}"  # at most 16 segments
DEFAULT_WORKSPACE = "default"  # graphs, runs and keys with no workspace belong here
_SECRET_FIELD = "webhook_secret"  # noqa: S105 - a hash field name, not a secret



@dataclass
class GraphSummary:
    id: str
    name: str
    version: int
    created_at: float
    updated_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "version": self.version,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


def validate(raw: Any, registry: Registry, settings: KernelLimits) -> dict[str, Any]:
    """Validate ``raw`` with the node registry and the bounds of ``settings``; return the
    normalized graph JSON."""
    limits = settings.graph_limits()
    normalized: dict[str, Any] = validate_graph(raw, registry, limits).graph.to_json()
    graph_budget(normalized)  # a malformed settings.budget or settings.concurrency is refused when
    admission.check_concurrency(normalized)  # saved, not at each start
    return normalized


def webhook_paths(graph: dict[str, Any]) -> list[str]:
    """The ``data.path`` of every webhook trigger node in a graph JSON."""
    out: list[str] = []
    for node in graph.get("nodes") or []:
        path = (node.get("data") or {}).get("path")
        if node.get("type") == WEBHOOK_NODE_TYPE and isinstance(path, str) and path:
            out.append(path.strip("/"))
    return out


# KEYS[1] graph hash, ARGV[1] the version the caller edited: increment ``latest`` only
# when it is still that version, else answer -1.
_CLAIM_IF_LATEST = """
local latest = redis.call('HGET', KEYS[1], 'latest') or '0'
if latest ~= ARGV[1] then return -1 end
return redis.call('HINCRBY', KEYS[1], 'latest', 1)
"""


class GraphStore:
    def __init__(self, redis: Redis, registry: Registry, settings: Settings) -> None:
        self.redis = redis
        self.registry = registry
        self.settings = settings
        self.keys = Keys.of(settings)
        self.hooks_key = self.keys.hooks()
        self.plans = PlanCache()  # validated graphs and compiled plans per version (plan_cache.py)
        self._limits: GraphLimits | None = None

    @property
    def limits(self) -> GraphLimits:
        if self._limits is None:
            self._limits = self.settings.graph_limits()
        return self._limits

    # -- writes ------------------------------------------------------------------------

    async def create(self, raw: Any, graph_id: str | None = None, *,
                     workspace: str = DEFAULT_WORKSPACE) -> dict[str, Any]:
        """Save a new graph of ``workspace`` (id from ``graph_id``, else the JSON's ``id``,
        else generated). Graph ids are one namespace across workspaces: an id another
        workspace uses is a 409 that says nothing more about that graph."""
        if not isinstance(raw, dict):
            raise GraphSchemaError(f"a graph must be a JSON object, got {type(raw).__name__}")
        gid = graph_id or (str(raw["id"]) if raw.get("id") not in (None, "", "graph") else "")
        gid = gid or "g_" + secrets.token_hex(6)
        _check_id(gid)
        now = time.time()
        created = await self.redis.hsetnx(self.keys.graph(gid), "created_at", repr(now))
        if not created:
            raise GraphConflictError(
                f"graph id {gid!r} is taken; update it instead, or choose another id", graph_id=gid
            )
        try:
            await self.redis.hset(self.keys.graph(gid), "workspace", workspace)
            return await self._save(gid, raw, now)
        except BaseException:
            await self.redis.delete(self.keys.graph(gid))
            raise

    async def update(self, graph_id: str, raw: Any, base_version: int | None = None, *,
                     workspace: str | None = None) -> dict[str, Any]:
        """Save ``raw`` as the next version of an existing graph (of ``workspace``, when given).

        With ``base_version`` (the version the caller edited) the save is refused with
        ``GraphConflictError`` (409) when the latest version is no longer that one: someone
        saved in between, and their version is not overwritten."""
        await self._require(graph_id, workspace)
        if not isinstance(raw, dict):
            raise GraphSchemaError(
                f"a graph must be a JSON object, got {type(raw).__name__}", graph_id=graph_id
            )
        return await self._save(graph_id, raw, time.time(), base_version)

    async def _save(
        self, gid: str, raw: dict[str, Any], now: float, base_version: int | None = None
    ) -> dict[str, Any]:
        graph = validate({**raw, "id": gid, "version": None}, self.registry, self.settings)
        _check_hook_paths(graph)
        paths = webhook_paths(graph)
        for path in paths:
            owner = await self.redis.hget(self.hooks_key, path)
            if owner is not None and _text(owner) != gid:
                raise await self._path_taken(path, _text(owner), gid)
        version = await self._next_version(gid, base_version)
        graph["version"] = version
        ttl = self.settings.graph_ttl_s
        old = await self._hook_paths_of(gid)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.keys.graph_version(gid, version), json.dumps(graph), ex=ttl)
            pipe.hset(
                self.keys.graph(gid),
                mapping={"name": graph.get("name") or "", "updated_at": repr(now)},
            )
            pipe.zadd(self.keys.graphs(), {gid: now})
            pipe.zadd(self.keys.workspace_graphs(await self.workspace_of(gid)), {gid: now})
            for path in old - set(paths):
                pipe.hdel(self.hooks_key, path)
            for path in paths:
                pipe.hset(self.hooks_key, path, gid)
            if ttl:
                pipe.expire(self.keys.graph(gid), ttl)
            await pipe.execute()
        self.plans.forget(gid)  # this process's next start reads the new head (others: the start guard)
        return graph

    async def _path_taken(self, path: str, owner: str, gid: str) -> GraphConflictError:
        """The 409 for a webhook path another graph holds: it names that graph only to its
        own workspace (to another, a graph of this workspace is as unknown as elsewhere)."""
        if await self.workspace_of(owner) == await self.workspace_of(gid):
            return GraphConflictError(f"webhook path {path!r} is already used by graph {owner!r}", graph_id=gid)
        return GraphConflictError(f"webhook path {path!r} is taken; choose another path", graph_id=gid)

    async def _next_version(self, gid: str, base_version: int | None) -> int:
        """Claim the next version number; atomically refused if ``base_version`` is stale."""
        if base_version is None:
            return int(await self.redis.hincrby(self.keys.graph(gid), "latest", 1))
        claimed = int(await self.redis.eval(_CLAIM_IF_LATEST, 1, self.keys.graph(gid), str(base_version)))
        if claimed < 0:
            latest = await self.redis.hget(self.keys.graph(gid), "latest")
            raise GraphConflictError(
                f"graph {gid!r} was saved as version {_text(latest)} since version {base_version}"
                " was loaded; reload it and apply the changes again",
                graph_id=gid,
            )
        return claimed

    async def delete(self, graph_id: str, *, workspace: str | None = None) -> None:
        await self._require(graph_id, workspace)
        record = await self.redis.hgetall(self.keys.graph(graph_id))
        latest = int(_field(record, "latest", "0"))
        paths = await self._hook_paths_of(graph_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            for path in paths:
                pipe.hdel(self.hooks_key, path)
            pipe.delete(
                self.keys.graph(graph_id),
                self.keys.graph_runs(graph_id),
                self.keys.graph_plans(graph_id),
                *[self.keys.graph_version(graph_id, n) for n in range(1, latest + 1)],
            )
            pipe.zrem(self.keys.graphs(), graph_id)
            pipe.zrem(self.keys.workspace_graphs(_field(record, "workspace", DEFAULT_WORKSPACE)), graph_id)
            await pipe.execute()
        self.plans.forget(graph_id)

    async def set_webhook_secret(self, graph_id: str, secret: str, *, workspace: str | None = None) -> None:
        await self._require(graph_id, workspace)
        await self.redis.hset(self.keys.graph(graph_id), _SECRET_FIELD, secret)

    async def add_run(self, graph_id: str, run_id: str) -> None:
        """Record that ``run_id`` ran this graph (listed by :meth:`runs`)."""
        key = self.keys.graph_runs(graph_id)
        now = time.time()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(key, {run_id: now})
            pipe.zremrangebyscore(key, "-inf", now - self.settings.retention_s)
            await pipe.execute()

    # -- reads -------------------------------------------------------------------------

    async def get(self, graph_id: str, version: int | None = None, *,
                  workspace: str | None = None) -> dict[str, Any]:
        """The graph JSON of ``version`` (latest by default), validated with the current
        registry (once per version and registry in this process). With ``workspace``, a
        graph of another workspace is unknown (404)."""
        head = await self.head(graph_id, workspace)
        n = head.latest if version is None else version
        text = await self._validated(head, n)
        graph: dict[str, Any] = json.loads(text)  # a fresh copy: callers may change it
        return graph

    async def _validated(self, head: GraphHead, n: int) -> str:
        """Version ``n``'s validated JSON (``version`` set) as text."""
        fp = fingerprint(self.registry, self.limits)
        text = self.plans.graph(head, n, fp)
        if text is not None:
            return text
        raw = None
        if 0 < n <= head.latest:
            raw = await self.redis.get(self.keys.graph_version(head.graph_id, n))
        if raw is None:
            raise GraphNotFoundError(f"graph {head.graph_id!r} has no version {n}", graph_id=head.graph_id)
        validated = validate(json.loads(raw), self.registry, self.settings)
        validated["version"] = n
        text = json.dumps(validated)
        self.plans.keep_graph(head, n, fp, text)
        return text

    async def compiled(self, graph_id: str, version: int | None, start: list[str] | None, *,
                       workspace: str | None = None, fresh: bool = False) -> StoredPlan:
        """The validated, compiled plan of ``version`` (latest by default) started at
        ``start`` (default: the graph's single trigger): from this process's cache, else
        from Redis's (``{p}:graph:{gid}:plans``), else validated and compiled now and kept
        in both. The graph's head comes from this process's memory unless ``fresh`` (or
        unknown): a start guards the run with it (``StartGuard``), and reads it again
        only when the guard refuses. Graph faults raise their ``GraphError``."""
        head = None if fresh else self.plans.head(graph_id)
        if head is None or (version is not None and version > head.latest):
            head = await self.head(graph_id, workspace)
        elif workspace is not None and head.workspace != workspace:
            raise GraphNotFoundError(f"unknown graph {graph_id!r}", graph_id=graph_id)
        n = head.latest if version is None else version
        if not 0 < n <= head.latest:
            raise GraphNotFoundError(f"graph {graph_id!r} has no version {n}", graph_id=graph_id)
        fp, key = fingerprint(self.registry, self.limits), start_key(start)
        stored = self.plans.plan(head, n, fp, key)
        if stored is not None:
            return stored
        field = f"{head.created_at}:{n}:{fp}:{key}"
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(self.keys.graph_plans(graph_id), field)
            pipe.get(self.keys.graph_version(graph_id, n))
            raw, graph = await pipe.execute()
        if raw is not None and graph is not None:  # validated with this registry when it was kept
            validated = json.loads(graph)
            validated["version"] = n
            stored = StoredPlan.from_json(head, n, _text(raw), validated)
        else:
            vg = validate_graph(json.loads(await self._validated(head, n)), self.registry, self.limits)
            plan, deadline_s = compile_template(vg, start)
            stored = StoredPlan(head, n, plan, deadline_s)
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.hset(self.keys.graph_plans(graph_id), field, stored.to_json())
                if self.settings.graph_ttl_s:
                    pipe.expire(self.keys.graph_plans(graph_id), self.settings.graph_ttl_s)
                await pipe.execute()
        self.plans.keep_plan(stored, fp, key)
        return stored

    async def versions(self, graph_id: str, *, workspace: str | None = None) -> list[int]:
        latest = await self._require(graph_id, workspace)
        keys = [self.keys.graph_version(graph_id, n) for n in range(1, latest + 1)]
        present = await self.redis.exists(*keys) if keys else 0
        if present == len(keys):
            return list(range(1, latest + 1))
        return [n for n in range(1, latest + 1) if await self.redis.exists(keys[n - 1])]

    async def page(self, offset: int = 0, limit: int = 50, *,
                   workspace: str | None = None) -> tuple[list[GraphSummary], int]:
        """Most recently updated first (of one workspace, or of all); returns (page, total)."""
        index = self.keys.graphs() if workspace is None else self.keys.workspace_graphs(workspace)
        total = int(await self.redis.zcard(index))
        ids = await self.redis.zrevrange(index, offset, offset + limit - 1)
        out: list[GraphSummary] = []
        for raw_id in ids:
            gid = _text(raw_id)
            rec = await self.redis.hgetall(self.keys.graph(gid))
            if not rec:
                continue
            out.append(
                GraphSummary(
                    id=gid,
                    name=_field(rec, "name", ""),
                    version=int(_field(rec, "latest", "0")),
                    created_at=float(_field(rec, "created_at", "0")),
                    updated_at=float(_field(rec, "updated_at", "0")),
                )
            )
        return out, total

    async def runs(self, graph_id: str, offset: int = 0, limit: int = 50, *,
                   workspace: str | None = None) -> list[str]:
        await self._require(graph_id, workspace)
        ids = await self.redis.zrevrange(self.keys.graph_runs(graph_id), offset, offset + limit - 1)
        return [_text(i) for i in ids]

    async def graph_for_hook(self, path: str) -> str | None:
        owner = await self.redis.hget(self.hooks_key, path.strip("/"))
        return None if owner is None else _text(owner)

    async def webhook_secret(self, graph_id: str) -> str | None:
        value = await self.redis.hget(self.keys.graph(graph_id), _SECRET_FIELD)
        return None if value is None else _text(value)

    async def workspace_of(self, graph_id: str) -> str:
        """The workspace a graph belongs to (graphs stored before workspaces: default)."""
        owner = await self.redis.hget(self.keys.graph(graph_id), "workspace")
        return DEFAULT_WORKSPACE if owner is None else _text(owner)

    async def _require(self, graph_id: str, workspace: str | None = None) -> int:
        return (await self.head(graph_id, workspace)).latest

    async def head(self, graph_id: str, workspace: str | None = None) -> GraphHead:
        """The graph's latest version, creation time and workspace (one read); remembered
        for :meth:`compiled`. ``GraphNotFoundError`` when unknown or of another
        ``workspace``."""
        latest, owner, created = await self.redis.hmget(self.keys.graph(graph_id),
                                                        ["latest", "workspace", "created_at"])
        owner_ws = DEFAULT_WORKSPACE if owner is None else _text(owner)
        if latest is None or (workspace is not None and owner_ws != workspace):
            self.plans.forget(graph_id)
            raise GraphNotFoundError(f"unknown graph {graph_id!r}", graph_id=graph_id)
        head = GraphHead(graph_id, int(_text(latest)), "" if created is None else _text(created), owner_ws)
        self.plans.know_head(head)
        return head

    async def _hook_paths_of(self, graph_id: str) -> set[str]:
        index = await self.redis.hgetall(self.hooks_key)
        return {_text(p) for p, g in index.items() if _text(g) == graph_id}


def _check_id(gid: str) -> None:
    if not re.fullmatch(ID_PATTERN, gid):
        raise GraphSchemaError(
            f"graph id {gid!r} is not usable: ids are 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            graph_id=gid, parameter="id",
        )


def _check_hook_paths(graph: dict[str, Any]) -> None:
    for node in graph.get("nodes") or []:
        path = (node.get("data") or {}).get("path")
        if node.get("type") == WEBHOOK_NODE_TYPE and isinstance(path, str) and path \
                and not re.fullmatch(HOOK_PATH_PATTERN, path.strip("/")):
            raise ParameterError(
                f"webhook path {path!r} is not usable: segments of letters, digits, '.', '_' or '-' "
                "separated by '/'",
                graph_id=str(graph.get("id")), node_id=str(node.get("id")), node_name=node.get("name"),
                parameter="path",
            )


def _field(record: dict[Any, Any], name: str, default: str) -> str:
    """A hash field whether the client decodes responses or not."""
    value = record.get(name.encode(), record.get(name))
    return default if value is None else _text(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
