"""``/nodes``: every discovered node definition, and the socket type catalogue."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from orchestrator.kernel.sockets import COERCIONS, GENERIC_SOCKETS, socket_catalogue
from orchestrator.service.plugins import colour_of

from .services import Services, get_services

router = APIRouter(tags=["nodes"])


@router.get("/nodes")
async def list_nodes(services: Services = Depends(get_services)) -> dict[str, Any]:  # noqa: B008
    """``{nodes: [definition JSON + capabilities], sockets: [{id, label, color, shape}]}``."""
    nodes = []
    for node_type in services.registry:
        item = node_type.definition.model_dump(mode="json")
        item["color"] = colour_of(node_type.definition)  # by category unless the definition sets one
        item["capabilities"] = {
            "execute": node_type.can_execute,
            "materialize": node_type.can_materialize,
        }
        nodes.append(item)
    return {"nodes": nodes, "sockets": socket_catalogue()}


@router.get("/nodes/sockets")
async def socket_rules() -> dict[str, Any]:
    """The kernel's wiring rules, so the editor and the validator use one table:
    ``{types, generic, coercions: [[source, target], ...]}``. A wire may connect equal
    types, any pair in ``coercions``, or a ``generic`` type on either end."""
    return {
        "types": socket_catalogue(),
        "generic": sorted(GENERIC_SOCKETS),
        "coercions": sorted([source, target] for source, target in COERCIONS),
    }
