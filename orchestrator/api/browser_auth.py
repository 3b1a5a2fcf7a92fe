"""Browser credentials: a session cookie got by signing in with an API key, and
short-lived signed stream tokens for ``EventSource`` URLs (which cannot send headers).

Contract (see docs/console.md):

* ``POST /auth/session`` ``{api_key}`` checks the key like the bearer header does and sets
  the ``orch_session`` cookie (HttpOnly, SameSite=Lax, Secure on https or per
  ``Settings.session_cookie_secure``, ``Max-Age`` = ``Settings.session_ttl_s``). The body
  answers ``{auth, csrf_token, expires_in_s}``; ``GET /auth/session`` answers the same for
  a browser that already holds the cookie (``{auth: true, signed_in: false}`` without one);
  ``DELETE /auth/session`` clears it.
* The cookie holds a signed (itsdangerous, HMAC-SHA256 with ``Settings.session_secret``)
  random session id and nothing derived from the key. The session itself lives in Redis
  (``{p}:session:{id}``, TTL ``Settings.session_ttl_s``): the key's SHA-256 and the CSRF
  token. It is accepted only while that key is still configured (``ORCH_API_KEYS`` or
  ``ORCH_API_KEYS_FILE``, re-read when the file changes, ``principal.py``), and acts with that
  key's workspace and role: removing a key ends its sessions; signing out deletes the
  session, so a copy of the cookie is dead too.
* CSRF: a request authenticated by the cookie with a state-changing method (anything but
  GET, HEAD, OPTIONS) must carry ``X-CSRF-Token`` equal to the session's token. A custom
  header also forces a CORS preflight, which unlisted origins fail.
* ``POST /auth/stream-token`` ``{run_id}`` (any credential; a run of the caller's
  workspace) answers a token valid for ``Settings.stream_token_ttl_s`` on
  ``GET /runs/{run_id}/events?token=...`` only. The token is signed and names the run
  and a random grant id; the grant (``{p}:streamgrant:{id}``, same TTL) holds the key's
  SHA-256, so a URL, a proxy log or a browser history holds nothing derived from the key,
  and the token dies with its key. A stream open when its key is removed ends within
  ``STREAM_KEY_CHECK_S`` (``events.py``).
* Without ``Settings.session_secret`` a random secret is drawn once per process: sessions
  end at a restart and are not shared between processes (set it when there are several).
* Credentials are never logged: ``token=`` query values are masked in uvicorn's access log.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.errors import AuthError
from orchestrator.settings import Settings

from .auth import COOKIE, ID_CHARS, key_digest, read_session, require_key, session_id, signer
from .launch import owned_run
from .principal import Principal, bearer, key_ring
from .services import Services, get_services

router = APIRouter(prefix="/auth", tags=["auth"])  # open: signing in needs no credential
guarded = APIRouter(prefix="/auth", tags=["auth"])  # behind require_key


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    api_key: str = Field(min_length=1, max_length=1000)


class StreamTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str = Field(min_length=1, max_length=200)


def secure_cookie(request: Request, settings: Settings) -> bool:
    if settings.session_cookie_secure in ("always", "never"):
        return settings.session_cookie_secure == "always"
    proto = request.headers.get("x-forwarded-proto", request.url.scheme)
    return proto.split(",")[0].strip() == "https"


SERVICES = Depends(get_services)


@router.get("/session")
async def session_info(request: Request, services: Services = SERVICES) -> dict[str, Any]:
    """Whether auth is on and this browser is signed in (with its CSRF token if so)."""
    ring = key_ring(services.settings)
    if not ring.enabled:
        return {"auth": False, "signed_in": True, "csrf_token": ""}
    found = await read_session(request, services, ring)
    if found is None:
        return {"auth": True, "signed_in": False}
    session, principal = found
    return {"auth": True, "signed_in": True, "csrf_token": session["c"],
            "workspace": principal.workspace, "role": principal.role}


@router.post("/session")
async def sign_in(body: SignIn, request: Request, response: Response, services: Services = SERVICES) -> dict[str, Any]:
    """Check the API key and set the session cookie; 401 for a wrong key."""
    settings, ring = services.settings, key_ring(services.settings)
    if not ring.enabled:
        return {"auth": False, "signed_in": True, "csrf_token": ""}
    if ring.authenticate(body.api_key.strip()) is None:
        raise AuthError("invalid API key")
    csrf = secrets.token_urlsafe(24)
    sid = secrets.token_urlsafe(ID_CHARS)
    session = {"k": key_digest(body.api_key.strip().encode()), "c": csrf}
    await services.redis.set(services.keys.session(sid), json.dumps(session), ex=max(1, settings.session_ttl_s))
    cookie = signer(settings, "session").dumps({"s": sid})
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=settings.session_ttl_s,
        httponly=True,
        samesite="lax",
        secure=secure_cookie(request, settings),
        path="/",
    )
    return {"auth": True, "signed_in": True, "csrf_token": csrf, "expires_in_s": settings.session_ttl_s}


@router.delete("/session", status_code=204)
async def sign_out(request: Request, services: Services = SERVICES) -> Response:
    """End the session (deleted in Redis: a copy of the cookie is dead too) and clear the cookie."""
    sid = session_id(request, services.settings)
    if sid is not None:
        await services.redis.delete(services.keys.session(sid))
    response = Response(status_code=204)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="lax")
    return response


async def stream_grant(request: Request, services: Services) -> str:
    """The digest of the key behind this (already authenticated) request."""
    header = request.headers.get("authorization")
    if header:
        return key_digest(bearer(header).encode())
    found = await read_session(request, services, key_ring(services.settings))
    return str(found[0]["k"]) if found else ""


@guarded.post("/stream-token")
async def issue_stream_token(
    body: StreamTokenRequest, request: Request, services: Services = SERVICES,
    who: Principal = Depends(require_key),  # noqa: B008
) -> dict[str, Any]:
    """A token for ``GET /runs/{run_id}/events?token=``, valid ``stream_token_ttl_s``."""
    await owned_run(services, body.run_id, who.workspace)  # 404 for an unknown or foreign run
    settings = services.settings
    gid = secrets.token_urlsafe(ID_CHARS)
    await services.redis.set(services.keys.stream_grant(gid), await stream_grant(request, services),
                             px=max(1, int(settings.stream_token_ttl_s * 1000)))
    token = signer(settings, "stream").dumps({"r": body.run_id, "g": gid})
    return {
        "token": token,
        "expires_in_s": settings.stream_token_ttl_s,
        "events_url": f"/runs/{body.run_id}/events?token={token}",
    }


class MaskTokens(logging.Filter):
    """Masks ``token=`` query values in uvicorn's access log lines."""

    PATTERN = re.compile(r"([?&]token=)[^&\s]*")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(self.PATTERN.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        return True


def mask_access_log() -> None:
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, MaskTokens) for f in access.filters):
        access.addFilter(MaskTokens())
