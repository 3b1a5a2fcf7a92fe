"""SSE: replay from the Redis Stream, resume with Last-Event-ID, live tail, chat format."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from orchestrator.kernel.compile import compile_run
from orchestrator.kernel.protocol import NodeEvent
from orchestrator.kernel.store import RunRecord, RunStatus
from orchestrator.kernel.validation import validate_graph
from tests.api.conftest import Api, api_registry, chain


async def make_run(api: Api, run_id: str) -> None:
    vg = validate_graph(chain("g1"), api_registry())
    record = RunRecord(run_id=run_id, status=RunStatus.RUNNING, graph_id="g1")
    await api.store.create_run(compile_run(vg, run_id), record)


async def add_progress(api: Api, run_id: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        event = NodeEvent(run_id, "b", "relay", "progress", {"i": i})
        await api.store.append_event(event)


def parse_sse(text: str) -> list[dict[str, Any]]:
    """Frames with an event type (pings and comments are dropped)."""
    frames: list[dict[str, Any]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        frame: dict[str, Any] = {}
        for line in block.split("\n"):
            if line.startswith(":") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            frame[key] = value[1:] if value.startswith(" ") else value
        if "event" in frame:
            frames.append(frame)
    return frames


async def read_stream(api: Api, run_id: str, **kw: Any) -> list[dict[str, Any]]:
    response = await api.client.get(f"/runs/{run_id}/events", **kw)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


async def test_replay_sends_every_event_with_its_stream_id_and_ends_at_the_terminal_one(
    api: Api,
) -> None:
    await make_run(api, "r1")
    await add_progress(api, "r1", 5)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    frames = await read_stream(api, "r1")
    kinds = [f["event"] for f in frames]
    assert kinds[0] == "run_started" and kinds[-1] == "run_cancelled"
    assert [json.loads(f["data"])["data"]["i"] for f in frames if f["event"] == "progress"] == [
        0,
        1,
        2,
        3,
        4,
    ]
    stored = [sid for sid, _ in await api.store.read_events("r1")]
    assert [f["id"] for f in frames] == stored


async def test_reconnect_with_last_event_id_gets_each_event_once_in_order(api: Api) -> None:
    await make_run(api, "r1")
    await add_progress(api, "r1", 6)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    everything = await read_stream(api, "r1")
    cut = 3
    resumed = await read_stream(api, "r1", headers={"Last-Event-ID": everything[cut]["id"]})
    assert everything[: cut + 1] + resumed == everything


async def test_after_query_parameter_resumes_like_the_header(api: Api) -> None:
    await make_run(api, "r1")
    await add_progress(api, "r1", 3)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    everything = await read_stream(api, "r1")
    resumed = await read_stream(api, "r1", params={"after": everything[1]["id"]})
    assert resumed == everything[2:]


async def test_live_events_stream_until_the_run_ends(api: Api) -> None:
    await make_run(api, "r1")
    await add_progress(api, "r1", 2)

    async def produce() -> None:
        await asyncio.sleep(0.05)
        await add_progress(api, "r1", 3, start=2)
        await api.store.finish_run("r1", RunStatus.CANCELLED)

    producer = asyncio.create_task(produce())
    frames = await read_stream(api, "r1")
    await producer
    progress = [json.loads(f["data"])["data"]["i"] for f in frames if f["event"] == "progress"]
    assert progress == [0, 1, 2, 3, 4]
    assert frames[-1]["event"] == "run_cancelled"


async def test_reconnect_after_the_terminal_event_ends_at_once(api: Api) -> None:
    await make_run(api, "r1")
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    everything = await read_stream(api, "r1")
    assert await read_stream(api, "r1", headers={"Last-Event-ID": everything[-1]["id"]}) == []


async def test_events_of_an_unknown_run_are_404(api: Api) -> None:
    assert (await api.client.get("/runs/nope/events")).status_code == 404


async def test_malformed_last_event_id_is_422_naming_it(api: Api) -> None:
    await make_run(api, "r1")
    response = await api.client.get("/runs/r1/events", headers={"Last-Event-ID": "yesterday"})
    assert response.status_code == 422
    assert response.json()["error"]["parameter"] == "Last-Event-ID"


async def test_cancel_ends_the_run_and_its_stream(api: Api) -> None:
    await make_run(api, "r1")
    cancelled = await api.client.post("/runs/r1/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json() == {"run_id": "r1", "cancelled": True, "status": "cancelled"}
    again = (await api.client.post("/runs/r1/cancel")).json()
    assert again["cancelled"] is False
    frames = await read_stream(api, "r1")
    assert frames[-1]["event"] == "run_cancelled"


async def test_run_detail_shows_status_and_every_node(api: Api) -> None:
    await make_run(api, "r1")
    body = (await api.client.get("/runs/r1")).json()
    assert body["status"] == "running"
    assert set(body["nodes"]) == {"a", "b", "c"}
    assert body["nodes"]["b"]["name"] == "Middle"
    assert (await api.client.get("/runs/nope")).status_code == 404
