"""MCP Server: materializes an unconnected Agno ``MCPTools``.

The agent's ``arun`` connects it and closes it when the run ends, so no connection
outlives a node execution (a worker may run any node of any run next). A stdio server gets
the MCP SDK's minimal default environment (PATH, HOME, ...) plus ``env`` — never the
worker's own environment, which holds secrets.

``agno.tools.mcp`` is imported when a server is materialized, not at discovery: it costs
seconds of start-up in every worker and CLI process otherwise.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import FlowContext

if TYPE_CHECKING:
    from agno.tools.mcp import MCPTools


def _list(raw: Any, parameter: str, ctx: FlowContext) -> list[str] | None:
    value = json.loads(raw) if isinstance(raw, str) and raw.strip() else raw
    if value in (None, "", []):
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ParameterError(f"{parameter} must be a list of tool names", node_id=ctx.node_id,
                             node_name=ctx.node_name, parameter=parameter)
    return value


class McpServerExecutor:
    node_type = "mcp_server"

    async def materialize(self, data: dict[str, Any], output_handle: str,
                          ctx: FlowContext) -> MCPTools:
        from agno.tools.mcp import MCPTools
        from mcp.client.stdio import get_default_environment
        transport = str(data.get("transport") or "stdio")
        command = str(data.get("command") or "").strip()
        url = str(data.get("url") or "").strip()

        def bad(message: str, parameter: str) -> ParameterError:
            return ParameterError(message, node_id=ctx.node_id, node_name=ctx.node_name,
                                  parameter=parameter)

        if transport == "stdio" and not command:
            raise bad("a stdio MCP server needs a command", "command")
        if transport == "streamable-http" and not url:
            raise bad("a streamable-http MCP server needs a url", "url")
        env = data.get("env") or None
        if isinstance(env, str):
            env = json.loads(env)
        if env is not None and not isinstance(env, dict):
            raise bad("env must be an object of names to values", "env")
        common: dict[str, Any] = {
            "timeout_seconds": int(data.get("timeout_s") or 10),
            "include_tools": _list(data.get("include_tools"), "include_tools", ctx),
            "exclude_tools": _list(data.get("exclude_tools"), "exclude_tools", ctx),
        }
        if transport == "stdio":
            full_env = {**get_default_environment(), **{str(k): str(v) for k, v in (env or {}).items()}}
            return MCPTools(command=command, transport="stdio", env=full_env, **common)
        return MCPTools(url=url, transport="streamable-http", **common)


executor = McpServerExecutor()
