"""MCP Server: materializes an unconnected Agno toolkit (``nodes/_ai/mcp_tools.NodeMCPTools``).

The agent's ``arun`` connects it and closes it when the run ends, so no connection
outlives a node execution (a worker may run any node of any run next); a connection
whose tool listing fails is closed at once.

The graph does not choose what runs or where the worker connects; the operator does:

- stdio: the command's program must be on ``ORCH_MCP_STDIO_COMMANDS`` (empty = no stdio
  server at all); it runs inside the OS-level boundary of ``nodes/_shared/command``
  (namespaces, uid 65534, read-only file system without host sockets, no network unless
  ``ORCH_MCP_STDIO_NETWORK``, a seccomp program that refuses the kernel interfaces that
  cross the boundary, resource limits ``ORCH_MCP_STDIO_*``) with only ``env`` plus a fixed
  PATH and HOME, never the worker's own environment, which holds secrets.
- streamable-http: every TCP connection the MCP client opens passes the egress policy
  (``orchestrator/host/egress/policy.py``) at connect time, after DNS resolution, on the address
  actually connected to: redirects the SDK follows and a DNS answer that changes after a
  first check are checked again. The URL is also checked once when the server is
  materialized, so a refused URL fails the node with the policy's error (a refusal at
  connect time is logged by Agno and the agent runs without the server's tools; the
  toolkit keeps it on ``connect_error``).

``agno.tools.mcp`` is imported when a server is materialized, not at discovery: it costs
seconds of start-up in every worker and CLI process otherwise.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from orchestrator.host.node_host import node_host
from orchestrator.host.sandbox.command import CommandRefused, confined_command
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import FlowContext

if TYPE_CHECKING:
    from nodes._ai.mcp_tools import NodeMCPTools


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
                          ctx: FlowContext) -> NodeMCPTools:
        from mcp import StdioServerParameters

        from nodes._ai.mcp_tools import NodeMCPTools
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
            named = {str(k): str(v) for k, v in (env or {}).items()}
            try:
                confined = confined_command(command, named, node_host(ctx).settings)
            except CommandRefused as exc:
                raise bad(str(exc), "command") from exc
            params = StdioServerParameters(command=confined.program, args=confined.args,
                                           env=confined.env)
            return NodeMCPTools(server_params=params, transport="stdio", **common)
        policy = node_host(ctx).egress_policy()
        await policy.check_url(url)  # EgressDeniedError names the settings
        return NodeMCPTools(url=url, transport="streamable-http", policy=policy, **common)


executor = McpServerExecutor()
