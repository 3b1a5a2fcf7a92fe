"""The web console: static files under ``orchestrator/api/ui/`` served at ``/ui/``.

Everything the console needs ships in the package (``vendor/`` holds the canvas library,
built by ``ui-tools/build.sh`` from its lock file); nothing is fetched from elsewhere at run time, and
a Content-Security-Policy keeps it that way. The pages call the same API as everyone
else, signed in with a session cookie (``browser_auth.py``); the files themselves hold no
data and need no credential.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

ASSETS = Path(__file__).parent / "ui"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)


class ConsoleFiles(StaticFiles):
    """Static files with the console's security headers."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-cache"
        return response


def mount(app: FastAPI) -> None:
    """Serve the console at ``/ui/`` (``/ui`` redirects there)."""

    @app.get("/ui", include_in_schema=False)
    async def console_root() -> RedirectResponse:
        return RedirectResponse("ui/")  # relative: also right behind a proxy's path prefix

    app.mount("/ui", ConsoleFiles(directory=ASSETS, html=True), name="console")
