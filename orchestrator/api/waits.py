"""Wait nodes over HTTP: list what a run waits for, submit a form, issue and call resume URLs.

=====================================================  ======  ===============================
endpoint                                               role    what
=====================================================  ======  ===============================
``GET /runs/{id}/waits``                               viewer  the run's waiting Wait nodes
                                                               (kind, message, form schema,
                                                               timeout, when the timer is due)
``POST /runs/{id}/waits/{node}/form``                  runner  the form's data (a JSON object);
                                                               422 naming the field that does
                                                               not match, 409 once answered
``POST /runs/{id}/waits/{node}/resume-url``            runner  a signed resume URL for a node
                                                               that waits for one
``POST /resume/{id}/{node}?exp=&sig=``                 none    the callback: its JSON body
                                                               resumes the node; 403 for a bad
                                                               or expired signature, 409 once
                                                               answered
=====================================================  ======  ===============================

Bodies are bounded by ``ORCH_WAIT_MAX_PAYLOAD_BYTES`` (413). The resume URL's expiry is
checked on Redis's clock. See ``orchestrator/service/waits.py``.
"""

from __future__ import annotations

import json
from typing import Any, cast

from fastapi import APIRouter, Depends, Query, Request

from orchestrator.errors import PayloadTooLargeError
from orchestrator.kernel.errors import ParameterError, RunError
from orchestrator.service import waits
from orchestrator.store.redis_store import RedisRunStore

from .auth import role
from .launch import owned_run
from .principal import Principal
from .services import Services, get_services

router = APIRouter(tags=["runs"])
open_router = APIRouter(tags=["triggers"])
SERVICES = Depends(get_services)
VIEWER = Depends(role("viewer"))
RUNNER = Depends(role("runner"))
SIG = Query(default="", max_length=128)
EXP = Query(default="", max_length=20)


class ResumeUrlsOffError(RunError):
    code = "resume_urls_off"


def _store(services: Services) -> RedisRunStore:
    return cast(RedisRunStore, services.run_store)


async def _redis_now(services: Services) -> float:
    seconds, micros = await services.redis.time()
    return int(seconds) + int(micros) / 1e6


async def _json_body(request: Request, services: Services, *, empty: Any) -> Any:
    raw = await request.body()
    limit = services.settings.wait_max_payload_bytes
    if len(raw) > limit:
        raise PayloadTooLargeError(f"the body exceeds {limit} bytes (ORCH_WAIT_MAX_PAYLOAD_BYTES)",
                                   parameter="body")
    if not raw.strip():
        return empty
    try:
        return json.loads(raw)
    except ValueError:
        raise ParameterError("the body must be JSON", parameter="body") from None


def _dispatch(services: Services) -> waits.DispatchFn:
    dispatch = services.dispatch
    return lambda run_id, node_id: dispatch(run_id, [node_id])


@router.get("/runs/{run_id}/waits")
async def list_waits(run_id: str, services: Services = SERVICES, who: Principal = VIEWER) -> dict[str, Any]:
    """The run's Wait nodes that wait now."""
    await owned_run(services, run_id, who.workspace)
    return {"run_id": run_id, "items": [w.to_json() for w in await waits.waiting(_store(services), run_id)]}


@router.post("/runs/{run_id}/waits/{node_id}/form")
async def submit_form(run_id: str, node_id: str, request: Request, services: Services = SERVICES,
                      who: Principal = RUNNER) -> dict[str, Any]:
    """Answer a form wait: the data (checked against the node's form schema) becomes its output."""
    await owned_run(services, run_id, who.workspace)
    data = await _json_body(request, services, empty={})
    await waits.submit_form(_store(services), run_id, node_id, data, dispatch=_dispatch(services))
    return {"run_id": run_id, "node_id": node_id, "resumed": True}


@router.post("/runs/{run_id}/waits/{node_id}/resume-url")
async def resume_url(run_id: str, node_id: str, services: Services = SERVICES,
                     who: Principal = RUNNER) -> dict[str, Any]:
    """A signed URL that resumes the node when called (until the wait's timeout, else
    ``ORCH_RESUME_URL_TTL_S``)."""
    await owned_run(services, run_id, who.workspace)
    secret = services.settings.resume_url_secret
    if not secret:
        raise ResumeUrlsOffError("resume URLs are off: set ORCH_RESUME_URL_SECRET on the API",
                                 run_id=run_id, node_id=node_id)
    store = _store(services)
    await waits.url_wait(store, run_id, node_id)
    now = await _redis_now(services)
    expires = int(now + services.settings.resume_url_ttl_s)
    due = await store.timers.due_at(run_id, node_id)
    if due is not None:
        expires = min(expires, int(due) + 1)
    return {"run_id": run_id, "node_id": node_id, "url": waits.resume_path(secret, run_id, node_id, expires),
            "expires_at": expires}


def resume_link(run_id: str, node_id: str, exp: str = EXP, sig: str = SIG) -> waits.ResumeLink:
    """The signed resume URL a request was sent to (its path and query), as sent."""
    return waits.ResumeLink(run_id, node_id, exp, sig)


@open_router.post("/resume/{run_id}/{node_id}")
async def resume(request: Request, link: waits.ResumeLink = Depends(resume_link),  # noqa: B008
                 services: Services = SERVICES) -> dict[str, Any]:
    """A signed resume URL: the JSON body becomes the waiting node's output."""
    waits.check_signature(services.settings.resume_url_secret, link, await _redis_now(services))
    data = await _json_body(request, services, empty={})
    await waits.resume_by_url(_store(services), link.run_id, link.node_id, data, dispatch=_dispatch(services))
    return {"run_id": link.run_id, "node_id": link.node_id, "resumed": True}
