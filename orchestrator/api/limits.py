"""A request body size limit (``Settings.max_body_bytes``), as pure ASGI middleware, and
:class:`AuthBeforeBody`: a guarded route's credential is checked before its body is read.

A declared ``Content-Length`` above the limit is refused before the body is read; a
chunked body is counted as it arrives and refused once it passes the limit (413 with
the usual error body), before the handler sees a truncated request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.errors import AuthError, PayloadTooLargeError

from .errors import error_response


class _TooLarge(HTTPException):
    # An HTTPException so the framework's body parsing lets it through (it turns other
    # exceptions into a 400); the app's HTTPException handler renders it as a 413.
    def __init__(self, message: str) -> None:
        super().__init__(status_code=413, detail=message)


class BodyLimit:
    """``path_limits`` maps a path prefix (e.g. ``/files``) to its own limit, and the
    message its 413 gives (what the limit is made of)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int,
                 path_limits: dict[str, tuple[int, str]] | None = None) -> None:
        self.app = app
        self.default_bytes = max_body_bytes
        self.path_limits = path_limits or {}

    def _error(self, limit_bytes: int, message: str = "") -> PayloadTooLargeError:
        return PayloadTooLargeError(
            message or f"request body exceeds the limit of {limit_bytes} bytes (ORCH_MAX_BODY_BYTES)",
            parameter="body")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        limit, what = next((found for prefix, found in self.path_limits.items() if path.startswith(prefix)),
                              (self.default_bytes, ""))
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await error_response(self._error(limit, what))(scope, receive, send)
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge(self._error(limit, what).message)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if started:
                raise
            await error_response(self._error(limit, what))(scope, receive, send)


OPEN_BODY_PATHS = ("/hooks/", "/auth/session", "/resume/")  # routes that take a body without an API key
BODYLESS = frozenset({"GET", "HEAD", "OPTIONS"})


class AuthBeforeBody:
    """A request with a body to a guarded route presents a valid credential (``check``,
    the routes' own ``require_key``: headers, cookie, query only) before its body is read:
    FastAPI reads and parses a body before it runs a route's dependencies, so 90
    unauthenticated requests each sending 2 MiB slowly held 180 MB of the API's memory
    until their 401. Webhooks and sign-in (``OPEN_BODY_PATHS``) stay open."""

    def __init__(self, app: ASGIApp, check: Callable[[Request], Awaitable[Any]]) -> None:
        self.app = app
        self.check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope.get("method") in BODYLESS
                or str(scope.get("path", "")).startswith(OPEN_BODY_PATHS)):
            await self.app(scope, receive, send)
            return
        try:
            await self.check(Request(scope))  # no receive: nothing of the body is read
        except AuthError as exc:
            await error_response(exc)(scope, receive, send)
            return
        await self.app(scope, receive, send)
