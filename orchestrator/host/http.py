"""The HTTP client of the integration nodes: one request through the egress policy.

:func:`fetch` sends an :class:`HttpCall` with :func:`orchestrator.host.egress.client.egress_client`
(every connection, redirects included, checked after DNS), attaches a credential's auth,
reads at most ``max_bytes`` of the body, and translates httpx's errors into the error
tree. Statuses, when ``retry_statuses`` is on: a 429 raises ``WaitRequested`` through the
execution's flow gate (``orchestrator/host/flow.py``): the node waits ``Retry-After`` (capped
at ``MAX_RETRY_AFTER_S``) with its slot free, no attempt counted, and the origin's key
(``origin:<workspace>:<origin>``) is blocked and its rate cut for every node of the
workspace; each request first asks that key (unlimited until its first 429). 5xx raise
``RetryRequested`` (``Retry-After`` as the delay), so the node's retry policy decides
whether another attempt follows. Other 4xx/5xx raise
``NodeExecutionError`` when ``fail_on_status`` is on, else the response is returned.
Secret values of the credential are masked in every error message, and returned on the
response (``secrets``) so callers mask them in what they output.

Credentials go only where they are allowed (``Credential.refusal``: the origins an admin
set). The first request's URL must be allowed, else the node fails with a
``ParameterError`` naming the credential and the origin, before anything is sent.
:class:`CredentialAuth` then decides per request, as a request hook that httpx runs for
every hop of a redirect chain: it removes the credential's header and query key, and
puts them back only when that request's origin is allowed. A redirect to another origin
is followed without the credential (as browsers and httpx do for ``Authorization``, now
for every credential type); one within the allowed origins keeps it.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from orchestrator.host.credentials import Credential, mask
from orchestrator.host.egress.client import egress_client
from orchestrator.host.egress.origins import Origin
from orchestrator.host.flow import ProviderLimits, gate_for
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import (
    EgressDeniedError,
    NodeExecutionError,
    NodeTimeoutError,
    ParameterError,
    RetryRequested,
)
from orchestrator.kernel.protocol import FlowContext

AUTH_TYPES = ("bearer", "basic", "header", "query_key", "api_key")
MAX_RETRY_AFTER_S = 60.0
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass
class HttpCall:
    method: str
    url: str
    query: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None
    form: dict[str, Any] | None = None
    content: bytes | None = None
    timeout_s: float = 30.0
    follow_redirects: bool = True
    max_redirects: int = 5
    max_bytes: int = 32 << 20
    credential: str = ""
    fail_on_status: bool = True
    retry_statuses: bool = True


@dataclass
class HttpResponse:
    status: int
    headers: dict[str, str]
    content: bytes
    url: str
    elapsed_ms: float
    secrets: list[str] = field(default_factory=list)  # the credential's values, to mask in outputs
    credential: Credential | None = None  # the credential of the call (for its origins)


class CredentialAuth:
    """A credential attached to exactly the requests whose origin it allows (see the
    module docstring); ``attach`` is the request hook."""

    def __init__(self, credential: Credential) -> None:
        self.credential = credential
        v = credential.values
        self.headers: dict[str, str] = {}
        self.query: tuple[str, str] | None = None
        if credential.type == "bearer":
            self.headers["Authorization"] = f"Bearer {v['token']}"
        elif credential.type == "api_key":
            self.headers["Authorization"] = f"Bearer {v['key']}"
        elif credential.type == "header":
            self.headers[v["name"]] = v["value"]
        elif credential.type == "query_key":
            self.query = (v["name"], v["value"])
        elif credential.type == "basic":
            self.headers["Authorization"] = httpx.BasicAuth(v["username"], v["password"])._auth_header
        self.secrets = credential.secrets()
        if credential.type == "basic":  # the encoded pair is as secret as the password
            self.secrets.append(self.headers["Authorization"].split(" ", 1)[1])

    def check(self, url: httpx.URL) -> None:
        """A ParameterError when the credential may not go to ``url``."""
        refusal = self.credential.refusal(str(url))
        if refusal is not None:
            raise ParameterError(f"parameter 'credential': {refusal}", parameter="credential")

    async def attach(self, request: httpx.Request) -> None:
        for name in self.headers:
            request.headers.pop(name, None)
        if self.query is not None:
            pairs = request.url.params.multi_items()
            if self.query in pairs:
                request.url = httpx.URL(request.url, params=[p for p in pairs if p != self.query])
        if self.credential.refusal(str(request.url)) is not None:
            return  # another origin: this hop goes without the credential
        request.headers.update(self.headers)
        if self.query is not None:
            request.url = request.url.copy_set_param(*self.query)


def retry_after_s(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date), capped."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        seconds = parsed.timestamp() - time.time()
    return max(0.0, min(seconds, MAX_RETRY_AFTER_S))


def _origin_limits(workspace: str, url: str) -> ProviderLimits | None:
    """The flow-control key of ``url``'s origin in ``workspace`` (None: no origin to key on)."""
    try:
        return ProviderLimits(f"origin:{workspace}:{Origin.of(url)}")
    except ValueError:
        return None


