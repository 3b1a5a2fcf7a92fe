"""``GET /runs/{id}/events``: the run's Redis Stream as Server-Sent Events.

Contract:

* replay starts after the ``Last-Event-ID`` header, else ``?after=``, else the beginning;
  then the live tail (``XREAD BLOCK``); every durable event carries ``id:`` = its stream
  id, so a reconnect with ``Last-Event-ID`` gets each event exactly once, in order;
* ``event:`` is the event type and ``data:`` the NodeEvent JSON (``?format=chat``: the
  chat protocol messages of each event, the stream id on the last one of each event);
* keep-alive comments every ``Settings.sse_ping_s`` (no ``id:``, so resume is unaffected);
* the stream ends after the run's terminal event, or once the run is over and nothing
  is left to read (e.g. a reconnect after the terminal event);
* a disconnect only stops this reader; the run goes on.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from orchestrator import metrics
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.kernel.store import RunStatus

from .services import RunStoreApi, Services, get_services

router = APIRouter(tags=["events"])

STREAM_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")
# One XREAD waits at most this long before the run status is re-checked; below the
# Redis client's socket timeout (5 s by default), which would cut a longer block.
BLOCK_MS = 2_000
BATCH = 200


def start_id(header: str | None, after: str | None) -> str:
    """The stream id to read after; a ``ParameterError`` (422) for a malformed one."""
    for name, value in (("Last-Event-ID", header), ("after", after)):
        if value is not None and value.strip():
            if not STREAM_ID.match(value.strip()):
                raise ParameterError(f"{name} {value!r} is not a stream id like '1700000000000-0'", parameter=name)
            return value.strip()
    return "0-0"


async def follow(store: RunStoreApi, run_id: str, after: str) -> AsyncIterator[tuple[str, NodeEvent]]:
    """(stream id, event) from ``after`` to the terminal event, waiting for live ones."""
    cursor = after
    block_ms: int | None = None  # the first read never waits: a finished run replays at once
    while True:
        batch = await store.read_events(run_id, after=cursor, count=BATCH, block_ms=block_ms)
        for stream_id, event in batch:
            cursor = stream_id
            yield stream_id, event
            if event.event_type in EventType.TERMINAL:
                return
        if batch:
            block_ms = None
            continue
        if (await store.get_run(run_id)).status in RunStatus.TERMINAL:
            # Over, and its terminal event is behind the cursor (or trimmed): drain and end.
            for stream_id, event in await store.read_events(run_id, after=cursor, count=BATCH):
                yield stream_id, event
            return
        block_ms = BLOCK_MS


def chat_events(event: NodeEvent) -> list[dict[str, Any]]:
    from orchestrator.chat_protocol import to_chat_events

    messages: list[dict[str, Any]] = to_chat_events(event)
    return messages


async def frames(store: RunStoreApi, run_id: str, after: str, fmt: str) -> AsyncIterator[ServerSentEvent]:
    metrics.SSE_STREAMS.inc()
    try:
        async for stream_id, event in follow(store, run_id, after):
            if fmt == "chat":
                messages = chat_events(event)
                for i, message in enumerate(messages):
                    last = i == len(messages) - 1
                    yield ServerSentEvent(
                        data=json.dumps(message),
                        event=str(message.get("type", "message")),
                        id=stream_id if last else None,
                    )
            else:
                yield ServerSentEvent(data=json.dumps(event.to_json()), event=event.event_type, id=stream_id)
    finally:
        metrics.SSE_STREAMS.dec()  # synchronous: an await here would be cancelled on disconnect


@router.get("/runs/{run_id}/events", response_class=EventSourceResponse)
async def run_events(
    run_id: str,
    request: Request,
    after: str | None = Query(None, max_length=50, description="stream id to resume after"),
    format: Literal["events", "chat"] = Query("events"),
    services: Services = Depends(get_services),  # noqa: B008
) -> EventSourceResponse:
    """The run's events as SSE (see the module docstring for the contract)."""
    cursor = start_id(request.headers.get("last-event-id"), after)
    await services.runs.get_run(run_id)  # 404 before the stream starts
    return EventSourceResponse(
        frames(services.runs, run_id, cursor, format),
        ping=services.settings.sse_ping_s,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
