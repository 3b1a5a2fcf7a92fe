"""Which OpenAI-compatible server a model or embedding node calls, and which key it sends.

The operator's key (``ORCH_OPENAI_API_KEY`` / ``OPENAI_API_KEY``, from the environment or
``ORCH_SECRETS_FILE``) goes only to the endpoints the operator configured: the default
(``ORCH_OPENAI_BASE_URL``; unset: ``OPENAI_BASE_URL``, else ``https://api.openai.com/v1``)
and each base URL of ``ORCH_MODEL_BASE_URLS``. A credential's key goes only to an origin
the credential allows (``orchestrator/host/credentials.py``). A graph picks among those:

=========================  ====================================  ===================
the node names             URL called                            key sent
=========================  ====================================  ===================
nothing                    the operator's default                the operator's
``base_url``               that URL, if the operator lists it    the operator's
``credential``             its ``base_url``, else the default    the credential's
``credential + base_url``  that URL, if the credential allows it  the credential's
=========================  ====================================  ===================

Anything else is a ``ParameterError`` naming the parameter and the setting. A base URL
the operator does not list is refused rather than called without a key: a keyless call
to a graph's server is what HTTP Request already does, while a model call that silently
drops the key fails later with a confusing 401 — and a refusal cannot leak. A workspace
with its own server stores an ``api_key`` credential holding that server's base URL.

Every request passes the egress policy (:meth:`Endpoint.policy`): the host of an operator
URL is allowed as configured (an Ollama on localhost), a credential's URL is checked like
any other (a workspace admin is not the operator). Model and embedding clients follow no
redirects, so a request reaches exactly the origin checked here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from orchestrator.host.egress.origins import Origin
from orchestrator.host.egress.policy import EgressPolicy
from orchestrator.host.flow import ProviderLimits, operator_limits
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import FlowContext
from orchestrator.settings import Settings

DEFAULT_BASE_URL = "https://api.openai.com/v1"
OPERATOR_KEYS = ("ORCH_OPENAI_API_KEY", "OPENAI_API_KEY")  # the first set one is the operator's key
CREDENTIAL_TYPES = ("api_key", "bearer")


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    api_key: str  # "" when the operator configured none
    operator: bool  # an endpoint the operator configured (its host passes the egress policy)
    credential: str = ""  # the credential whose key this is, or ""
    limits: ProviderLimits | None = None  # the provider limits its calls share (host/flow.py)

    @property
    def origin(self) -> Origin:
        return Origin.of(self.base_url)

    def policy(self, settings: Settings) -> EgressPolicy:
        policy = EgressPolicy.from_settings(settings)
        return policy.allowing(self.origin.host) if self.operator else policy

    def secrets(self) -> list[str]:
        """What to mask in this endpoint's errors and events (a credential's key)."""
        return [self.api_key] if self.credential and len(self.api_key) >= 4 else []


def normalized(url: str) -> str:
    """``url`` as compared with the operator's list: parsed, no trailing slash."""
    import httpx  # here, not at node discovery (see egress/origins.py)

    return str(httpx.URL(url.strip())).rstrip("/")


def default_base_url(settings: Settings) -> str:
    return settings.openai_base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL


def operator_base_urls(settings: Settings) -> list[str]:
    listed = [u for u in (s.strip() for s in settings.model_base_urls.split(",")) if u]
    return [normalized(u) for u in [default_base_url(settings), *listed]]


def operator_key(settings: Settings) -> str:
    try:
        from_file = settings.secrets
    except ValueError:
        from_file = {}
    for name in OPERATOR_KEYS:
        value = os.environ.get(name) or from_file.get(name)
        if value:
            return str(value)
    return ""


def _url(raw: Any, parameter: str) -> str:
    if not isinstance(raw, str):
        raise ParameterError(f"parameter {parameter!r}: base_url must be a string", parameter=parameter)
    import httpx

    try:
        Origin.of(raw.strip())
        return normalized(raw)
    except (ValueError, httpx.InvalidURL):
        raise ParameterError(f"parameter {parameter!r}: base_url {raw!r} is not an http(s) URL",
                             parameter=parameter) from None


async def resolve_endpoint(ctx: FlowContext, *, base_url: Any = "", credential: Any = "",
                           parameter: str) -> Endpoint:
    """The endpoint for what the node names (see the module docstring); ``parameter``
    names the node parameter in errors."""
    host = node_host(ctx)
    settings = host.settings
    default = normalized(default_base_url(settings))
    chosen = _url(base_url, parameter) if base_url else ""
    operator_urls = operator_base_urls(settings)
    if credential:
        found = await host.credential(str(credential), CREDENTIAL_TYPES, parameter=parameter)
        own = found.values.get("base_url")
        url = chosen or (_url(own, parameter) if own else default)
        refusal = found.refusal(url, endpoint=default)
        if refusal is not None:
            raise ParameterError(f"parameter {parameter!r}: {refusal}", parameter=parameter)
        key = found.values.get("key") or found.values.get("token", "")
        limits = ProviderLimits(f"cred:{host.workspace}:{found.name}", **found.limits)
        return Endpoint(url, key, url in operator_urls, found.name, limits)
    if chosen and chosen not in operator_urls:
        raise ParameterError(
            f"parameter {parameter!r}: base_url {chosen!r} is not a model endpoint the operator "
            "configured (ORCH_OPENAI_BASE_URL, ORCH_MODEL_BASE_URLS), and the worker's key is sent to "
            "no other; name an api_key credential that holds this base_url, or ask the operator to "
            "list it in ORCH_MODEL_BASE_URLS", parameter=parameter)
    url = chosen or default
    return Endpoint(url, operator_key(settings), True,
                    limits=ProviderLimits(f"endpoint:{url}", **operator_limits(settings, url)))
