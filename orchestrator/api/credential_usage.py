"""``GET /credential-usage``: which stored graphs name each credential.

Nodes name a credential in a parameter (``credential``, or any parameter id ending in
``_credential``). This reads the latest version of every graph of the caller's workspace
and answers, per credential name, the graphs and nodes that name it, so the console's
credentials page can say where a credential is used before it is rotated or deleted. A
value holding an expression (``{{ }}``) is not a name and is not counted. Only names are
read: no credential value is touched. ``GET /credential-types`` gives the form the page
draws: each type's required and optional value names, which are secret, and whether it
takes origins.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends

from orchestrator.host.credentials import NO_ORIGINS, PUBLIC_VALUES, TYPES

from .auth import role
from .principal import Principal
from .services import Services, get_services

router = APIRouter(tags=["credentials"])
PAGE = 200  # graphs read per page of the workspace's index


def credential_parameters(node: dict[str, Any]) -> list[tuple[str, str]]:
    """``(parameter id, credential name)`` for each credential a node JSON names."""
    out = []
    for key, value in (node.get("data") or {}).items():
        named = key == "credential" or key.endswith("_credential")
        if named and isinstance(value, str) and value.strip() and "{{" not in value:
            out.append((key, value.strip()))
    return out


@router.get("/credential-usage")
async def credential_usage(services: Services = Depends(get_services),  # noqa: B008
                           who: Principal = Depends(role("viewer"))) -> dict[str, Any]:  # noqa: B008
    """``{usage: {credential name: [{graph_id, graph_name, node_id, node_name, parameter}]}}``."""
    usage: dict[str, list[dict[str, Any]]] = {}
    offset = 0
    while True:
        page, total = await services.graphs.page(offset, PAGE, workspace=who.workspace)
        for summary in page:
            raw = await services.redis.get(services.keys.graph_version(summary.id, summary.version))
            if raw is None:
                continue
            graph = json.loads(raw)
            for node in graph.get("nodes") or []:
                for parameter, name in credential_parameters(node):
                    usage.setdefault(name, []).append({
                        "graph_id": summary.id, "graph_name": summary.name, "node_id": node.get("id"),
                        "node_name": node.get("name") or node.get("id"), "parameter": parameter})
        offset += PAGE
        if offset >= total:
            return {"usage": usage}


@router.get("/credential-types")
async def credential_types(who: Principal = Depends(role("viewer"))) -> dict[str, Any]:  # noqa: B008
    """``{types: [{type, required, optional, secret: [value names], origins: bool}]}``."""
    return {"types": [
        {"type": name, "required": list(required), "optional": list(optional),
         "secret": [v for v in (*required, *optional) if v not in PUBLIC_VALUES], "origins": name not in NO_ORIGINS}
        for name, (required, optional) in TYPES.items()]}
