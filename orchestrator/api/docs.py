"""The API's own documentation (``/openapi.json``, ``/docs``, ``/redoc``), behind the same
auth as every other route unless ``ORCH_PUBLIC_DOCS`` is set.

The schema names every route and parameter; a deployment with keys keeps it for those who
hold one. With no keys configured (a local, single-user setup) everything is open anyway.
A browser reading ``/docs`` of a keyed API needs a browser credential (see the console's
sign-in), since Swagger UI fetches ``/openapi.json`` without an ``Authorization`` header.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

OPENAPI_URL = "/openapi.json"


def install(app: FastAPI, guard: list[Any], *, public: bool) -> None:
    """Add the three documentation routes to ``app`` (created with them turned off)."""
    dependencies = [] if public else guard

    @app.get(OPENAPI_URL, include_in_schema=False, dependencies=dependencies)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=dependencies)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=OPENAPI_URL, title=f"{app.title} - docs")

    @app.get("/redoc", include_in_schema=False, dependencies=dependencies)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=OPENAPI_URL, title=f"{app.title} - ReDoc")
