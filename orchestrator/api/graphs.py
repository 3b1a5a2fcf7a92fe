"""``/graphs``: create, read (latest or a version), update (new version), delete, list.

Each save validates the graph with the node registry; a ``GraphError`` comes back as 422
naming the node, edge, handle or parameter. Reads validate again.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Query, Response

from .auth import role
from .launch import record_json, workspace_of_run
from .models import GraphId, WebhookSecret
from .principal import Principal
from .services import Services, get_services
from .triggers import check_secret_env

router = APIRouter(prefix="/graphs", tags=["graphs"])

GraphBody = Body(..., description="graph JSON: {id?, name, nodes, edges, settings}")
SERVICES = Depends(get_services)
VIEWER = Depends(role("viewer"))
EDITOR = Depends(role("editor"))


@router.post("", status_code=201)
async def create_graph(graph: dict[str, Any] = GraphBody, services: Services = SERVICES,
                       who: Principal = EDITOR) -> dict[str, Any]:
    """Save a new graph (version 1). The id is the JSON's ``id`` or generated."""
    check_secret_env(graph, services.settings)
    return await services.graphs.create(graph, workspace=who.workspace)


@router.post("/validate")
async def validate_graph(graph: dict[str, Any] = GraphBody, services: Services = SERVICES) -> dict[str, Any]:
    """Validate a graph without saving it: ``{valid: true, graph}`` (normalized JSON), or
    ``{valid: false, error}`` with the error a save would answer 422 with, naming the node,
    edge, handle or parameter (cycles carry their ``path``; an expression naming a node
    that is not upstream is an ``UpstreamReferenceError``). A 200 either way: the question
    was answered."""
    from orchestrator.kernel.errors import GraphError, GraphSchemaError
    from orchestrator.service.graph_store import validate

    try:
        if not isinstance(graph, dict):
            raise GraphSchemaError(f"a graph must be a JSON object, got {type(graph).__name__}")
        check_secret_env(graph, services.settings)
        normalized = validate({**graph, "version": None}, services.graphs.registry, services.graphs.settings)
    except GraphError as exc:
        return {"valid": False, "error": exc.to_dict()}
    return {"valid": True, "graph": normalized}


@router.get("")
async def list_graphs(
    offset: int = Query(0, ge=0, le=1_000_000),
    limit: int = Query(50, ge=1, le=500),
    services: Services = SERVICES,
    who: Principal = VIEWER,
) -> dict[str, Any]:
    """Graphs, most recently updated first: ``{items, total, offset, limit}``."""
    page, total = await services.graphs.page(offset, limit, workspace=who.workspace)
    return {"items": [g.to_json() for g in page], "total": total, "offset": offset, "limit": limit}


@router.get("/{graph_id}")
async def get_graph(
    graph_id: GraphId,
    version: int | None = Query(None, ge=1, le=1_000_000_000),
    services: Services = SERVICES,
    who: Principal = VIEWER,
) -> dict[str, Any]:
    """The latest version, or ``?version=n``."""
    return await services.graphs.get(graph_id, version, workspace=who.workspace)


@router.put("/{graph_id}")
async def update_graph(
    graph_id: GraphId,
    graph: dict[str, Any] = GraphBody,
    base_version: int | None = Query(None, ge=1, le=1_000_000_000),
    services: Services = SERVICES,
    who: Principal = EDITOR,
) -> dict[str, Any]:
    """Save a new version; older versions stay readable. With ``?base_version=n`` (the
    version the caller edited) the answer is 409 when another save came in between."""
    check_secret_env(graph, services.settings)
    return await services.graphs.update(graph_id, graph, base_version, workspace=who.workspace)


@router.delete("/{graph_id}", status_code=204)
async def delete_graph(graph_id: GraphId, services: Services = SERVICES, who: Principal = EDITOR) -> Response:
    await services.graphs.delete(graph_id, workspace=who.workspace)
    return Response(status_code=204)


@router.get("/{graph_id}/versions")
async def graph_versions(graph_id: GraphId, services: Services = SERVICES, who: Principal = VIEWER) -> dict[str, Any]:
    return {"graph_id": graph_id, "versions": await services.graphs.versions(graph_id, workspace=who.workspace)}


@router.put("/{graph_id}/webhook-secret", status_code=204)
async def set_webhook_secret(graph_id: GraphId, body: WebhookSecret, services: Services = SERVICES,
                             who: Principal = EDITOR) -> Response:
    """Store the HMAC secret for this graph's webhooks (never returned by any endpoint)."""
    await services.graphs.set_webhook_secret(graph_id, body.secret, workspace=who.workspace)
    return Response(status_code=204)


@router.get("/{graph_id}/runs")
async def graph_runs(
    graph_id: GraphId,
    offset: int = Query(0, ge=0, le=1_000_000),
    limit: int = Query(50, ge=1, le=500),
    services: Services = SERVICES,
    who: Principal = VIEWER,
) -> dict[str, Any]:
    """Runs of this graph, newest first (expired runs are left out)."""
    from orchestrator.kernel.errors import RunNotFoundError

    items: list[dict[str, Any]] = []
    for run_id in await services.graphs.runs(graph_id, offset, limit, workspace=who.workspace):
        try:
            record = await services.runs.get_run(run_id)
        except RunNotFoundError:
            continue
        # A test step of a graph not saved yet lists its run under that id, which another
        # workspace may create later: only the caller's workspace's runs are shown.
        if workspace_of_run(record) == who.workspace:
            items.append(record_json(record))
    return {"graph_id": graph_id, "items": items, "offset": offset, "limit": limit}
