"""Two agents in sequence with a Conditional between them, on real workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.kernel.protocol import EventType

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_conditional_agents.json"
AGENTS = ("triage", "escalate", "respond")


def conditional_graph() -> dict[str, Any]:
    """The example graph with an explicit offline model on every agent."""
    graph: dict[str, Any] = json.loads(EXAMPLE.read_text())
    for node in graph["nodes"]:
        if node["type"] == "agent":
            node["data"]["model"] = f"dryrun:{node['id']}"
    return graph


@pytest.mark.parametrize(("message", "chosen", "skipped"), [
    ("urgent: the server is down", "escalate", "respond"),
    ("hello there", "respond", "escalate"),
])
async def test_the_conditional_picks_one_agent_and_each_agent_streams_its_own_run(
        run_graph: Any, message: str, chosen: str, skipped: str) -> None:
    result = await run_graph(conditional_graph(), {"message": message})
    assert result.status == "succeeded"
    assert result.states[chosen] == "succeeded" and result.states[skipped] == "skipped"
    streams = {node: [(e.data or {}) for e in result.of(node, EventType.AGENT_EVENT)]
               for node in AGENTS}
    for node in ("triage", chosen):
        names = [d["event"] for d in streams[node]]
        assert names[0] == "RunStarted" and names[-1] == "RunCompleted", (node, names)
        # each node's events are its own agent's run, named after its node
        assert {d.get("agent") for d in streams[node]} == {
            next(e.node_name for e in result.of(node, EventType.STARTED))}
        run_ids = {d.get("run_id") for d in streams[node]}
        assert run_ids == {f"{result.run_id}:{node}"}
    assert streams[skipped] == []
    # the second agent ran after the first finished, on the first one's answer
    order = [e.node_id for _, e in result.events if e.event_type == EventType.AGENT_EVENT]
    assert order.index(chosen) > len(order) - order[::-1].index("triage") - 1
    triage_answer = result.output("triage")["response"]
    assert message in triage_answer
    assert triage_answer in result.output(chosen)["response"]
