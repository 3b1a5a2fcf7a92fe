"""An agent calls a tool of a real MCP server started over stdio by the MCP Server node."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from orchestrator.kernel.errors import ParameterError
from tests.agents.conftest import data_in, drain, load_executor, make_ctx

agent = load_executor("agents/agent")
mcp_server = load_executor("tools/mcp_server")
SERVER = Path(__file__).with_name("mcp_echo_server.py")


async def test_agent_calls_the_echo_tool_of_a_stdio_mcp_server() -> None:
    tools = await mcp_server.materialize(
        {"transport": "stdio", "command": f"{sys.executable} {SERVER}", "timeout_s": 30},
        "tools", make_ctx("m1", node_type="mcp_server"))
    ctx = make_ctx(links={("a1", "tools"): [tools]}, session_id="mcp-1")
    script = [{"call": "echo", "args": {"text": "hello mcp"}}, {"say": "{tool_result}"}]
    events, result = await drain(agent.execute(
        {"model": "dryrun:x", "prompt": "echo please", "script": script}, data_in({}), ctx))
    completed = [e.data for e in events if (e.data or {}).get("event") == "ToolCallCompleted"]
    assert completed and completed[0]["tool"]["tool_name"] == "echo"
    assert "echo: hello mcp" in result.outputs["output"].value["response"]


async def test_a_stdio_server_without_a_command_is_a_parameter_error() -> None:
    with pytest.raises(ParameterError, match="needs a command"):
        await mcp_server.materialize({"transport": "stdio"}, "tools",
                                     make_ctx("m1", node_type="mcp_server"))
