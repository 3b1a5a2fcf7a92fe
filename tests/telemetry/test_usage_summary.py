"""Usage sums: per node and per run, every attempt counted, a Loop's body under the loop,
and the usage numbers the kernel keeps."""

from __future__ import annotations

from orchestrator.kernel.protocol import NodeEvent
from orchestrator.kernel.usage import Usage
from orchestrator.telemetry.pricing import parse_table
from orchestrator.telemetry.usage import short, summarize

PRICES = parse_table({"models": {"dryrun:*": {"input": 1.0, "output": 2.0}}}, "test")


def ev(node: str, kind: str, usage: dict[str, dict[str, float]] | None, **data: object) -> NodeEvent:
    return NodeEvent(run_id="r", node_id=node, node_type="agent", event_type=kind,
                     data={**data, **({"usage": usage} if usage is not None else {})})


def test_usage_ignores_values_that_are_not_non_negative_numbers() -> None:
    usage = Usage()
    usage.add("k", {"input_tokens": 3, "output_tokens": 2.5, "bad": "x", "flag": True, "neg": -1})
    usage.add("k", {"input_tokens": 4})
    assert usage.to_json() == {"k": {"input_tokens": 7, "output_tokens": 2.5}}


def test_a_run_sums_its_nodes_and_every_attempt_of_a_node() -> None:
    events = [
        ev("a", "retry", {"dryrun:m": {"input_tokens": 10, "output_tokens": 1}}),
        ev("a", "completed", {"dryrun:m": {"input_tokens": 10, "output_tokens": 2}}),
        ev("b", "completed", {"dryrun:m": {"input_tokens": 5, "output_tokens": 5}, "acme:x": {"input_tokens": 1}}),
        ev("c", "completed", None),
        ev("loop", "completed", {"dryrun:m": {"input_tokens": 99}}, subgraph="body[0]"),  # its body's
        ev("a", "agent_event", {"dryrun:m": {"input_tokens": 1000}}),  # not an execution's own
    ]
    summary = summarize(events, PRICES)
    total = summary["total"]
    assert (total["input_tokens"], total["output_tokens"], total["total_tokens"]) == (125, 8, 133)
    assert total["cost_usd"] == round((124 * 1.0 + 8 * 2.0) / 1e6, 8)
    assert total["unpriced"] == ["acme:x"]
    assert summary["nodes"]["a"]["input_tokens"] == 20 and summary["nodes"]["a"]["output_tokens"] == 3
    assert summary["nodes"]["loop"]["input_tokens"] == 99
    assert set(summary["nodes"]) == {"a", "b", "loop"}
    assert short(total).startswith("133 tokens (125 in, 8 out), $0.00014")


def test_a_run_without_priced_usage_has_an_unknown_cost() -> None:
    summary = summarize([ev("a", "completed", {"acme:x": {"input_tokens": 3}})], PRICES)
    assert summary["total"]["cost_usd"] is None
    assert "cost unknown" in short(summary["total"])
