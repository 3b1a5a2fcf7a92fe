"""``GET /runs/{id}/events``: the run's Redis Stream as Server-Sent Events.

Contract:

* replay starts after the ``Last-Event-ID`` header, else ``?after=``, else the beginning;
  then the live tail; every durable event carries ``id:`` = its stream id, so a
  reconnect with ``Last-Event-ID`` gets each event exactly once, in order;
* the process's ``EventHub`` (``app.state.event_hub``) serves every stream: one Redis
  reader per run however many clients follow it, and no pooled Redis connection held
  while a client waits (see ``event_hub.py``);
* ``event:`` is the event type and ``data:`` the NodeEvent JSON (``?format=chat``: the
  chat protocol messages of each event, the stream id on the last one of each event);
* keep-alive comments every ``Settings.sse_ping_s`` (no ``id:``, so resume is unaffected);
* the stream ends after the run's terminal event, or once the run is over and nothing
  is left to read (e.g. a reconnect after the terminal event);
* a disconnect only stops this client's stream; the run goes on. A client too slow to
  keep up is cut off (the stream ends without a terminal event) and resumes with
  ``Last-Event-ID``, losing nothing;
* a stream whose key is removed from the configuration ends within
  ``STREAM_KEY_CHECK_S`` (``frames``' ``allowed``), like every other request of that key.

``follow`` is the same sequence for in-process callers that need no fan-out.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from orchestrator.kernel.errors import ParameterError, RunNotFoundError
from orchestrator.kernel.protocol import NodeEvent
from orchestrator.kernel.store import RunStatus
from orchestrator.telemetry import metrics

from .auth import role
from .event_hub import Allowed, Delivery, EventHub
from .launch import owned_run
from .principal import Principal, key_ring
from .services import Services, get_services

router = APIRouter(tags=["events"])

STREAM_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")
STREAM_KEY_CHECK_S = 2.0  # an open stream of a removed key ends within this long


def start_id(header: str | None, after: str | None) -> str:
    """The stream id to read after; a ``ParameterError`` (422) for a malformed one."""
    for name, value in (("Last-Event-ID", header), ("after", after)):
        if value is not None and value.strip():
            if not STREAM_ID.match(value.strip()):
                raise ParameterError(f"{name} {value!r} is not a stream id like '1700000000000-0'", parameter=name)
            return value.strip()
    return "0-0"


def chat_events(event: NodeEvent) -> list[dict[str, Any]]:
    from orchestrator.service.chat_protocol import to_chat_events

    messages: list[dict[str, Any]] = to_chat_events(event)
    return messages


def make_hub(services: Services) -> EventHub:
    """The process's hub over the app's Redis; a run is over once terminal or expired."""
    store = services.runs

    async def run_over(run_id: str) -> bool:
        try:
            return (await store.get_run(run_id)).status in RunStatus.TERMINAL
        except RunNotFoundError:
            return True

    return EventHub(services.redis, services.keys, run_over)


async def frames(hub: EventHub, run_id: str, after: str, fmt: str,
                 allowed: Allowed | None = None) -> AsyncGenerator[bytes, None]:
    """The run's SSE frames, each batch of deliveries as one chunk of bytes: every event
    is encoded once for all its subscribers (``Delivery.frame``, ``chat_frame``). With
    ``allowed`` the stream ends once it answers False (checked before each batch and
    every ``STREAM_KEY_CHECK_S`` while idle)."""
    metrics.SSE_STREAMS.inc()
    try:
        async for batch in hub.subscribe_batches(run_id, after, allowed=allowed, check_every_s=STREAM_KEY_CHECK_S):
            if fmt == "chat":
                yield b"".join(chat_frame(delivery) for delivery in batch)
            else:
                yield b"".join(delivery.frame for delivery in batch)
    finally:
        metrics.SSE_STREAMS.dec()  # synchronous: an await here would be cancelled on disconnect


def chat_frame(delivery: Delivery) -> bytes:
    """The chat protocol messages of one event as SSE frames, the stream id on the last
    one; encoded once per delivery however many chat clients follow the run."""
    cached: bytes | None = delivery.memo.get("chat")
    if cached is None:
        messages = chat_events(delivery.event)
        cached = b"".join(
            ServerSentEvent(
                data=json.dumps(message),
                event=str(message.get("type", "message")),
                id=delivery.stream_id if i == len(messages) - 1 else None,
            ).encode()
            for i, message in enumerate(messages)
        )
        delivery.memo["chat"] = cached
    return cached


@router.get("/runs/{run_id}/events", response_class=EventSourceResponse)
async def run_events(
    run_id: str,
    request: Request,
    after: str | None = Query(None, max_length=50, description="stream id to resume after"),
    format: Literal["events", "chat"] = Query("events"),
    services: Services = Depends(get_services),  # noqa: B008
    who: Principal = Depends(role("viewer")),  # noqa: B008
) -> EventSourceResponse:
    """The run's events as SSE (see the module docstring for the contract)."""
    cursor = start_id(request.headers.get("last-event-id"), after)
    await owned_run(services, run_id, who.workspace)  # 404 before the stream starts
    settings = services.settings
    return EventSourceResponse(
        frames(request.app.state.event_hub, run_id, cursor, format, lambda: key_ring(settings).knows(who)),
        ping=services.settings.sse_ping_s,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
