"""Workflow Tool: a stored graph offered to an agent as one tool (``nodes/_ai/workflow_tools.py``,
imported with Agno when the tool is materialized, not at node discovery)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import FlowContext

if TYPE_CHECKING:
    from nodes._ai.workflow_tools import WorkflowTool

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what model providers accept as a function name


class WorkflowToolExecutor:
    node_type = "workflow_tool"

    async def materialize(self, data: dict[str, Any], output_handle: str, ctx: FlowContext) -> WorkflowTool:
        where: dict[str, Any] = {"node_id": ctx.node_id, "node_name": ctx.node_name}
        name = str(data.get("tool_name") or "").strip()
        if not TOOL_NAME.match(name):
            raise ParameterError(f"parameter 'tool_name' must be 1-64 letters, digits, _ or -; got {name!r}",
                                 parameter="tool_name", **where)
        graph_id = str(data.get("graph_id") or "").strip()
        if not graph_id:
            raise ParameterError("parameter 'graph_id': name the stored graph to offer", parameter="graph_id", **where)
        version = data.get("version")
        if version in (None, ""):
            version = None
        elif isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ParameterError(f"parameter 'version' must be a version number, not {version!r}",
                                 parameter="version", **where)
        from nodes._ai.workflow_tools import WorkflowTool

        return WorkflowTool(tool_name=name, description=str(data.get("description") or name), graph_id=graph_id,
                            version=version)


executor = WorkflowToolExecutor()
