"""Expressions a node evaluates itself (Filter, Switch, Loop conditions, nested Loop bodies)
run under the host's expression limits and add to the node execution's one total."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from orchestrator.kernel.environment import StepOptions
from orchestrator.kernel.expression_limits import ExpressionLimits
from orchestrator.kernel.local import LocalRunner
from orchestrator.kernel.protocol import DataValue
from orchestrator.kernel.store import RunStatus
from tests.nodes.node_harness import make_ctx, registry
from tests.nodes.test_flow_graphs import edge, node

# A condition that builds a 531,440-character string per item: within max_string_chars
# (1,000,000) every time, but forty items build 21 million characters in all.
BIG = "len(" + "replace(" * 5 + "'abcdefgh'" + ", '', 'abcdefgh')" * 5 + ") > 0"


def tight(**limits: int) -> LocalRunner:
    """A runner whose steps carry the host's (here: tight) expression limits."""
    return LocalRunner(registry(), options=StepOptions(expression_limits=ExpressionLimits(**limits)))


def error_of(events: list[Any], node_id: str) -> dict[str, Any]:
    error: dict[str, Any] = next(e for e in events if e.event_type == "error" and e.node_id == node_id).data["error"]
    return error


def filter_graph(condition: str) -> dict[str, Any]:
    return {"id": "g-filter", "nodes": [node("t", "manual_trigger", "Start"),
                                        node("f", "filter", "Keep", condition=condition)],
            "edges": [edge("t", "f")]}


async def test_per_item_conditions_add_up_to_the_node_executions_total() -> None:
    done = await LocalRunner(registry()).run(filter_graph(BIG), list(range(40)))
    assert done.status == RunStatus.FAILED
    error = error_of(done.events, "f")
    assert "max_total_chars" in error["message"]
    assert "condition" in error["message"] and "item" in error["message"]


async def test_a_few_items_of_the_same_condition_stay_within_the_total() -> None:
    done = await LocalRunner(registry()).run(filter_graph(BIG), [1, 2, 3])
    assert done.status == RunStatus.SUCCEEDED
    assert done.output("f", "pass") == [1, 2, 3]


async def test_per_item_conditions_use_the_hosts_limits_not_the_defaults() -> None:
    condition = "$item.n + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 > 3"  # ~20 steps; the host allows 10
    items = [{"n": 1}, {"n": 5}]
    assert (await LocalRunner(registry()).run(filter_graph(condition), items)).status == RunStatus.SUCCEEDED
    done = await tight(max_steps=10).run(filter_graph(condition), items)
    assert done.status == RunStatus.FAILED
    message = error_of(done.events, "f")["message"]
    assert "max_steps" in message and "'condition'" in message and "item 0" in message


async def test_switch_cases_use_the_hosts_limits() -> None:
    g = {"id": "g-switch", "nodes": [
        node("t", "manual_trigger", "Start"),
        node("s", "switch", "Route", cases=[{"when": "input.n + 1 + 1 + 1 + 1 + 1 + 1 > 3"}]),
    ], "edges": [edge("t", "s")]}
    done = await tight(max_steps=8).run(g, {"n": 2})
    assert done.status == RunStatus.FAILED
    assert "max_steps" in error_of(done.events, "s")["message"]


async def test_the_nodes_of_a_loop_body_run_under_the_hosts_limits() -> None:
    body = {"id": "body", "nodes": [
        node("li", "loop_input", "Item"),
        node("sf", "set_fields", "Double", fields={"twice": "{{ input.s + input.s + input.s }}"}),
    ], "edges": [edge("li", "sf")]}
    g = {"id": "g-loop", "nodes": [node("t", "manual_trigger", "Start"),
                                   node("l", "loop", "Each", body=body, mode="for_each")],
         "edges": [edge("t", "l")]}
    assert (await LocalRunner(registry()).run(g, [{"s": "ab"}, {"s": "cd"}])).status == RunStatus.SUCCEEDED
    done = await tight(max_string_chars=5).run(g, [{"s": "ab"}, {"s": "cd"}])
    assert done.status == RunStatus.FAILED
    assert "max_string_chars" in error_of(done.events, "l")["message"]


# -- time: steps add up over items; the node's timeout fires; its thread stops ---------

# The red-team condition: 150 terms, ~300 steps per item; 50,000 items are 15 million steps
# (29-41 s of a frozen worker before), each item within max_steps.
LONG = " + ".join(["$item"] * 150) + " > -1"


async def test_a_condition_over_many_items_fails_on_the_total_step_budget_naming_it() -> None:
    began = time.monotonic()
    done = await LocalRunner(registry()).run(filter_graph(LONG), list(range(50_000)))
    assert done.status == RunStatus.FAILED
    message = error_of(done.events, "f")["message"]
    assert "parameter 'condition'" in message
    assert "above the limit of 2000000 (max_total_steps)" in message
    assert time.monotonic() - began < 30  # bounded; bench/ has the timing


async def test_a_simple_condition_over_a_hundred_thousand_items_stays_within_the_budget() -> None:
    items = [{"age": i % 40} for i in range(100_000)]
    done = await LocalRunner(registry()).run(filter_graph("$item.age >= 18"), items)
    assert done.status == RunStatus.SUCCEEDED
    assert len(done.output("f", "pass")) == 100_000 * 22 // 40


async def test_a_filters_timeout_fires_and_the_evaluation_left_in_its_thread_stops() -> None:
    g = filter_graph(LONG)
    g["nodes"][1]["settings"] = {"timeout_s": 0.3}
    done = await LocalRunner(registry()).run(g, list(range(50_000)))
    assert done.status == RunStatus.FAILED
    assert error_of(done.events, "f")["code"] == "node_timeout"
    cpu = time.process_time()
    await asyncio.sleep(0.5)  # a thread still evaluating would burn this half second
    assert time.process_time() - cpu < 0.25


async def test_stopping_the_spending_ends_a_filter_running_in_a_thread() -> None:
    ctx = make_ctx(node_type="filter")
    data = {"condition": LONG}
    work = asyncio.ensure_future(asyncio.to_thread(
        registry().get("filter").executor.execute,  # type: ignore[attr-defined]
        data, {"input": DataValue("data", list(range(50_000)))}, ctx))
    await asyncio.sleep(0.1)
    ctx.expression_spending.stop("the node execution it belongs to has ended")
    with pytest.raises(ValueError, match="evaluation stopped"):
        await asyncio.wait_for(work, 1.0)
