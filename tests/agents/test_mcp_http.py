"""MCP over streamable HTTP through the MCP Server node: every TCP connection the MCP
client opens passes the egress policy at connect time, after DNS. Real servers on
loopback: an MCP server (fastmcp) on 127.0.0.1, which ORCH_EGRESS_ALLOW allows, and a
listener on 127.0.0.2 (loopback too, not allowed) that records every connection it gets.
Each refusal has a control: the same run without the guard reaches 127.0.0.2."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from agno.tools.mcp import MCPTools
from fastmcp import FastMCP
from mcp.shared._httpx_utils import create_mcp_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route

from nodes._ai import mcp_tools
from orchestrator.host.egress.mcp_http import mcp_http_client
from orchestrator.host.egress.policy import EgressPolicy
from orchestrator.kernel.errors import EgressDeniedError
from orchestrator.settings import get_settings
from tests.agents.conftest import call_tool, load_executor, make_ctx
from tests.support.servers import serve_in_thread

mcp_server = load_executor("tools/mcp_server")
REFUSED = "127.0.0.2"  # loopback, not on ORCH_EGRESS_ALLOW
NAME = "mcp.test"  # a host name the tests resolve themselves


def echo_app() -> Starlette:
    """An MCP server with one tool, echo, at /mcp; /redirect answers 307 to /mcp and closes
    the connection (the SDK follows it on a new one); /away answers 307 to 127.0.0.2."""
    server = FastMCP("echo")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text prefixed with 'echo: '."""
        return f"echo: {text}"

    mcp_app = server.http_app(path="/mcp", host_origin_protection=False)

    async def redirect(request: Request) -> RedirectResponse:
        return RedirectResponse("/mcp", status_code=307, headers={"Connection": "close"})

    async def away(request: Request) -> RedirectResponse:
        port = request.url.port
        return RedirectResponse(f"http://{REFUSED}:{port}/mcp", status_code=307)

    return Starlette(routes=[Route("/redirect", redirect, methods=["GET", "POST", "DELETE"]),
                             Route("/away", away, methods=["GET", "POST", "DELETE"]),
                             Mount("/", mcp_app)], lifespan=mcp_app.lifespan)


@dataclass
class Servers:
    port: int
    refused_hits: list[tuple[str, int]] = field(default_factory=list)  # peers 127.0.0.2 accepted


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[Servers]:
    monkeypatch.setenv("ORCH_EGRESS_ALLOW", "127.0.0.1")
    get_settings.cache_clear()
    with serve_in_thread(echo_app()) as base:
        out = Servers(int(base.rsplit(":", 1)[1]))
        listener = socket.create_server((REFUSED, out.port))
        listener.settimeout(0.2)
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    conn, peer = listener.accept()
                except TimeoutError:
                    continue
                out.refused_hits.append(peer)
                conn.close()

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            yield out
        finally:
            stop.set()
            thread.join(timeout=5)
            listener.close()
            get_settings.cache_clear()


@pytest.fixture
async def rebinding_name() -> AsyncIterator[list[str]]:
    """``mcp.test`` resolves (through the running loop's getaddrinfo, which the policy and
    anyio both use) to 127.0.0.1 twice, for the node's check at materialization and the
    first connection, then to 127.0.0.2. Returns the answers given, in order."""
    loop = asyncio.get_running_loop()
    real = loop.getaddrinfo
    answers: list[str] = []

    async def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in (NAME, NAME.encode()):
            answers.append("127.0.0.1" if len(answers) < 2 else REFUSED)
            host = answers[-1]
        return await real(host, port, *args, **kwargs)

    loop.getaddrinfo = getaddrinfo  # type: ignore[method-assign]
    yield answers
    loop.getaddrinfo = real  # type: ignore[method-assign]


