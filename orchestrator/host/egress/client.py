"""The egress policy for httpx clients (the node clients: HTTP Request, Document Loader,
Embedding).

:func:`egress_client` gives an ``httpx.AsyncClient`` whose transport's pool opens every TCP
connection through :class:`orchestrator.host.egress.policy.GuardedConnects` (resolved and
checked after DNS, on the address actually connected to), follows no redirect unless
asked, and ignores proxies from the environment (``trust_env=False``: a proxy would
connect on our behalf). ``httpx2.py`` is the same for httpx2.

Kept apart from ``policy.py`` because importing httpx and httpcore costs about 0.25 s of
CPU, which only processes whose nodes send requests should pay: every worker and CLI
process imports the policy with the node host at node discovery.
"""

from __future__ import annotations

import functools
import ssl
from types import ModuleType
from typing import Any, ClassVar

import httpcore
import httpx

from orchestrator.host.egress.policy import EgressPolicy, GuardedConnects, guarded


class _GuardedBackend(GuardedConnects, httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the policy applied to every TCP connect."""

    engine: ClassVar[ModuleType] = httpcore


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings of every httpx client built here, built once per process.

    Building one loads the CA bundle: 70-90 ms of CPU each on a busy two-core host.
    A client per node step paid that on the event loop every node step of a worker shares,
    so a hundred steps starting at once held the loop for seconds (longer than a 5 s
    connect timeout of the steps already connecting). Same settings as httpx's default
    (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured); the clients here speak HTTP/1.1 only,
    so the ALPN that httpcore sets on it per connection is always the same."""
    return httpx.create_ssl_context()


def egress_client(policy: EgressPolicy, **kwargs: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for node traffic: every connection passes ``policy`` (a
    node's comes from its host: ``NodeHost.egress_policy``); environment proxies are not used."""
    kwargs.setdefault("follow_redirects", False)
    # the client ignores ``limits`` when given a transport: the transport takes them
    pool = {"limits": kwargs.pop("limits")} if "limits" in kwargs else {}
    transport = guarded(httpx.AsyncHTTPTransport(verify=tls_context(), **pool), _GuardedBackend(policy))
    return httpx.AsyncClient(transport=transport, trust_env=False, **kwargs)
