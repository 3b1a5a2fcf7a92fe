"""Each event is encoded once however many clients follow its run: every live subscriber
gets the same delivery, whose SSE frame is built once; a stream writes what arrived
together as one chunk (against a real redis-server)."""

from __future__ import annotations

import asyncio
from typing import Any

from sse_starlette import ServerSentEvent

from orchestrator.api.event_hub import Delivery, EventHub
from orchestrator.api.events import ENCODERS
from orchestrator.kernel.store import RunStatus
from tests.api.conftest import Api
from tests.api.test_event_hub import make_hub, stored_ids, until
from tests.api.test_events import add_progress, make_run, parse_sse


async def test_every_subscriber_sends_the_same_frame_encoded_once(api: Api, monkeypatch: Any) -> None:
    hub = make_hub(api)
    await make_run(api, "r1")
    encoded = 0
    real = ServerSentEvent.encode

    def counting(self: ServerSentEvent) -> bytes:
        nonlocal encoded
        encoded += 1
        return real(self)

    monkeypatch.setattr(ServerSentEvent, "encode", counting)

    got_replay: list[int] = []

    async def follow() -> list[Delivery]:
        out: list[Delivery] = []
        async for batch in hub.subscribe_batches("r1", after="0-0"):
            out += batch
            for delivery in batch:
                assert delivery.frame.startswith(f"id: {delivery.stream_id}\r\n".encode())
            got_replay.append(1)
        return out

    followers = [asyncio.create_task(follow()) for _ in range(20)]
    await until(lambda: len(got_replay) == 20, "all 20 replayed the history (run_started)")
    replayed = encoded  # each subscriber's replay is its own read (20 frames)
    await add_progress(api, "r1", 10)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    received = await asyncio.gather(*followers)
    everything = await stored_ids(api, "r1")
    assert all([d.stream_id for d in got] == everything for got in received)
    live = len(everything) - 1
    assert encoded - replayed == live  # not live x 20
    assert all(got[-1] is received[0][-1] for got in received)  # one object for every subscriber
    await hub.close()


async def test_a_stream_writes_the_events_that_arrived_together_as_one_chunk(api: Api) -> None:
    hub: EventHub = make_hub(api)
    await make_run(api, "r1")
    await add_progress(api, "r1", 5)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    chunks: list[bytes] = []
    feed = hub.feed("r1", "0-0", lambda batch: chunks.append(ENCODERS["events"](batch)) is None)
    await asyncio.wait_for(feed.run(), 10)
    assert len(chunks) == 1  # the replayed page
    events = parse_sse(chunks[0].decode())
    assert [frame["id"] for frame in events] == await stored_ids(api, "r1")
    await hub.close()


async def test_the_reader_writes_each_live_batch_to_every_feed_joined_once(api: Api) -> None:
    hub: EventHub = make_hub(api)
    await make_run(api, "r1")
    written: list[list[bytes]] = [[] for _ in range(50)]

    def sink(i: int) -> Any:
        return lambda batch: written[i].append(ENCODERS["events"](batch)) is None

    feeds = [hub.feed("r1", "0-0", sink(i)) for i in range(50)]
    runs = [asyncio.create_task(feed.run()) for feed in feeds]
    await until(lambda: all(written), "every feed replayed the history")
    await add_progress(api, "r1", 10)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    await asyncio.wait_for(asyncio.gather(*runs), 10)
    everything = await stored_ids(api, "r1")
    for chunks in written:
        assert [f["id"] for f in parse_sse(b"".join(chunks).decode())] == everything
    live = [chunks[1:] for chunks in written]
    # The live batches are the same bytes object for every feed: joined once, not 50 times.
    assert all(len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True)) for a, b in zip(live, live[1:]))
    assert hub.readers == 0
    await hub.close()


async def test_a_feed_whose_sink_refuses_ends_and_the_others_go_on(api: Api) -> None:
    hub: EventHub = make_hub(api)
    await make_run(api, "r1")
    kept: list[bytes] = []
    refused: list[int] = []
    feeds = [hub.feed("r1", "0-0", lambda batch: kept.append(ENCODERS["events"](batch)) is None),
             hub.feed("r1", "0-0", lambda batch: refused.append(len(batch)) is not None or len(refused) < 2)]
    runs = [asyncio.create_task(feed.run()) for feed in feeds]
    await until(lambda: kept and refused, "both replayed")
    await add_progress(api, "r1", 1)
    await asyncio.wait_for(runs[1], 10)  # its second batch was refused: it ended
    assert hub.subscribers("r1") == 1
    await add_progress(api, "r1", 1, start=1)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    await asyncio.wait_for(runs[0], 10)
    assert [f["id"] for f in parse_sse(b"".join(kept).decode())] == await stored_ids(api, "r1")
    await hub.close()
