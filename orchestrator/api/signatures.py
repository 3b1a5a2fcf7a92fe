"""Webhook signatures with replay protection (the scheme Stripe and Slack use).

A signed webhook request carries ``X-Signature-256: t=<unix seconds>,v1=<hex>`` where
``<hex>`` is HMAC-SHA256 under the graph's webhook secret of ``"<t>." + raw body``. The
request is accepted when:

* the HMAC matches (compared in constant time; several ``v1=`` values may be sent during
  a secret rotation, one must match);
* ``t`` is within ``Settings.webhook_tolerance_s`` of the server's clock (either way);
* this exact signature was not accepted before: each accepted signature is remembered in
  Redis (``{p}:hooksig:<sha256 of the signature>``, ``SET NX``) for twice the tolerance,
  longer than the timestamp check accepts it, so a captured request cannot be replayed.

Any failure is an :class:`AuthError` (401) that says what to fix, and starts nothing.

Sign a request with curl::

    body='{"score": 7}'; t=$(date +%s)
    sig=$(printf '%s.%s' "$t" "$body" | openssl dgst -sha256 -hmac "$SECRET" | sed 's/^.* //')
    curl -X POST "$API/hooks/my-path" -H 'Content-Type: application/json' \\
         -H "X-Signature-256: t=$t,v1=$sig" -d "$body"
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

from redis.asyncio import Redis

from orchestrator.errors import AuthError
from orchestrator.store.keys import Keys

SIGNATURE_HEADER = "x-signature-256"


@dataclass(frozen=True)
class ReplayWindow:
    """How far a signature's timestamp may be from the server's clock (``tolerance_s``,
    either way), and where the signatures accepted within it are remembered."""

    redis: Redis
    keys: Keys
    tolerance_s: float


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The header value for ``body`` sent at ``timestamp`` (clients and tests use this)."""
    mac = hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def _parse(header: str) -> tuple[int, list[str]]:
    timestamp: int | None = None
    macs: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1" and value:
            macs.append(value.strip())
    if timestamp is None or not macs:
        raise AuthError("X-Signature-256 must be 't=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">'")
    return timestamp, macs


async def verify(window: ReplayWindow, secret: str, body: bytes, header: str | None, *,
                 now: float | None = None) -> None:
    """Accept a signed request once within ``window``, or raise :class:`AuthError` (see the
    module docstring)."""
    tolerance_s = window.tolerance_s
    if not header:
        raise AuthError("missing X-Signature-256 header ('t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\">')")
    timestamp, macs = _parse(header)
    expected = sign(secret, body, timestamp).partition(",v1=")[2]
    matched = False
    for mac in macs:  # no early exit: every value is compared
        matched |= hmac.compare_digest(mac.encode(), expected.encode())
    if not matched:
        raise AuthError("X-Signature-256 does not match the timestamp and body")
    now = time.time() if now is None else now
    if abs(now - timestamp) > tolerance_s:
        raise AuthError(f"X-Signature-256 timestamp is more than {tolerance_s:g}s from the server's clock; "
                        "sign each request when it is sent")
    digest = hashlib.sha256(f"{timestamp}.{expected}".encode()).hexdigest()
    fresh = await window.redis.set(window.keys.hook_signature(digest), "1", nx=True, ex=max(1, int(2 * tolerance_s)))
    if not fresh:
        raise AuthError("this X-Signature-256 was already used: a signed request is accepted once")
