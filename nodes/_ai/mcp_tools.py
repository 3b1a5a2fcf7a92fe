"""The MCP Server node's toolkit: Agno's ``MCPTools`` with its connection under our rules.

Agno's lifecycle is kept: an unconnected toolkit is connected by the agent's ``arun`` and
closed when the run ends (``close`` exits the ``fastmcp.Client`` stored in
``_session_context``); each toolkit owns its connection, so agents running concurrently
on one event loop share nothing. :class:`NodeMCPTools` changes three things:

- **streamable HTTP through the egress policy.** Agno builds its own ``fastmcp.Client``
  whose httpx2 client connects wherever DNS points. :meth:`NodeMCPTools._connect` builds
  the client itself, over ``StreamableHttpTransport`` with the httpx2 client of
  :func:`orchestrator.host.egress.mcp_http.mcp_http_client`: every TCP connection (the first, a
  redirect the SDK follows, the SDK's second stream, a reconnect) is checked after DNS,
  on the address connected to. Agno's own builder reads its settings through
  ``_connection_params``; that call is refused for HTTP, so an Agno upgrade that builds
  the connection somewhere else fails to connect instead of connecting around the policy
  (tests/agents/test_mcp_http.py also shows a refused redirect target and a rebound name
  stay unreached through a real agent run).
- **a failed tool listing closes the connection.** Agno's ``initialize`` logs a failure
  to list the tools and returns; ``close`` then skips the uninitialized toolkit, so the
  connection, for stdio a server process, would live until the worker exits.
- **why a connection failed** is kept on ``connect_error`` (Agno only logs it; the agent
  then runs without the server's tools).
"""

from __future__ import annotations

from typing import Any

import httpx2
from agno.tools.mcp import MCPTools
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

from orchestrator.host.egress.mcp_http import mcp_http_client
from orchestrator.host.egress.policy import EgressPolicy


class NodeMCPTools(MCPTools):
    """``MCPTools`` for stdio or streamable HTTP; HTTP needs ``policy``."""

    def __init__(self, *, policy: EgressPolicy | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.transport not in ("stdio", "streamable-http"):
            raise ValueError("the MCP Server node speaks stdio or streamable-http")
        if self.transport != "stdio" and policy is None:
            raise ValueError("an MCP connection over HTTP needs an egress policy")
        self.policy = policy
        self.connect_error: Exception | None = None

    def _http_client(self, headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
                     auth: httpx2.Auth | None = None, **_: Any) -> httpx2.AsyncClient:
        # fastmcp passes follow_redirects=True and a read timeout derived from the session
        # timeout; like Agno, keep the SDK's 300 s read for held streams (the session
        # timeout still bounds each request) and let the SDK follow its own redirects.
        assert self.policy is not None
        return mcp_http_client(self.policy, headers=headers, auth=auth)

    async def _connect_http(self) -> None:
        assert self.url is not None
        transport = StreamableHttpTransport(self.url, headers=self._merge_http_headers() or None,
                                            httpx_client_factory=self._http_client)
        client = Client(transport, timeout=float(self.timeout_seconds), mode=self.protocol_mode)
        # Stored where Agno's close() and __aexit__ look for it, as Agno's _connect does.
        self._session_context = client  # type: ignore[assignment]
        self.session = await client.__aenter__()  # type: ignore[no-untyped-call]
        self._active_contexts.append(client)
        await self.initialize()

    async def _connect(self) -> None:
        if self._initialized:
            return
        try:
            await (self._connect_http() if self.transport != "stdio" else super()._connect())
        except Exception as exc:
            self.connect_error = exc
            raise  # Agno's connect() logs it and unwinds the connection
        if not self._initialized:
            await self._safe_cleanup()

    async def build_tools(self) -> None:
        try:
            await super().build_tools()
        except Exception as exc:
            self.connect_error = exc
            raise

    def _connection_params(self, extra_headers: dict[str, Any] | None = None) -> dict[str, Any]:
        if self.transport != "stdio":
            raise RuntimeError("NodeMCPTools connects over HTTP only through its own _connect; "
                               "Agno tried to build an unguarded connection (an Agno upgrade?)")
        params: dict[str, Any] = super()._connection_params(extra_headers)
        return params
