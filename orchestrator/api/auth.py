"""Bearer API keys (``Settings.api_keys``, comma separated; empty disables auth).

Every key is compared with ``hmac.compare_digest`` so the time taken says nothing about
how much of a guess was right. ``/health``, ``/ready`` and ``/hooks/*`` (HMAC signed
instead) do not use this dependency; ``/metrics`` does unless ``ORCH_METRICS_PUBLIC``.
A request without an ``Authorization`` header may instead carry a browser credential (a
session cookie or a stream token: ``browser_auth.py``), accepted only while its key is
still configured.
"""

from __future__ import annotations

import hmac

from fastapi import Depends, Request

from orchestrator.kernel.errors import AuthError

from .browser_auth import browser_credential
from .services import Services, get_services


def configured_keys(raw: str) -> list[bytes]:
    return [k.strip().encode() for k in raw.split(",") if k.strip()]


def check_key(header: str | None, keys: list[bytes]) -> None:
    """Raise :class:`AuthError` unless ``header`` is ``Bearer <one of keys>``."""
    if not keys:
        return
    if not header:
        raise AuthError("missing Authorization header; send 'Authorization: Bearer <api key>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthError("Authorization header must be 'Bearer <api key>'")
    given = token.strip().encode()
    matched = False
    for key in keys:  # no early exit: every key is compared
        matched |= hmac.compare_digest(given, key)
    if not matched:
        raise AuthError("invalid API key")


async def require_key(request: Request, services: Services = Depends(get_services)) -> None:  # noqa: B008
    keys = configured_keys(services.settings.api_keys)
    header = request.headers.get("authorization")
    # Browser hook (browser_auth.py): no header, but a session cookie or a stream token.
    if keys and header is None and browser_credential(request, services.settings, keys):
        return
    check_key(header, keys)
