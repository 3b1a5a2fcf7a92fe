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
  ``STREAM_KEY_CHECK_S`` (checked before each batch and by the process's one stream
  timer, ``sse.Streams``), like every other request of that key;
* each batch of events is encoded once for all its clients and, under ``orchestrator
  serve``, written by the run's reader straight to every client's connection
  (``sse.py``); a client that stops reading is cut after a bounded buffer.

``follow`` is the same sequence for in-process callers that need no fan-out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from sse_starlette import ServerSentEvent

from orchestrator.kernel.errors import ParameterError, RunNotFoundError
from orchestrator.kernel.protocol import NodeEvent
from orchestrator.kernel.store import RunStatus

from .auth import role
from .event_hub import Delivery, EventHub
from .launch import owned_run
from .principal import Principal, key_ring
from .services import Services, get_services
from .sse import BatchEncoder, EventStreamResponse, StreamRequest, Streams

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


# Each batch's bytes per format, joined once for all the clients the reader writes it to.
ENCODERS = {"events": BatchEncoder(lambda delivery: delivery.frame), "chat": BatchEncoder(chat_frame)}


def streams_of(request: Request) -> Streams:
    """The process's open streams and their shared keep-alive timer (made on first use)."""
    state = request.app.state
    streams: Streams | None = getattr(state, "sse_streams", None)
    if streams is None:
        settings = state.services.settings
        streams = state.sse_streams = Streams(settings.sse_ping_s, STREAM_KEY_CHECK_S)
    return streams


@dataclass(frozen=True)
class EventsQuery:
    """The query of a stream of events: the stream id to resume after (the Last-Event-ID
    header, which a reconnecting browser sends, wins) and the format of its frames."""

    after: str | None = Query(None, max_length=50, description="stream id to resume after")
    format: Literal["events", "chat"] = Query("events")


@router.get("/runs/{run_id}/events", response_class=EventStreamResponse)
async def run_events(
    run_id: str,
    request: Request,
    query: EventsQuery = Depends(),  # noqa: B008
    services: Services = Depends(get_services),  # noqa: B008
    who: Principal = Depends(role("viewer")),  # noqa: B008
) -> EventStreamResponse:
    """The run's events as SSE (see the module docstring for the contract)."""
    cursor = start_id(request.headers.get("last-event-id"), query.after)
    await owned_run(services, run_id, who.workspace)  # 404 before the stream starts
    settings = services.settings
    stream = StreamRequest(request.app.state.event_hub, run_id, cursor, ENCODERS[query.format],
                           allowed=lambda: key_ring(settings).knows(who))
    return EventStreamResponse(stream, streams=streams_of(request),
                               headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
