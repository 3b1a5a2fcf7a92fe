"""The Celery Dispatcher: one batch per call, node tasks with deterministic ids so a
redelivery names the same node; broker URLs for unix sockets."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from orchestrator.queue.app import NODE_QUEUE, NODE_TASK, broker_url
from orchestrator.queue.dispatch import Dispatcher, make_async_dispatch, make_dispatch, send_nodes, task_id


class _Producer:
    def __init__(self) -> None:
        self.batches = 0

    def __enter__(self) -> _Producer:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def batch(self) -> _Producer:
        self.batches += 1
        return self


class FakeCelery:
    """Records ``send_task`` calls; one producer per call, as kombu's pool lends one."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.producer = _Producer()
        self.conf: dict[str, Any] = {}  # no lanes configured: one queue

    def producer_or_acquire(self) -> _Producer:
        return self.producer

    def send_task(self, name: str, **kw: Any) -> None:
        self.sent.append((name, kw))


def test_node_tasks_are_sent_in_one_batch_with_deterministic_ids() -> None:
    app = FakeCelery()
    send_nodes(app, "r1", ["a", "b"])  # type: ignore[arg-type]
    assert app.producer.batches == 1
    assert [(n, kw["args"], kw["task_id"], kw["queue"]) for n, kw in app.sent] == [
        (NODE_TASK, ("r1", "a"), "r1:a", NODE_QUEUE), (NODE_TASK, ("r1", "b"), "r1:b", NODE_QUEUE)]
    assert task_id("r1", "a") == "r1:a"
    send_nodes(app, "r1", [])  # type: ignore[arg-type]
    assert app.producer.batches == 1  # nothing to send: no round trip


def test_the_celery_dispatcher_sends_each_call_s_nodes() -> None:
    """(An async dispatcher, as tests pass, is awaited by start_run: tests/conformance.)"""
    app = FakeCelery()
    dispatch: Dispatcher = make_dispatch(app)  # type: ignore[arg-type]
    assert dispatch("r2", ["x"]) is None
    dispatch("r3", ["y", "z"])
    assert [kw["task_id"] for _, kw in app.sent] == ["r2:x", "r3:y", "r3:z"]
    assert app.producer.batches == 2


def test_a_unix_socket_url_becomes_a_kombu_socket_url() -> None:
    assert broker_url("unix:///tmp/r.sock?db=3") == "redis+socket:///tmp/r.sock?virtual_host=3"
    assert broker_url("redis://h:6379/0") == "redis://h:6379/0"


class SlowCelery(FakeCelery):
    """A broker whose publish blocks its caller for ``delay_s`` (a slow socket)."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def send_task(self, name: str, **kw: Any) -> None:
        time.sleep(self.delay_s)
        super().send_task(name, **kw)


async def test_the_async_dispatcher_publishes_without_blocking_the_event_loop() -> None:
    app = SlowCelery(delay_s=0.3)
    dispatch: Dispatcher = make_async_dispatch(app)  # type: ignore[arg-type]
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    beat = asyncio.create_task(ticker())
    try:
        sent = dispatch("r4", ["a"])
        assert sent is not None
        await sent
    finally:
        beat.cancel()
    assert [kw["task_id"] for _, kw in app.sent] == ["r4:a"]
    assert ticks >= 10  # the loop ran other work while the publish waited (0.3 s of 0.01 s ticks)
