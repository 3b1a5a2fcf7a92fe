"""Agno's OpenAI models, talking to one checked endpoint through the egress policy.

:func:`openai_model` builds Agno's ``OpenAIChat`` / ``OpenAILike`` for an
:class:`~orchestrator.host.endpoint.Endpoint` (which server, which key: ``endpoint.py``). The
model's OpenAI client is given an httpx2 client (the SDK's engine) that:

* opens every connection through the egress policy, after DNS, on the address connected
  to (``orchestrator/host/egress/httpx2.py``), with the endpoint's host allowed when the
  operator configured it;
* follows no redirect, and refuses any request whose origin is not the endpoint's (the
  SDK builds URLs from the base URL; this makes "the key goes to this origin" hold for
  every request rather than by construction);
* towards an endpoint the operator did not configure (a credential's server), drops the
  headers the SDK fills from the worker's environment (``OpenAI-Organization`` and
  ``OpenAI-Project`` from ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID``, anything from
  ``OPENAI_CUSTOM_HEADERS``) and any other header carrying an operator secret, and sends
  exactly ``Authorization: Bearer <the credential's key>``;
* asks the node execution's flow gate before each request (the endpoint's provider limits,
  cluster-wide) and tells it a 429 (``orchestrator/host/flow.py``): a request that must
  wait raises ``WaitRequested`` and the node is rescheduled with its slot free.

Only the async client exists: Agno's synchronous calls (``Agent.run``) are refused, as
nodes always run models asynchronously. The client is closed when the model is collected
(as the SDK does for the clients it builds itself).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
from agno.models.base import Model
from agno.models.openai import OpenAIChat
from agno.models.openai.like import OpenAILike
from openai import DEFAULT_CONNECTION_LIMITS, DEFAULT_TIMEOUT, AsyncOpenAI, OpenAI

from orchestrator.host.egress.httpx2 import egress_client_httpx2
from orchestrator.host.egress.origins import Origin
from orchestrator.host.egress.policy import EgressPolicy
from orchestrator.host.endpoint import Endpoint
from orchestrator.host.flow import FlowGate
from orchestrator.host.http import retry_after_s
from orchestrator.kernel.errors import EgressDeniedError

# Headers the OpenAI SDK fills from the worker's environment.
ENVIRONMENT_HEADERS = frozenset({"openai-organization", "openai-project"})
SYNC_REFUSED = "synchronous model calls are not supported in nodes; run the agent with arun"


def http_client(endpoint: Endpoint, policy: EgressPolicy, secrets: Callable[[], list[str]],
                gate: FlowGate | None = None) -> httpx2.AsyncClient:
    """The httpx2 client of one model (see the module docstring); ``secrets``: the host's
    operator secrets (``NodeHost.operator_secrets``), asked at each request; ``gate``: the
    node execution's flow gate (None: no limits)."""

    async def guard(request: httpx2.Request) -> None:
        origin = Origin.of(str(request.url))
        if origin != endpoint.origin:
            raise EgressDeniedError(f"the model client of {endpoint.origin} refused a request to {origin}")
        if endpoint.operator:
            return
        found = secrets()
        for name in list(request.headers):
            value = request.headers[name]
            if name.lower() in ENVIRONMENT_HEADERS or any(s in value for s in found):
                del request.headers[name]
        request.headers["Authorization"] = f"Bearer {endpoint.api_key}"

    async def flow_before(request: httpx2.Request) -> None:
        if gate is not None and endpoint.limits is not None:
            await gate.before(endpoint.limits, request.content)

    async def flow_after(response: httpx2.Response) -> None:
        if response.status_code == 429 and gate is not None and endpoint.limits is not None:
            await response.aclose()
            await gate.refused(endpoint.limits, retry_after_s(response.headers.get("retry-after")))

    return egress_client_httpx2(policy, timeout=DEFAULT_TIMEOUT, limits=DEFAULT_CONNECTION_LIMITS,
                                event_hooks={"request": [guard, flow_before], "response": [flow_after]})


@dataclass(frozen=True)
class EndpointAccess:
    """How a model client reaches its ``endpoint``: where its requests may go
    (``egress``), the host's operator ``secrets`` (never sent to an endpoint the operator
    did not configure), and the node execution's flow ``gate`` (provider limits and 429s)."""

    endpoint: Endpoint
    egress: EgressPolicy
    secrets: Callable[[], list[str]]
    gate: FlowGate | None = None


class EndpointOpenAIChat(OpenAIChat):
    """``OpenAIChat`` whose only client is :func:`http_client` of its endpoint."""

    endpoint: Endpoint
    egress: EgressPolicy
    secrets: Callable[[], list[str]]
    gate: FlowGate | None = None

    def get_client(self) -> OpenAI:
        raise RuntimeError(SYNC_REFUSED)

    def get_async_client(self) -> AsyncOpenAI:
        if self.async_client is not None and not self.async_client.is_closed():
            return self.async_client
        params: dict[str, Any] = self._get_client_params()
        params["http_client"] = http_client(self.endpoint, self.egress, self.secrets, self.gate)
        self.async_client = AsyncOpenAI(**params)
        return self.async_client

    def __del__(self) -> None:
        client = self.async_client
        if client is None or client.is_closed():
            return
        try:
            asyncio.get_running_loop().create_task(client.close())
        except RuntimeError:  # no loop left: the process is ending
            pass


class EndpointOpenAILike(EndpointOpenAIChat, OpenAILike):
    """``OpenAILike`` (sends ``system``, tolerates no key) with the same client."""


def openai_model(provider: str, model_id: str, access: EndpointAccess) -> Model:
    """Agno's model for ``openai-chat`` / ``openai-like`` at ``access.endpoint``."""
    endpoint = access.endpoint
    kwargs: dict[str, Any] = {"id": model_id, "base_url": endpoint.base_url, "max_retries": 0}
    model: EndpointOpenAIChat
    if provider == "openai-like":
        model = EndpointOpenAILike(api_key=endpoint.api_key or "not-provided", **kwargs)
    else:
        # No key: Agno looks for OPENAI_API_KEY, which resolve_endpoint already read for
        # the operator's endpoints (the only ones that can come without a key).
        model = EndpointOpenAIChat(api_key=endpoint.api_key or None, **kwargs)
    model.endpoint, model.egress, model.secrets, model.gate = endpoint, access.egress, access.secrets, access.gate
    return model
