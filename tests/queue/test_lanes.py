"""Lanes: a workspace's runs travel on one broker queue of ``ORCH_LANES``, whoever sends
their messages, and a worker's app declares every lane."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.queue.app import LANES_CONF, make_celery
from orchestrator.queue.dispatch import send_drains, send_nodes
from orchestrator.queue.lanes import NODE_QUEUE, lane_of, lane_queues, new_run_id, queue_for, tagged
from orchestrator.settings import Settings
from tests.queue.test_dispatch import FakeCelery


def test_lanes_are_named_after_the_node_queue_lane_zero_first() -> None:
    assert lane_queues(1) == [NODE_QUEUE]
    assert lane_queues(3) == ["orchestrator", "orchestrator.1", "orchestrator.2"]
    with pytest.raises(ValueError, match="ORCH_LANES"):
        lane_queues(0)


def test_every_run_of_a_workspace_has_its_workspace_s_lane() -> None:
    ids = [new_run_id("acme") for _ in range(50)]
    assert len(set(ids)) == 50 and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)
    assert len({lane_of(i, 8) for i in ids}) == 1
    lanes = {lane_of(new_run_id(f"ws-{n}"), 8) for n in range(64)}
    assert len(lanes) == 8, "workspaces spread over every lane"


def test_a_child_run_travels_in_its_parent_s_lane_even_with_a_chosen_parent_id() -> None:
    digest = "f" * 64
    for parent in (new_run_id("acme"), "my-own-run-id", "x"):
        child = tagged(parent, digest)
        assert all(lane_of(child, n) == lane_of(parent, n) for n in (2, 3, 8, 256))


def test_node_and_drain_messages_go_to_the_run_s_lane() -> None:
    app = FakeCelery()
    app.conf[LANES_CONF] = 8
    run_a, run_b = new_run_id("a"), new_run_id("b")
    send_nodes(app, run_a, ["x", "y"], countdown_s=None)  # type: ignore[arg-type]
    send_drains(app, run_b, 2)  # type: ignore[arg-type]
    queues = [kw["queue"] for _, kw in app.sent]
    assert queues == [queue_for(run_a, 8)] * 2 + [queue_for(run_b, 8)] * 2


@pytest.mark.parametrize("broker", ["redis://127.0.0.1:1/0", "amqp://guest:guest@127.0.0.1:1//"])
def test_the_app_declares_every_lane_so_a_worker_without_q_consumes_them_all(broker: str) -> None:
    settings = Settings(lanes=4, broker_url=broker if broker.startswith("amqp") else None)
    app = make_celery(broker, settings)
    queues: list[Any] = list(app.conf.task_queues)
    assert [q.name for q in queues] == lane_queues(4)
    assert [q.routing_key for q in queues] == lane_queues(4)
    if broker.startswith("amqp"):  # quorum queues on one topic exchange (delayed delivery binds each)
        assert {q.exchange.name for q in queues} == {NODE_QUEUE}
        assert all(q.queue_arguments == {"x-queue-type": "quorum"} for q in queues)
    app.close()


def test_a_lane_count_out_of_range_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValidationError, match="lanes"):
        Settings(lanes=0)
