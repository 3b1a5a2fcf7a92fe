"""The egress policy for httpx2 clients (the engine of the OpenAI and MCP SDKs).

:func:`egress_client_httpx2` is :func:`orchestrator.host.egress.client.egress_client` for httpx2: an
``httpx2.AsyncClient`` whose transport's pool opens every TCP connection through
:class:`orchestrator.host.egress.policy.GuardedConnects` (resolved and checked after DNS, on the
address actually connected to), follows no redirect unless asked, and ignores proxies
from the environment (``trust_env=False``: a proxy would connect on our behalf).

Kept apart from ``egress.py`` because importing httpx2 and httpcore2 costs about 0.1 s,
which only processes that call models or MCP servers should pay.
"""

from __future__ import annotations

import functools
import ssl
from types import ModuleType
from typing import Any, ClassVar

import httpcore2
import httpx2

from orchestrator.host.egress.policy import EgressPolicy, GuardedConnects, guarded


class _GuardedBackend(GuardedConnects, httpcore2.AsyncNetworkBackend):
    """httpcore2's network backend with the policy applied to every TCP connect."""

    engine: ClassVar[ModuleType] = httpcore2


@functools.cache
def tls_context_httpx2() -> ssl.SSLContext:
    """:func:`orchestrator.host.egress.client.tls_context` for httpx2 (why: there): a model
    client per agent step no longer loads the CA bundle on the worker's shared loop."""
    return httpx2.create_ssl_context()


def egress_client_httpx2(policy: EgressPolicy, **kwargs: Any) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` whose every connection passes ``policy`` (a node's comes
    from its host); environment proxies are not used; no redirects unless ``follow_redirects``."""
    kwargs.setdefault("follow_redirects", False)
    # the client ignores ``limits`` when given a transport: the transport takes them
    pool = {"limits": kwargs.pop("limits")} if "limits" in kwargs else {}
    transport = guarded(httpx2.AsyncHTTPTransport(verify=tls_context_httpx2(), **pool), _GuardedBackend(policy))
    return httpx2.AsyncClient(transport=transport, trust_env=False, **kwargs)
