"""Who is calling, as FastAPI dependencies: ``require_key`` resolves the request's
:class:`~orchestrator.api.principal.Principal` from its bearer key (``principal.py``: keys,
workspaces, roles, the keys file) or, without an ``Authorization`` header, from a browser
credential: a session cookie (with its CSRF header on state-changing methods) or a stream
token for one events URL (:func:`browser_principal`; the routes that issue them are
``browser_auth.py``). ``role("editor")`` is the dependency a route states its role with;
a key below it gets 403. Workspace permissions are checked here (the caller's workspace
and role) and by the stores, which answer 404 for another workspace's objects.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, Request
from itsdangerous import BadSignature, URLSafeTimedSerializer

from orchestrator.errors import AuthError, ForbiddenError
from orchestrator.settings import Settings

from .principal import DEFAULT_WORKSPACE, KeyRing, Principal, Role, bearer, key_ring
from .services import Services, get_services


def credential(request: Request) -> str:
    """The API key a request presents in its ``Authorization`` header."""
    return bearer(request.headers.get("authorization"))


OPEN = Principal(DEFAULT_WORKSPACE, "admin", "open")


async def require_key(request: Request, services: Services = Depends(get_services)) -> Principal:  # noqa: B008
    ring = key_ring(services.settings)
    if not ring.enabled:
        return OPEN
    if request.headers.get("authorization") is None:
        browser = await browser_principal(request, services, ring)
        if browser is not None:
            request.state.principal = browser
            return browser
    principal = ring.authenticate(credential(request))
    if principal is None:
        raise AuthError("invalid API key")
    request.state.principal = principal
    return principal


def role(needed: Role) -> Callable[..., Awaitable[Principal]]:
    """A dependency: the caller's principal, or 403 when its role is below ``needed``."""

    async def check(principal: Principal = Depends(require_key)) -> Principal:  # noqa: B008
        if not principal.can(needed):
            raise ForbiddenError(f"this needs the {needed} role; the key is a {principal.role} "
                                 f"of workspace {principal.workspace!r}")
        return principal

    return check


COOKIE = "orch_session"


CSRF_HEADER = "X-CSRF-Token"


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


EVENTS_PATH = re.compile(r"^/runs/([^/]+)/events$")


_PROCESS_SECRET = secrets.token_urlsafe(32)  # used only when Settings.session_secret is unset


def key_digest(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()


ID_CHARS = 32  # random bytes of a session id or a stream grant id (url-safe base64)


def signer(settings: Settings, purpose: str) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(settings.session_secret or _PROCESS_SECRET, salt=f"orchestrator.{purpose}")


def known_digest(digest: Any, ring: KeyRing) -> Principal | None:
    """The principal of the configured key whose hex SHA-256 is ``digest``, or None."""
    if not isinstance(digest, str) or len(digest) != 64:
        return None
    try:
        raw = bytes.fromhex(digest)
    except ValueError:
        return None
    return ring.by_digest(raw)


def load(settings: Settings, purpose: str, token: str, max_age_s: int) -> dict[str, Any] | None:
    try:
        value = signer(settings, purpose).loads(token, max_age=max_age_s)
    except BadSignature:  # also SignatureExpired
        return None
    return value if isinstance(value, dict) else None


def session_id(request: Request, settings: Settings) -> str | None:
    """The session id of the request's cookie, when its signature holds and it is fresh."""
    raw = request.cookies.get(COOKIE)
    session = load(settings, "session", raw, settings.session_ttl_s) if raw else None
    sid = session.get("s") if session is not None else None
    return sid if isinstance(sid, str) and sid else None


async def read_session(request: Request, services: Services,
                       ring: KeyRing) -> tuple[dict[str, Any], Principal] | None:
    """The valid session of the request's cookie (``{k: key digest, c: CSRF token}``) and
    its key's principal, or None."""
    sid = session_id(request, services.settings)
    if sid is None:
        return None
    stored = await services.redis.get(services.keys.session(sid))
    try:
        session = json.loads(stored) if stored else None
    except ValueError:
        session = None
    principal = known_digest(session.get("k"), ring) if isinstance(session, dict) else None
    if not isinstance(session, dict) or principal is None:
        return None
    return session, principal


async def browser_principal(request: Request, services: Services, ring: KeyRing) -> Principal | None:
    """The auth hook for requests without an ``Authorization`` header: the principal of a
    valid session cookie (with the CSRF header on state-changing methods) or of a valid
    stream token for this very events URL; None when neither is present; ``AuthError``
    for a session request missing its CSRF token."""
    found = await read_session(request, services, ring)
    if found is not None:
        session, principal = found
        if request.method not in SAFE_METHODS:
            given = request.headers.get(CSRF_HEADER) or ""
            if not hmac.compare_digest(given.encode(), str(session.get("c", "")).encode()):
                raise AuthError(f"a request signed in by cookie must send the {CSRF_HEADER} header of its session")
        return principal
    token = request.query_params.get("token")
    match = EVENTS_PATH.match(request.url.path)
    if token and match and request.method == "GET":
        grant = load(services.settings, "stream", token, services.settings.stream_token_ttl_s)
        gid = grant.get("g") if grant is not None and grant.get("r") == match.group(1) else None
        if isinstance(gid, str) and gid:
            return known_digest(await services.redis.get(services.keys.stream_grant(gid)), ring)
    return None
