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


class Written:
    """A feed's sink that keeps each batch's bytes (as a stream writes them) and accepts
    the first ``accept`` batches (all by default)."""

    def __init__(self, accept: int = 1 << 30) -> None:
        self.chunks: list[bytes] = []
        self.accept = accept

    def __call__(self, batch: list[Delivery]) -> bool:
        self.chunks.append(ENCODERS["events"](batch))
        return len(self.chunks) <= self.accept

    def ids(self) -> list[str]:
        return [frame["id"] for frame in parse_sse(b"".join(self.chunks).decode())]


async def test_a_stream_writes_the_events_that_arrived_together_as_one_chunk(api: Api) -> None:
    hub: EventHub = make_hub(api)
    await make_run(api, "r1")
    await add_progress(api, "r1", 5)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    written = Written()
    await asyncio.wait_for(hub.feed("r1", "0-0", written).run(), 10)
    assert len(written.chunks) == 1  # the replayed page
    assert written.ids() == await stored_ids(api, "r1")
    await hub.close()


async def test_the_reader_writes_each_live_batch_to_every_feed_joined_once(api: Api) -> None:
    hub: EventHub = make_hub(api)
    await make_run(api, "r1")
    sinks = [Written() for _ in range(50)]
    runs = [asyncio.create_task(hub.feed("r1", "0-0", sink).run()) for sink in sinks]
    await until(lambda: all(sink.chunks for sink in sinks), "every feed replayed the history")
    await add_progress(api, "r1", 10)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    await asyncio.wait_for(asyncio.gather(*runs), 10)
    everything = await stored_ids(api, "r1")
    assert all(sink.ids() == everything for sink in sinks)
    # The live batches are the same bytes object for every feed: joined once, not 50 times.
    first = sinks[0].chunks[1:]
    assert first and all(len(sink.chunks[1:]) == len(first) for sink in sinks)
    assert all(all(a is b for a, b in zip(sink.chunks[1:], first, strict=True)) for sink in sinks)
    assert hub.readers == 0
    await hub.close()


async def test_a_feed_whose_sink_refuses_ends_and_the_others_go_on(api: Api) -> None:
    hub: EventHub = make_hub(api)
    await make_run(api, "r1")
    kept, refusing = Written(), Written(accept=1)
    runs = [asyncio.create_task(hub.feed("r1", "0-0", sink).run()) for sink in (kept, refusing)]
    await until(lambda: kept.chunks and refusing.chunks, "both replayed")
    await add_progress(api, "r1", 1)
    await asyncio.wait_for(runs[1], 10)  # its second batch was refused: it ended
    assert hub.subscribers("r1") == 1
    await add_progress(api, "r1", 1, start=1)
    await api.store.finish_run("r1", RunStatus.CANCELLED)
    await asyncio.wait_for(runs[0], 10)
    assert kept.ids() == await stored_ids(api, "r1")
    await hub.close()
