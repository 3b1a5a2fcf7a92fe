"""Toolset: materializes registered toolkits (``nodes._ai.toolkits``) for an agent.

``toolkits`` names toolkits; ``requires_approval`` names tools that pause the run for a
human decision. An unknown toolkit or tool name is a ``ParameterError`` naming the node.
Agno loads when a toolset is materialized, not at node discovery.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import FlowContext

if TYPE_CHECKING:
    from agno.tools import Toolkit


def _names(raw: Any, parameter: str, ctx: FlowContext) -> list[str]:
    value = json.loads(raw) if isinstance(raw, str) and raw.strip().startswith("[") else raw
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ParameterError(f"{parameter} must be a list of names", node_id=ctx.node_id,
                             node_name=ctx.node_name, parameter=parameter)
    return value


class ToolsetExecutor:
    node_type = "toolset"

    async def materialize(self, data: dict[str, Any], output_handle: str,
                          ctx: FlowContext) -> list[Toolkit]:
        from nodes._ai.toolkits import build_toolkit

        names = _names(data.get("toolkits"), "toolkits", ctx)
        approval = _names(data.get("requires_approval"), "requires_approval", ctx)
        try:
            kits = [build_toolkit(name, approval) for name in names]
        except ParameterError as exc:
            exc.node_id, exc.node_name = ctx.node_id, ctx.node_name
            raise
        known = {fn for kit in kits for fn in kit.functions} | {
            fn for kit in kits for fn in getattr(kit, "async_functions", {})}
        unknown = [n for n in approval if n not in known]
        if unknown:
            raise ParameterError(f"requires_approval names unknown tools {unknown}; "
                                 f"these toolkits offer {sorted(known)}", node_id=ctx.node_id,
                                 node_name=ctx.node_name, parameter="requires_approval")
        return kits


executor = ToolsetExecutor()
