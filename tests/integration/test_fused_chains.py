"""Chains of pure nodes on real workers (kernel/fusion.py): a chain of set_fields and a
conditional runs in the steps that ready it and is stored in one script call per chain,
and the run's events, states and outputs are those of the same graph run a node at a time
in one process."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.kernel.local import LocalRunner
from orchestrator.kernel.registry import Registry

pytestmark = pytest.mark.integration


def flow(source: str, target: str, port: str = "output") -> dict[str, Any]:
    return {"id": f"{source}-{target}", "source": source, "sourceHandle": port, "target": target,
            "targetHandle": "input", "data": {"channel": "flow"}}


GRAPH = {
    "id": "fused",
    "nodes": [
        {"id": "t", "type": "manual_trigger", "name": "Start"},
        {"id": "s1", "type": "set_fields", "name": "One", "data": {"fields": {"a": "{{ input.x + 1 }}"}}},
        {"id": "s2", "type": "set_fields", "name": "Two", "data": {"fields": {"b": "{{ input.a * 10 }}"}}},
        {"id": "check", "type": "conditional", "name": "Big?",
         "data": {"value": "{{ input.b }}", "operation": "gt", "compare_to": 5}},
        {"id": "high", "type": "set_fields", "name": "High", "data": {"fields": {"band": "high"}}},
        {"id": "low", "type": "set_fields", "name": "Low", "data": {"fields": {"band": "low"}}},
        {"id": "tail", "type": "set_fields", "name": "Tail",
         "data": {"fields": {"from": "{{ $('One').item.json.a }}"}}},
    ],
    "edges": [flow("t", "s1"), flow("s1", "s2"), flow("s2", "check"), flow("check", "high", "true"),
              flow("check", "low", "false"), flow("high", "tail")],
}


def story(events: list[Any]) -> list[tuple[str, str]]:
    """The node events, in order, without times and worker ids."""
    return [(e.node_id, e.event_type) for e in events if e.node_id]


async def test_a_chain_of_pure_nodes_runs_on_workers_as_it_runs_a_node_at_a_time(run_graph: Any,
                                                                                 registry: Registry) -> None:
    result = await run_graph(GRAPH, {"x": 1})
    assert result.status == "succeeded"
    assert result.outputs["tail"]["output"] == {"x": 1, "a": 2, "b": 20, "band": "high", "from": 2}
    assert result.states["low"] == "skipped"
    local = await LocalRunner(registry).run(GRAPH, {"x": 1})
    assert story([e for _, e in result.events]) == story(local.events)
    started = [e for _, e in result.events if e.event_type == "started"]
    assert all(e.data and e.data.get("worker_id") for e in started)
    done = [e for _, e in result.events if e.event_type == "completed"]
    assert all(e.data["duration_ms"] >= 0 for e in done if e.node_id != "t")
