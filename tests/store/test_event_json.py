"""The events' JSON the Redis store appends: every field of ``NodeEvent.to_json``, the
timestamp first (lua/prelude.lua ``stamped`` reads it there)."""

from __future__ import annotations

import json

from orchestrator.kernel.protocol import DataValue, EventType, NodeEvent
from orchestrator.store.creation import completed_json, dumps, event_json


def test_event_json_holds_every_field_of_to_json_with_the_timestamp_first() -> None:
    event = NodeEvent(run_id="r1", node_id="n1", node_type="set_fields", node_name="Step 1",
                      event_type=EventType.COMPLETED, data={"outputs": {"a": [1, "é"]}}, attempt=3)
    text = event_json(event)
    assert text.startswith('{"timestamp":')
    assert json.loads(text) == event.to_json()
    assert list(json.loads(text)) == ["timestamp", *(k for k in event.to_json() if k != "timestamp")]


def _completed(data: dict[str, object]) -> NodeEvent:
    return NodeEvent(run_id="r1", node_id="n1", node_type="set_fields", node_name="Step 1",
                     event_type=EventType.COMPLETED, data=data, attempt=2)


def test_a_completed_event_showing_its_outputs_whole_takes_their_stored_text() -> None:
    """The outputs' text the store keeps is written into the event instead of being
    encoded again: the same text as encoding the event whole."""
    value = {"items": [1, 2.5, "é", None, True], "nested": {"k": "v"}}
    outputs = {"out": DataValue("data", value), "other": DataValue("text", "hi")}
    stored = dumps({port: dv.to_json() for port, dv in outputs.items()})
    for data in (
        {"outputs": {p: dv.to_json() for p, dv in outputs.items()}, "outputs_truncated": False,
         "parameters": {"x": 1}, "worker_id": "w1", "duration_ms": 1.5},
        {"outputs": {p: dv.to_json() for p, dv in outputs.items()}},  # nothing else in data
    ):
        event = _completed(data)
        reused = completed_json(event, outputs, stored)
        assert reused == event_json(event)
    # Spliced, not encoded: a marker text in place of the outputs shows which path ran.
    event = _completed({"outputs": {p: dv.to_json() for p, dv in outputs.items()}, "parameters": {}})
    assert completed_json(event, outputs, '"SPLICED"') == event_json(event).replace(stored, '"SPLICED"')


def test_a_completed_event_not_showing_its_outputs_whole_is_encoded_from_its_data() -> None:
    outputs = {"out": DataValue("data", {"a": 1})}
    marker = '"SPLICED"'
    cut = {"out": {"type": "data", "preview": '{"a": 1', "chars": 8}}
    equal_not_same = {"out": {"type": "data", "value": {"a": 1}}}  # an equal copy, not the output itself
    for event in (
        _completed({"outputs": cut, "outputs_truncated": True}),
        _completed({"outputs": equal_not_same}),
        _completed({"worker_id": "w1", "outputs": {"out": outputs["out"].to_json()}}),  # outputs not first
        _completed({"outputs": {}}),
        _completed({}),
        _completed({"outputs": {"out": outputs["out"].to_json(), "more": outputs["out"].to_json()}}),
    ):
        assert completed_json(event, outputs, marker) == event_json(event)
    no_data = NodeEvent(run_id="r1", node_id="n1", node_type="set_fields", event_type=EventType.COMPLETED)
    assert completed_json(no_data, outputs, marker) == event_json(no_data)
