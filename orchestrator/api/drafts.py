"""``/graphs/{graph_id}/draft`` and ``/drafts``: a graph saved while it is still incomplete.

A stored graph version is always valid (``graph_store``): a run only ever starts from a
version, so a graph that cannot run is never run. While building, the console saves what
the user has as a *draft* instead: one per graph id, beside its versions, checked for
shape only (``kernel.graph.parse_graph``: a JSON object with well-formed nodes and edges,
known channels; malformed JSON is still a 422), not for run-level faults (unknown types,
missing parameters, bad wires, cycles). The answer carries the first run-level problem,
if any (``problem``, the error a save would answer 422 with), so the console can badge it.
Saving a valid version does not touch the draft; the console deletes it after a version
is saved. Drafts belong to the caller's workspace; a graph id of another workspace is
unknown (404), as for versions. Keys: ``{p}:draft:{gid}``, ``{p}:ws:{ws}:drafts``
(``orchestrator/store/keys.py``), kept ``Settings.graph_ttl_s`` like graphs.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

from fastapi import APIRouter, Body, Depends, Query, Response

from orchestrator.errors import GraphNotFoundError
from orchestrator.kernel.errors import GraphError, GraphSchemaError
from orchestrator.kernel.graph import parse_graph
from orchestrator.service.graph_store import validate

from .auth import role
from .models import GraphId
from .principal import Principal
from .services import Services, get_services

router = APIRouter(tags=["graphs"])
SERVICES = Depends(get_services)
VIEWER = Depends(role("viewer"))
EDITOR = Depends(role("editor"))


async def _check_owner(services: Services, graph_id: str, workspace: str) -> None:
    """404 when ``graph_id`` is a stored graph or draft of another workspace."""
    if await services.redis.exists(services.keys.graph(graph_id)):
        if await services.graphs.workspace_of(graph_id) != workspace:
            raise GraphNotFoundError(f"unknown graph {graph_id!r}", graph_id=graph_id)
    owner = await services.redis.hget(services.keys.draft(graph_id), "workspace")
    if owner is not None and owner != workspace:
        raise GraphNotFoundError(f"unknown graph {graph_id!r}", graph_id=graph_id)


def problem_of(graph: dict[str, Any], services: Services) -> dict[str, Any] | None:
    """The error a version save would refuse ``graph`` with, or None."""
    try:
        validate({**graph, "version": None}, services.registry, services.settings)
    except GraphError as exc:
        return exc.to_dict()
    return None


@router.put("/graphs/{graph_id}/draft")
async def save_draft(graph_id: GraphId, graph: dict[str, Any] = Body(...), services: Services = SERVICES,  # noqa: B008
                     who: Principal = EDITOR) -> dict[str, Any]:
    """Store the draft: ``{graph_id, saved_at, draft: true, problem}``; 422 for malformed
    JSON only (naming the node or edge)."""
    if not isinstance(graph, dict):
        raise GraphSchemaError(f"a graph must be a JSON object, got {type(graph).__name__}", graph_id=graph_id)
    raw = {**graph, "id": graph_id, "version": None}
    parse_graph(raw)
    await _check_owner(services, graph_id, who.workspace)
    now = time.time()
    ttl = services.settings.graph_ttl_s
    index = services.keys.workspace_drafts(who.workspace)
    async with services.redis.pipeline(transaction=True) as pipe:
        pipe.hset(services.keys.draft(graph_id), mapping={
            "graph": json.dumps(raw), "workspace": who.workspace, "saved_at": repr(now)})
        pipe.zadd(index, {graph_id: now})
        if ttl:
            pipe.expire(services.keys.draft(graph_id), ttl)
            pipe.expire(index, ttl)
        await pipe.execute()
    return {"graph_id": graph_id, "saved_at": now, "draft": True, "problem": problem_of(raw, services)}


@router.get("/graphs/{graph_id}/draft")
async def get_draft(graph_id: GraphId, services: Services = SERVICES, who: Principal = VIEWER) -> dict[str, Any]:
    """``{graph, saved_at, problem, stored}``: ``graph`` is null when there is no draft (a
    200 all the same: the console asks each time it opens a graph); ``stored`` says
    whether the graph also has saved versions."""
    await _check_owner(services, graph_id, who.workspace)
    stored = bool(await services.redis.exists(services.keys.graph(graph_id)))
    record = await services.redis.hgetall(services.keys.draft(graph_id))
    if not record:
        return {"graph": None, "saved_at": None, "problem": None, "stored": stored}
    graph = json.loads(record["graph"])
    return {"graph": graph, "saved_at": float(record["saved_at"]), "problem": problem_of(graph, services),
            "stored": stored}


@router.delete("/graphs/{graph_id}/draft", status_code=204)
async def delete_draft(graph_id: GraphId, services: Services = SERVICES, who: Principal = EDITOR) -> Response:
    """Drop the draft (204 also when there was none)."""
    await _check_owner(services, graph_id, who.workspace)
    async with services.redis.pipeline(transaction=True) as pipe:
        pipe.delete(services.keys.draft(graph_id))
        pipe.zrem(services.keys.workspace_drafts(who.workspace), graph_id)
        await pipe.execute()
    return Response(status_code=204)


@router.get("/drafts")
async def list_drafts(limit: int = Query(200, ge=1, le=1000), services: Services = SERVICES,
                      who: Principal = VIEWER) -> dict[str, Any]:
    """Drafts of the caller's workspace, newest first: ``{items: [{graph_id, name, saved_at}]}``."""
    index = services.keys.workspace_drafts(who.workspace)
    items = []
    entries = await services.redis.zrevrange(index, 0, limit - 1, withscores=True)
    for gid, saved_at in cast(list[tuple[str, float]], entries):
        raw = await services.redis.hget(services.keys.draft(gid), "graph")
        if raw is None:  # expired: drop it from the index too
            await services.redis.zrem(index, gid)
            continue
        items.append({"graph_id": gid, "name": json.loads(raw).get("name") or "", "saved_at": saved_at})
    return {"items": items}
