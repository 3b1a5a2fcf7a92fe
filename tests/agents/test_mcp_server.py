"""MCP Server node: an agent calls a tool of a real, confined stdio MCP server; commands
off the operator's allow-list and URLs the egress policy refuses never start or connect."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from orchestrator.host.sandbox import bwrap
from orchestrator.kernel.errors import EgressDeniedError, ParameterError
from orchestrator.settings import Settings, load_settings
from tests.agents.conftest import data_in, drain, load_executor, make_ctx

agent = load_executor("agents/agent")
mcp_server = load_executor("tools/mcp_server")
SERVER = Path(__file__).with_name("mcp_echo_server.py")
# The server reports who and where it runs, through its echo tool's own process.
PROBE = Path(__file__).with_name("mcp_probe_server.py")


async def test_agent_calls_the_echo_tool_of_a_stdio_mcp_server(allow_python: None) -> None:
    assert bwrap.unavailable(load_settings()) is None, "needs bubblewrap (.ci/system-deps installs it)"
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


async def test_by_default_no_stdio_command_may_run() -> None:
    assert not Settings().mcp_stdio_commands
    with pytest.raises(ParameterError, match="ORCH_MCP_STDIO_COMMANDS"):
        await mcp_server.materialize(
            {"transport": "stdio", "command": f"{sys.executable} {SERVER}"}, "tools",
            make_ctx("m1", node_type="mcp_server"))


async def test_a_command_off_the_allow_list_is_refused(allow_python: None) -> None:
    with pytest.raises(ParameterError, match="'python3' is not on the operator's allow-list"):
        await mcp_server.materialize(
            {"transport": "stdio", "command": "python3 -c 'import os; os.system(\"id\")'"},
            "tools", make_ctx("m1", node_type="mcp_server"))


async def test_an_allowed_server_runs_confined_with_only_the_named_environment(
    allow_python: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-worker-secret")
    tools = await mcp_server.materialize(
        {"transport": "stdio", "command": f"{sys.executable} {PROBE}", "timeout_s": 30,
         "env": {"GREETING": "hi"}},
        "tools", make_ctx("m1", node_type="mcp_server"))
    ctx = make_ctx(links={("a1", "tools"): [tools]}, session_id="mcp-probe")
    script = [{"call": "whoami", "args": {}}, {"say": "{tool_result}"}]
    _events, result = await drain(agent.execute(
        {"model": "dryrun:x", "prompt": "who are you", "script": script}, data_in({}), ctx))
    seen = json.loads(result.outputs["output"].value["response"])
    assert seen["uid"] == 65534
    # PWD comes from bubblewrap, LC_CTYPE from Python's own locale coercion (PEP 538).
    assert set(seen["env"]) - {"PWD", "LC_CTYPE"} == {"GREETING", "HOME", "PATH"}
    assert seen["env"]["GREETING"] == "hi"
    assert "sk-fake-worker-secret" not in json.dumps(seen)
    assert seen["socket"].startswith("refused"), seen["socket"]  # no network by default
    assert seen["passwd"] == "absent" and os.getpid() not in seen["pids"]


async def test_a_streamable_http_url_to_loopback_is_refused_by_default() -> None:
    with pytest.raises(EgressDeniedError, match="ORCH_EGRESS_ALLOW"):
        await mcp_server.materialize(
            {"transport": "streamable-http", "url": "http://127.0.0.1:9/mcp"}, "tools",
            make_ctx("m1", node_type="mcp_server"))
