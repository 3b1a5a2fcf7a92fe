"""EventStream (orchestrator/kernel/streaming.py): a node's streamed events go in order,
with one call in flight; what it emits meanwhile goes with the next call; a failed call
fails the node at its next emit or at the flush before its completion."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from orchestrator.errors import StorageBudgetError
from orchestrator.kernel import streaming
from orchestrator.kernel.local import run_graph_local
from orchestrator.kernel.protocol import NodeEvent
from orchestrator.kernel.streaming import EventStream
from tests.fake_nodes import graph, make_registry

TOKEN = 7


def event(i: int) -> NodeEvent:
    return NodeEvent(run_id="r", node_id="n", node_type="t", node_name="N", event_type="progress", data={"i": i})


class Store:
    """An ``append_events`` whose calls finish when the test opens ``gate``."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls: list[list[int]] = []
        self.gate = asyncio.Event()
        self.fail_at = fail_at

    async def append_events(self, events: Sequence[NodeEvent], *, token: int | None = None) -> list[str]:
        assert token == TOKEN  # every call under the node's claim
        self.calls.append([e.data["i"] for e in events if e.data])
        await self.gate.wait()
        if self.fail_at is not None and len(self.calls) >= self.fail_at:
            raise StorageBudgetError("the run's events pass ORCH_RUN_MAX_BYTES", limit="ORCH_RUN_MAX_BYTES",
                                     used=100, requested=10, bound=100)
        return [str(i) for i in range(len(events))]


async def test_what_a_node_emits_while_a_call_is_in_flight_goes_with_the_next_call_in_order() -> None:
    store = Store()
    stream = EventStream(store, TOKEN)
    await stream.emit(event(0))
    await asyncio.sleep(0)  # the first call is on its way, alone
    for i in range(1, 10):
        await stream.emit(event(i))
    assert store.calls == [[0]]
    store.gate.set()
    await stream.flush()
    assert store.calls == [[0], list(range(1, 10))]


async def test_a_node_far_ahead_of_its_calls_waits_for_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streaming, "MAX_WAITING", 3)
    store = Store()
    stream = EventStream(store, TOKEN)
    await stream.emit(event(0))
    await asyncio.sleep(0)
    for i in range(1, 3):
        await stream.emit(event(i))
    blocked = asyncio.ensure_future(stream.emit(event(3)))  # the third waiting event
    await asyncio.sleep(0.05)
    assert not blocked.done()
    store.gate.set()
    await asyncio.wait_for(blocked, 1)
    await stream.flush()
    assert [i for call in store.calls for i in call] == [0, 1, 2, 3]


async def test_a_failed_call_is_raised_at_the_next_emit_and_at_the_flush() -> None:
    store = Store(fail_at=1)
    store.gate.set()
    stream = EventStream(store, TOKEN)
    await stream.emit(event(0))
    await asyncio.sleep(0.01)
    with pytest.raises(StorageBudgetError):
        await stream.emit(event(1))
    with pytest.raises(StorageBudgetError):
        await stream.flush()
    assert store.calls == [[0]]  # nothing sent after the refusal


async def test_settle_waits_for_the_call_and_logs_its_failure(caplog: pytest.LogCaptureFixture) -> None:
    store = Store(fail_at=1)
    stream = EventStream(store, TOKEN)
    await stream.emit(event(0))
    asyncio.get_running_loop().call_later(0.02, store.gate.set)
    with caplog.at_level(logging.WARNING, logger="orchestrator.kernel.streaming"):
        await stream.settle()
    assert store.calls == [[0]]
    assert "ORCH_RUN_MAX_BYTES" in caplog.text


async def test_a_bursting_node_s_events_come_whole_and_in_order_before_its_completion() -> None:
    g = graph([("a", "emit", "A"), ("t", "ticker", "T", {"count": 500})], [("a", "out", "t", "in")])
    result = await run_graph_local(g, make_registry(), 1)
    own = [e for e in result.events if e.node_id == "t"]
    assert [e.event_type for e in own] == ["started", *["progress"] * 500, "completed"]
    assert [e.data["i"] for e in own[1:-1] if e.data] == list(range(500))
