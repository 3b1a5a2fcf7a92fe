"""The events' JSON the Redis store appends: every field of ``NodeEvent.to_json``, the
timestamp first (lua/prelude.lua ``stamped`` reads it there)."""

from __future__ import annotations

import json

from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.store.creation import event_json


def test_event_json_holds_every_field_of_to_json_with_the_timestamp_first() -> None:
    event = NodeEvent(run_id="r1", node_id="n1", node_type="set_fields", node_name="Step 1",
                      event_type=EventType.COMPLETED, data={"outputs": {"a": [1, "é"]}}, attempt=3)
    text = event_json(event)
    assert text.startswith('{"timestamp":')
    assert json.loads(text) == event.to_json()
    assert list(json.loads(text)) == ["timestamp", *(k for k in event.to_json() if k != "timestamp")]
