"""Cross-origin access for browsers: Starlette's ``CORSMiddleware`` over an allow-list.

Contract:

* only origins listed in ``Settings.cors_origins`` (comma separated, exact
  ``scheme://host[:port]``) get ``Access-Control-Allow-Origin``, and credentials
  (cookies) are allowed only for them; an empty list adds no CORS headers at all;
* a preflight ``OPTIONS`` from a listed origin is answered 200 with the allowed methods
  and headers; from an unlisted origin it is refused (400, no allow headers);
* the headers a browser may send are the ones the API reads: ``Authorization``,
  ``Content-Type``, ``Last-Event-ID`` and the CSRF header of cookie sessions.
"""

from __future__ import annotations

import re

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from orchestrator.settings import Settings

from .auth import CSRF_HEADER

ALLOWED_METHODS = ["GET", "POST", "PUT", "DELETE", "OPTIONS"]
ALLOWED_HEADERS = ["Authorization", "Content-Type", "Last-Event-ID", CSRF_HEADER]
PREFLIGHT_CACHE_S = 600
ORIGIN = re.compile(r"^https?://[^/\s:]+(:\d{1,5})?$")


def allowed_origins(raw: str) -> list[str]:
    """The allow-list: exact origins, without a trailing slash; ``*`` is refused because
    credentials are allowed (a wildcard would hand any site the user's session)."""
    origins = [o.strip().rstrip("/") for o in raw.split(",") if o.strip()]
    if "*" in origins:
        raise ValueError("ORCH_CORS_ORIGINS must list origins exactly; '*' is not allowed with credentials")
    for origin in origins:
        if not ORIGIN.match(origin):
            raise ValueError(f"ORCH_CORS_ORIGINS: {origin!r} is not an origin like 'https://app.example.com[:port]'")
    return origins


def install(app: FastAPI, settings: Settings) -> None:
    """Add the CORS middleware when any origin is listed."""
    origins = allowed_origins(settings.cors_origins)
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=origins,
        allow_credentials=True,
        allow_methods=ALLOWED_METHODS,
        allow_headers=ALLOWED_HEADERS,
        max_age=PREFLIGHT_CACHE_S,
    )
