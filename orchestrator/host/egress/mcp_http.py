"""The HTTP client of MCP connections: httpx2 whose every TCP connect passes the egress policy.

The MCP SDK and fastmcp's ``StreamableHttpTransport`` speak ``httpx2`` (a fork of httpx
whose transport runs on ``httpcore2``) and take a client factory. :func:`mcp_http_client`
is that factory with the SDK's semantics (``mcp.shared._httpx_utils.create_mcp_http_client``:
30 s to connect, write and wait for the pool, 300 s to read, because a server may hold a
response stream open; the client follows no redirect, the SDK follows those within the
endpoint's origin itself, each one a new request through the same transport) plus:

- the egress policy's httpx2 client (``orchestrator/host/egress/httpx2.py``): every TCP
  connection is resolved and checked after DNS, on the address actually connected to (the
  first, each redirect hop, the SDK's second stream, a reconnect), so a DNS answer that
  changes after a first check is checked again; environment proxies are not used.
"""

from __future__ import annotations

import httpx2
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT

from orchestrator.host.egress.httpx2 import egress_client_httpx2
from orchestrator.host.egress.policy import EgressPolicy


def mcp_http_client(policy: EgressPolicy, headers: dict[str, str] | None = None,
                    timeout: httpx2.Timeout | None = None,
                    auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
    """``create_mcp_http_client(headers, timeout, auth)`` whose connections pass ``policy``."""
    if timeout is None:
        timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    return egress_client_httpx2(policy, headers=headers, timeout=timeout, auth=auth)