@pytest.fixture
def without_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the node's toolkit gets the MCP SDK's own httpx2 client."""
    monkeypatch.setattr(mcp_tools, "mcp_http_client",
                        lambda policy, headers=None, auth=None: create_mcp_http_client(headers, auth=auth))


def messages(exc: BaseException | None) -> str:
    """Every message in an exception, its causes and (for groups) its members."""
    parts: list[str] = []
    pending = [exc]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        parts.append(str(item))
        pending += [item.__cause__, item.__context__, *getattr(item, "exceptions", ())]
    return " | ".join(parts)


def reported(tools: Any, caplog: pytest.LogCaptureFixture) -> str:
    """What the run reported about the connection: the toolkit's connect_error and the
    errors logged (the SDK logs a failed write of its post-writer task and hands the
    session only "Connection closed")."""
    logged = [messages(r.exc_info[1]) if r.exc_info else r.getMessage() for r in caplog.records]
    return " | ".join([messages(tools.connect_error), *logged])


POLICY_ERROR = "refused by the egress policy: 127.0.0.2 is a loopback address"


async def through_node(url: str) -> tuple[Any, str]:
    """Materialize the node for ``url``, run an agent that calls echo; (toolkit, answer)."""
    tools = await mcp_server.materialize({"transport": "streamable-http", "url": url, "timeout_s": 10},
                                         "tools", make_ctx("m1", node_type="mcp_server"))
    answer = await call_tool(tools, "echo", {"text": "hello http"})
    return tools, answer


async def test_an_agent_calls_a_tool_of_an_allowed_streamable_http_server(servers: Servers) -> None:
    tools, answer = await through_node(f"http://127.0.0.1:{servers.port}/mcp")
    assert "echo: hello http" in answer
    assert tools.connect_error is None and not tools.initialized  # closed with the run


async def test_agents_running_concurrently_on_one_loop_each_connect_and_close(
    servers: Servers,
) -> None:
    runs = await asyncio.gather(*(through_node(f"http://127.0.0.1:{servers.port}/mcp")
                                  for _ in range(5)))
    assert all("echo: hello http" in answer for _tools, answer in runs)
    assert not any(tools.initialized for tools, _answer in runs)


async def test_agnos_own_connection_builder_is_refused_for_http(servers: Servers) -> None:
    """If an Agno upgrade bypassed NodeMCPTools._connect, its own builder would connect
    without the guard: it fails instead."""
    tools = await mcp_server.materialize(
        {"transport": "streamable-http", "url": f"http://127.0.0.1:{servers.port}/mcp"},
        "tools", make_ctx("m1", node_type="mcp_server"))
    with pytest.raises(RuntimeError, match="unguarded connection"):
        await MCPTools._connect(tools)


# Where the rebound name is connected to a third time: the redirect the SDK follows on a
# new connection (/redirect answers 307 and closes), or the SDK's second connection.
AFTER_FIRST_CHECK = pytest.mark.parametrize("path", ["/redirect", "/mcp"],
                                            ids=["followed-redirect", "second-connection"])


@AFTER_FIRST_CHECK
async def test_a_name_that_resolves_to_a_refused_address_after_the_first_check_is_refused(
    servers: Servers, rebinding_name: list[str], caplog: pytest.LogCaptureFixture, path: str,
) -> None:
    tools, answer = await through_node(f"http://{NAME}:{servers.port}{path}")
    assert "echo: hello http" not in answer and tools.connect_error is not None
    assert POLICY_ERROR in reported(tools, caplog)
    assert rebinding_name[:3] == ["127.0.0.1", "127.0.0.1", REFUSED]
    assert servers.refused_hits == []


@AFTER_FIRST_CHECK
async def test_without_the_guard_the_same_connection_reaches_the_refused_address(
    servers: Servers, rebinding_name: list[str], without_guard: None, path: str,
) -> None:
    await through_node(f"http://{NAME}:{servers.port}{path}")
    assert servers.refused_hits


async def test_a_redirect_off_the_origin_is_not_followed_by_the_sdk(servers: Servers) -> None:
    """The MCP SDK follows redirects only within the endpoint's origin; 127.0.0.2 is
    another origin, so it is never connected to (the guard would refuse it anyway: next)."""
    tools, answer = await through_node(f"http://127.0.0.1:{servers.port}/away")
    assert "echo: hello http" not in answer and tools.connect_error is not None
    assert servers.refused_hits == []


async def test_a_client_that_follows_any_redirect_is_still_refused_at_connect(servers: Servers) -> None:
    policy = EgressPolicy.build(False, ["127.0.0.1"])
    async with mcp_http_client(policy) as client:
        with pytest.raises(EgressDeniedError, match=r"127\.0\.0\.2 is a loopback address"):
            await client.post(f"http://127.0.0.1:{servers.port}/away", follow_redirects=True)
    assert servers.refused_hits == []
    async with create_mcp_http_client() as unguarded:  # the control
        with pytest.raises(httpx2.HTTPError):
            await unguarded.post(f"http://127.0.0.1:{servers.port}/away", follow_redirects=True)
    assert servers.refused_hits


async def test_the_mcp_client_keeps_the_sdk_timeouts_and_ignores_environment_proxies(
    servers: Servers, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://{REFUSED}:{servers.port}")
    policy = EgressPolicy.build(False, ["127.0.0.1"])
    async with mcp_http_client(policy) as client, create_mcp_http_client() as sdk:
        assert client.timeout == sdk.timeout and not client.follow_redirects
        response = await client.get(f"http://127.0.0.1:{servers.port}/mcp")
    assert response.headers.get("server") == "uvicorn"  # answered by the server, not a proxy
    assert servers.refused_hits == []
