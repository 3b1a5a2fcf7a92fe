"""One place that maps the error tree to HTTP.

==============================================  ======
error                                           status
==============================================  ======
``GraphError`` (any subclass)                   422
``GraphNotFoundError``, ``RunNotFoundError``    404
``ResourceNotFoundError`` (credential, file)    404
``GraphConflictError``                          409
``AuthError``                                   401
``ForbiddenError`` (a key's role is too low)    403
``PayloadTooLargeError`` (body limit)           413
``OverloadedError`` (queued work over a bound)   429 + ``Retry-After``
``StorageBudgetError`` (a workspace's bytes)     429
``StoreFullError``, Redis's OOM error (Redis   507
at its ``maxmemory``)
``RunStateError`` (e.g. rerun of a live run)    409
other ``RunError`` (e.g. nothing to approve)     409
request body not JSON                           400
request body of the wrong shape                 422
other ``OrchestratorError``                     400
Redis unreachable or too slow (redis-py         503
``ConnectionError``/``TimeoutError``, incl. a
pool with no free connection)
==============================================  ======

Every error body is ``{"error": {"type", "code", "message", ...locators}}``: the
``to_dict()`` of the error, naming the graph, node, edge, handle or parameter.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError as RedisResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from orchestrator.errors import (
    AuthError,
    ForbiddenError,
    GraphConflictError,
    GraphNotFoundError,
    OverloadedError,
    PayloadTooLargeError,
    ResourceNotFoundError,
    StorageBudgetError,
    StoreFullError,
    StoreNotReplicatedError,
)
from orchestrator.kernel.errors import GraphError, OrchestratorError, RunError, RunNotFoundError, RunStateError
from orchestrator.store.storage_budget import store_full

STATUS: list[tuple[type[OrchestratorError], int]] = [
    (GraphError, 422),
    (GraphNotFoundError, 404),
    (RunNotFoundError, 404),
    (ResourceNotFoundError, 404),
    (GraphConflictError, 409),
    (AuthError, 401),
    (ForbiddenError, 403),
    (PayloadTooLargeError, 413),
    (OverloadedError, 429),
    (StorageBudgetError, 429),
    (StoreFullError, 507),
    (StoreNotReplicatedError, 503),
    (RunStateError, 409),
    (RunError, 409),
]


def status_of(exc: OrchestratorError) -> int:
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 400


def error_response(exc: OrchestratorError) -> JSONResponse:
    status = status_of(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if isinstance(exc, OverloadedError):
        headers = {"Retry-After": str(exc.retry_after_s)}
    return JSONResponse({"error": exc.to_dict()}, status_code=status, headers=headers)


async def _orchestrator_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, OrchestratorError)
    return error_response(exc)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    for err in errors:
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            detail = ctx.get("error", "invalid JSON")
            loc = err.get("loc", ())
            position = f" at position {loc[1]}" if len(loc) > 1 else ""
            body: dict[str, Any] = {
                "type": "MalformedJSON",
                "code": "malformed_json",
                "message": f"request body is not valid JSON: {detail}{position}",
            }
            return JSONResponse({"error": body}, status_code=400)
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    message = f"{where}: {first.get('msg', 'invalid request')}" if where else "invalid request"
    body = {
        "type": "RequestValidationError",
        "code": "request_invalid",
        "message": message,
        "parameter": where or None,
        "errors": [{"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg")} for e in errors],
    }
    return JSONResponse({"error": {k: v for k, v in body.items() if v is not None}}, status_code=422)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    codes = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
    body = {
        "type": "HTTPError",
        "code": codes.get(exc.status_code, f"http_{exc.status_code}"),
        "message": str(exc.detail),
    }
    return JSONResponse({"error": body}, status_code=exc.status_code, headers=exc.headers)


STORE_RETRY_AFTER_S = 1


async def _store_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """Redis is down, unreachable or saturated: the request may succeed if retried."""
    body = {
        "type": "StoreUnavailable",
        "code": "store_unavailable",
        "message": f"the state store (Redis) is unavailable: {type(exc).__name__}: {exc}; retry shortly",
    }
    return JSONResponse({"error": body}, status_code=503, headers={"Retry-After": str(STORE_RETRY_AFTER_S)})


async def _store_error(request: Request, exc: Exception) -> JSONResponse:
    """A Redis error reply: OOM (Redis at its maxmemory) is a 507
    naming it; any other is a 500 that names nothing of the store's internals."""
    assert isinstance(exc, RedisResponseError)
    full = store_full(exc)
    if full is not None:
        return error_response(full)
    body = {"type": "StoreError", "code": "store_error", "message": "the state store (Redis) refused the request"}
    return JSONResponse({"error": body}, status_code=500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(OrchestratorError, _orchestrator_error)
    app.add_exception_handler(RedisConnectionError, _store_unavailable)
    app.add_exception_handler(RedisTimeoutError, _store_unavailable)
    app.add_exception_handler(RedisResponseError, _store_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
