"""Execute Workflow and the distributed Loop against a fake child-run host (no Redis): what
they start, when they suspend, and what they make of a child's end. The real thing, on
workers: tests/integration/test_child_runs.py."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nodes._shared import loop_children
from orchestrator.host.children import CHILD_RUN, CHILD_RUNS, ChildResult, ChildSpec
from orchestrator.host.node_host import NodeHost
from orchestrator.kernel.errors import (
    ConfigurationError,
    NodeExecutionError,
    ParameterError,
    SuspendRequested,
    UsageBudgetError,
)
from orchestrator.kernel.protocol import FlowContext, NodeEvent
from orchestrator.kernel.validation import validate_graph
from orchestrator.settings import Settings
from tests.fake_nodes import graph
from tests.nodes.node_harness import make_ctx, registry, run_node


class FakeChildren:
    """Child runs in a dict: ``ended`` says how each ended (absent: still running)."""

    def __init__(self) -> None:
        self.started: list[ChildSpec] = []
        self.ended: dict[str, ChildResult] = {}
        self.cancelled: list[str] = []

    async def start(self, spec: ChildSpec) -> str:
        self.started.append(spec)
        return f"child-{spec.key or spec.graph_id}-{spec.attempt}"

    async def collect(self, run_ids: list[str]) -> dict[str, ChildResult]:
        return {r: self.ended[r] for r in run_ids if r in self.ended}

    async def node_events(self, run_id: str) -> list[NodeEvent]:
        return [NodeEvent(run_id=run_id, node_id="mark", node_type="probe", node_name="Mark",
                          event_type="completed", data={"ok": True})]

    async def cancel(self, run_ids: list[str], reason: str) -> None:
        self.cancelled.extend(run_ids)


def ctx_with(children: FakeChildren | None, resume: dict[str, Any] | None = None, attempt: int = 1,
             node_name: str = "Node") -> FlowContext:
    host = NodeHost(settings=Settings(), children=children)
    return dataclasses.replace(make_ctx(node_name=node_name), host=host, resume=resume, attempt=attempt)


async def test_it_starts_the_child_with_the_node_input_and_suspends_naming_it() -> None:
    children = FakeChildren()
    with pytest.raises(SuspendRequested) as paused:
        await _run(children, {"graph_id": "shared", "version": 3}, {"a": 1})
    [spec] = children.started
    assert (spec.graph_id, spec.version, spec.run_input, spec.parent_run, spec.parent_node) == \
        ("shared", 3, {"a": 1}, "run-test", "n1")
    assert paused.value.payload == {CHILD_RUN: "child-shared-1", "graph_id": "shared", "attempt": 1}


async def _run(children: FakeChildren, data: dict[str, Any], value: Any, **ctx_kw: Any) -> Any:
    from orchestrator.kernel.protocol import DataValue

    entry = registry().get("execute_workflow")
    return await entry.executor.execute(data, {"input": DataValue("data", value)},  # type: ignore[attr-defined]
                                        ctx_with(children, **ctx_kw))


def resumed(result: ChildResult, attempt: int = 1) -> dict[str, Any]:
    return {"payload": {CHILD_RUN: result.run_id, "graph_id": "shared", "attempt": attempt},
            "input": result.to_json()}


async def test_a_succeeded_child_s_output_is_the_node_s_output() -> None:
    done = ChildResult("c1", "succeeded", {"total": 5})
    out = await _run(FakeChildren(), {"graph_id": "shared"}, None, resume=resumed(done))
    assert out.outputs["output"].value == {"total": 5}


async def test_a_failed_child_fails_the_node_naming_the_child_and_its_error() -> None:
    failed = ChildResult("c1", "timed_out", error={"message": "the run passed its deadline"})
    with pytest.raises(NodeExecutionError, match=r"child run c1 of graph 'shared' timed_out: the run passed"):
        await _run(FakeChildren(), {"graph_id": "shared"}, None, resume=resumed(failed))


async def test_a_child_over_its_parent_s_budget_fails_the_node_with_the_budget_error() -> None:
    over = ChildResult("c1", "failed", error={"code": "usage_budget_exceeded", "budget": "max_tokens",
                                              "message": "run budget max_tokens exceeded"})
    with pytest.raises(UsageBudgetError, match="run budget max_tokens exceeded"):
        await _run(FakeChildren(), {"graph_id": "shared"}, None, resume=resumed(over))


async def test_a_retry_starts_a_new_child_instead_of_reading_the_last_attempt_s_result() -> None:
    children = FakeChildren()
    failed = ChildResult("c1", "failed", error={"message": "boom"})
    with pytest.raises(SuspendRequested):
        await _run(children, {"graph_id": "shared"}, 1, resume=resumed(failed, attempt=1), attempt=2)
    assert [s.attempt for s in children.started] == [2]


async def test_a_host_without_workers_says_it_cannot_run_a_child() -> None:
    with pytest.raises(ConfigurationError, match="needs workers"):
        await run_node("execute_workflow", {"graph_id": "shared"}, {"input": 1}, services={})


def test_validation_refuses_a_graph_that_runs_itself_naming_the_node() -> None:
    g = graph([("t", "manual_trigger", "Start"), ("sub", "execute_workflow", "Again", {"graph_id": "self"})],
              [("t", "output", "sub", "input")], id="self")
    with pytest.raises(ParameterError, match="names graph 'self' itself") as refused:
        validate_graph(g, registry())
    assert (refused.value.node_id, refused.value.parameter) == ("sub", "graph_id")
    validate_graph({**g, "id": "other"}, registry())  # another graph may run it


BODY = {"id": "body", "nodes": [{"id": "li", "type": "loop_input", "name": "Item", "data": {}}], "edges": []}


async def test_a_distributed_for_each_keeps_concurrency_children_and_returns_results_in_item_order() -> None:
    children = FakeChildren()
    items = ["a", "b", "c"]
    with pytest.raises(SuspendRequested) as first:
        await loop_children.for_each(BODY, items, 2, ctx_with(children, node_name="For each"))
    assert [(s.key, s.run_input, s.label) for s in children.started] == [("0", "a", "For each[0]"),
                                                                          ("1", "b", "For each[1]")]
    assert first.value.payload[CHILD_RUNS] == ["child-0-1", "child-1-1"]
    children.ended["child-1-1"] = ChildResult("child-1-1", "succeeded", sinks=["B"])  # the second ends first
    ctx = ctx_with(children, resume={"payload": first.value.payload, "input": {}}, node_name="For each")
    with pytest.raises(SuspendRequested) as second:
        await loop_children.for_each(BODY, items, 2, ctx)
    assert [s.key for s in children.started[2:]] == ["2"]
    assert sorted(second.value.payload[CHILD_RUNS]) == ["child-0-1", "child-2-1"]
    forwarded = [e.data for e in ctx.runtime.emitted]  # type: ignore[attr-defined]
    assert forwarded == [{"ok": True, "subgraph": "For each[1]", "inner_node_id": "mark", "inner_node_name": "Mark",
                          "inner_node_type": "probe", "child_run": "child-1-1"}]
    children.ended["child-0-1"] = ChildResult("child-0-1", "succeeded", sinks=["A"])
    children.ended["child-2-1"] = ChildResult("child-2-1", "succeeded", sinks=[])
    last = ctx_with(children, resume={"payload": second.value.payload, "input": {}}, node_name="For each")
    assert await loop_children.for_each(BODY, items, 2, last) == ["A", "B", None]


async def test_a_failed_iteration_cancels_the_running_ones_and_names_its_index() -> None:
    children = FakeChildren()
    with pytest.raises(SuspendRequested) as first:
        await loop_children.for_each(BODY, [1, 2, 3], 3, ctx_with(children))
    children.ended["child-1-1"] = ChildResult("child-1-1", "failed", error={"message": "bad item"})
    with pytest.raises(RuntimeError, match="loop iteration 1 failed: bad item"):
        await loop_children.for_each(BODY, [1, 2, 3], 3, ctx_with(children, resume={"payload": first.value.payload}))
    assert sorted(children.cancelled) == ["child-0-1", "child-2-1"]


async def test_a_distributed_until_feeds_each_result_into_the_next_iteration_until_the_condition_holds() -> None:
    children = FakeChildren()
    condition = "{{ input >= 3 }}"
    with pytest.raises(SuspendRequested) as paused:
        await loop_children.until(BODY, 1, condition, 5, ctx_with(children))
    for step, result in enumerate([2, 3]):
        [running] = paused.value.payload[CHILD_RUNS]
        children.ended[running] = ChildResult(running, "succeeded", sinks=[result])
        ctx = ctx_with(children, resume={"payload": paused.value.payload})
        if result < 3:
            with pytest.raises(SuspendRequested) as paused:
                await loop_children.until(BODY, 1, condition, 5, ctx)
            assert children.started[step + 1].run_input == result  # the last result is the next input
        else:
            assert await loop_children.until(BODY, 1, condition, 5, ctx) == (3, 2)
    assert [s.run_input for s in children.started] == [1, 2]