async def fetch(ctx: FlowContext, call: HttpCall) -> HttpResponse:
    """Send ``call`` (see the module docstring)."""
    if not call.url.lower().startswith(("http://", "https://")):
        raise NodeExecutionError(f"parameter 'url' must be an http(s) URL; got {call.url!r}")
    host = node_host(ctx)
    auth: CredentialAuth | None = None
    if call.credential:
        auth = CredentialAuth(await host.credential(call.credential, AUTH_TYPES))
    secrets = auth.secrets if auth is not None else []
    hooks: dict[str, list[Any]] = {"request": [auth.attach]} if auth is not None else {}
    limits = _origin_limits(host.workspace, call.url) if call.retry_statuses else None
    if limits is not None:
        await gate_for(ctx).before(limits)
    started = time.perf_counter()
    try:
        async with egress_client(host.egress_policy(), timeout=httpx.Timeout(call.timeout_s),
                                 follow_redirects=call.follow_redirects,
                                 max_redirects=call.max_redirects, event_hooks=hooks) as client:
            request = client.build_request(call.method.upper(), call.url, params=call.query or None,
                                           headers=call.headers, json=call.json, data=call.form,
                                           content=call.content)
            if auth is not None:
                auth.check(request.url)
            response = await client.send(request, stream=True)
            try:
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > call.max_bytes:
                        raise NodeExecutionError(f"response body from {mask(call.url, secrets)} exceeds "
                                                 f"max_bytes ({call.max_bytes})")
                    chunks.append(chunk)
            finally:
                await response.aclose()
    except EgressDeniedError as exc:
        raise EgressDeniedError(mask(exc.message, secrets)) from None
    except httpx.TimeoutException:
        raise NodeTimeoutError(f"{call.method} {mask(call.url, secrets)} timed out after {call.timeout_s}s") from None
    except httpx.TooManyRedirects:
        raise NodeExecutionError(f"{call.method} {mask(call.url, secrets)}: more than {call.max_redirects} "
                                 "redirects") from None
    except httpx.HTTPError as exc:
        raise NodeExecutionError(mask(f"{call.method} {call.url} failed: {type(exc).__name__}: {exc}",
                                      secrets)) from None
    out = HttpResponse(response.status_code, {k.lower(): v for k, v in response.headers.items()},
                       b"".join(chunks), mask(str(response.url), secrets),
                       round((time.perf_counter() - started) * 1000, 1), secrets,
                       auth.credential if auth is not None else None)
    where = f"{call.method} {mask(call.url, secrets)}"
    if out.status == 429 and limits is not None:
        await gate_for(ctx).refused(limits, retry_after_s(out.headers.get("retry-after")))
    if out.status in RETRY_STATUSES and call.retry_statuses:
        raise RetryRequested(f"{where} answered {out.status}",
                             delay_s=retry_after_s(out.headers.get("retry-after")))
    if out.status >= 400 and call.fail_on_status:
        snippet = mask(out.content[:300].decode("utf-8", "replace"), secrets)
        raise NodeExecutionError(f"{where} answered {out.status}: {snippet}")
    return out
