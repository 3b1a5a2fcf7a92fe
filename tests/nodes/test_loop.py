"""Loop runs its body per item or until a condition holds (fake run_subgraph)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.local import LocalRunner
from orchestrator.kernel.protocol import DataValue, SubgraphResult
from orchestrator.kernel.store import RunStatus
from orchestrator.kernel.validation import validate_graph
from orchestrator.settings import Settings
from tests.nodes.node_harness import make_ctx, registry, run_node, values
from tests.nodes.test_flow_graphs import edge, node

BODY = {"id": "body", "nodes": [{"id": "li", "type": "loop_input", "name": "Item", "data": {}}],
        "edges": []}


def body_returning(fn: Any) -> Any:
    """A fake run_subgraph whose single sink outputs fn(run_input)."""

    async def run(graph: dict[str, Any], run_input: Any, label: str | None) -> SubgraphResult:
        value = fn(run_input)
        return SubgraphResult(status="succeeded", outputs={},
                              sink_outputs=[DataValue(type="data", value=value)])

    return run


async def test_loop_for_each_collects_one_result_per_item_in_order() -> None:
    items = [3, 1, 2]
    out = values(await run_node("loop", {"mode": "for_each", "body": BODY}, {"input": items},
                                subgraph=body_returning(lambda x: x * 10), node_name="Each"))
    assert out["output"] == {"results": [x * 10 for x in items], "iterations": len(items)}


async def test_loop_labels_each_iteration_with_the_node_name_and_index() -> None:
    ctx = make_ctx(node_type="loop", node_name="Each", subgraph=body_returning(lambda x: x))
    entry = registry().get("loop")
    data = {"mode": "for_each", "body": BODY, "max_iterations": 100, "concurrency": 1}
    await entry.executor.execute(data, {"input": DataValue("data", ["a", "b"])}, ctx)  # type: ignore[attr-defined]
    assert ctx.runtime.calls == [("a", "Each[0]"), ("b", "Each[1]")]  # type: ignore[attr-defined]


async def test_loop_for_each_runs_items_concurrently_but_keeps_their_order() -> None:
    running = 0
    peak = 0

    async def slow(graph: dict[str, Any], run_input: Any, label: str | None) -> SubgraphResult:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        running -= 1
        return SubgraphResult("succeeded", {}, [DataValue("data", run_input)])

    items = list(range(7))
    out = values(await run_node("loop", {"body": BODY, "concurrency": 3}, {"input": items},
                                subgraph=slow))
    assert out["output"]["results"] == items
    assert 1 < peak <= 3


async def test_loop_reads_items_from_the_parameter_or_an_items_field() -> None:
    out = values(await run_node("loop", {"body": BODY, "items": [1, 2]}, {"input": {"x": 1}},
                                subgraph=body_returning(lambda x: x)))
    assert out["output"]["results"] == [1, 2]
    out = values(await run_node("loop", {"body": BODY}, {"input": {"items": [5]}},
                                subgraph=body_returning(lambda x: x)))
    assert out["output"]["results"] == [5]


async def test_loop_until_feeds_each_result_into_the_next_iteration() -> None:
    data = {"mode": "until", "body": BODY, "condition": "{{ input.n >= 20 }}"}
    out = values(await run_node("loop", data, {"input": {"n": 1}},
                                subgraph=body_returning(lambda v: {"n": v["n"] * 3})))
    n, steps = 1, 0
    while n < 20:
        n, steps = n * 3, steps + 1
    assert out["output"] == {"result": {"n": n}, "iterations": steps}


async def test_loop_until_fails_when_max_iterations_is_reached() -> None:
    data = {"mode": "until", "body": BODY, "condition": "{{ input > 100 }}", "max_iterations": 4}
    with pytest.raises(ValueError, match="'max_iterations' \\(4\\)"):
        await run_node("loop", data, {"input": 0}, subgraph=body_returning(lambda v: v + 1))


async def test_loop_names_the_iteration_that_failed() -> None:
    async def failing(graph: dict[str, Any], run_input: Any, label: str | None) -> SubgraphResult:
        if run_input == "bad":
            return SubgraphResult("failed", {}, [], error={"message": "boom in To Text"})
        return SubgraphResult("succeeded", {}, [DataValue("data", run_input)])

    with pytest.raises(RuntimeError, match="iteration 2 failed: boom in To Text"):
        await run_node("loop", {"body": BODY}, {"input": ["a", "b", "bad"]}, subgraph=failing)


async def test_loop_result_is_a_list_when_the_body_has_several_sinks() -> None:
    async def two(graph: dict[str, Any], run_input: Any, label: str | None) -> SubgraphResult:
        return SubgraphResult("succeeded", {}, [DataValue("data", run_input),
                                                DataValue("data", -run_input)])

    out = values(await run_node("loop", {"body": BODY}, {"input": [1, 2]}, subgraph=two))
    assert out["output"]["results"] == [[1, -1], [2, -2]]


async def test_loop_rejects_a_body_without_exactly_one_loop_input() -> None:
    body = {"nodes": [{"id": "a", "type": "manual_trigger", "name": "A", "data": {}}], "edges": []}
    with pytest.raises(ValueError, match="exactly one loop_input"):
        await run_node("loop", {"body": body}, {"input": [1]}, subgraph=body_returning(lambda x: x))


async def test_loop_rejects_more_items_than_max_iterations() -> None:
    with pytest.raises(ValueError, match="'max_iterations'"):
        await run_node("loop", {"body": BODY, "max_iterations": 2}, {"input": [1, 2, 3]},
                       subgraph=body_returning(lambda x: x))


# -- nested loops share one bound on iterations in flight ------------------------------


def nested(outer: Any, inner: Any) -> dict[str, Any]:
    """loop(outer) -> body: loop(inner) -> body: a Type Converter."""
    inner_body = {"id": "ib", "nodes": [node("li", "loop_input", "Item"),
                                        node("c", "type_converter", "Text", to="string")],
                  "edges": [edge("li", "c")]}
    outer_body = {"id": "ob", "nodes": [node("li", "loop_input", "Item"),
                                        node("l2", "loop", "Inner", items="{{ [input, input] }}",
                                             concurrency=inner, body=inner_body)],
                  "edges": [edge("li", "l2")]}
    return {"id": "g-nested", "nodes": [node("t", "manual_trigger", "Start"),
                                        node("l1", "loop", "Outer", concurrency=outer, body=outer_body)],
            "edges": [edge("t", "l1")]}


def test_nested_loops_whose_concurrencies_multiply_past_the_bound_are_refused_at_validation() -> None:
    """The red-team graph: 64 x 64 iterations (and Code sandboxes) from one node step."""
    with pytest.raises(ParameterError) as info:
        validate_graph(nested(64, 64), registry())
    message = info.value.message
    assert "parameter 'concurrency' on node l2 (\"Inner\")" in message
    assert "4096 runs of its nested graph in flight" in message and "limit of 64 (max_fan_out)" in message
    assert (info.value.node_id, info.value.parameter) == ("l1", "body")
    with pytest.raises(ParameterError, match="128 runs"):
        validate_graph(nested(8, 16), registry())


def test_nested_loops_within_the_bound_validate() -> None:
    validate_graph(nested(8, 8), registry())
    validate_graph(nested(64, 1), registry())


def test_the_bound_is_the_workers_setting() -> None:
    limits = Settings(loop_max_in_flight=16).graph_limits()
    with pytest.raises(ParameterError, match="limit of 16"):
        validate_graph(nested(8, 8), registry(), limits)
    validate_graph(nested(4, 4), registry(), limits)


async def test_a_concurrency_from_an_expression_is_checked_when_the_loop_runs() -> None:
    done = await LocalRunner(registry()).run(nested(8, "{{ 16 }}"), [1, 2])
    assert done.status == RunStatus.FAILED
    error = next(e for e in done.events if e.event_type == "error" and e.node_id == "l1").data["error"]
    assert "parameter 'concurrency' (16) inside loops running 8 iterations at once" in error["message"]
    assert "128 in flight, above ORCH_LOOP_MAX_IN_FLIGHT (64)" in error["message"]


async def test_nested_loops_within_the_bound_run() -> None:
    done = await LocalRunner(registry()).run(nested(8, "{{ 8 }}"), [1, 2])
    assert done.status == RunStatus.SUCCEEDED
    assert done.output("l1")["results"] == [{"results": ["1", "1"], "iterations": 2},
                                            {"results": ["2", "2"], "iterations": 2}]
