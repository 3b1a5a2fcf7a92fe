"""Flow nodes inside whole graphs run by the kernel's local runner (one step path)."""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.local import run_graph_local
from orchestrator.kernel.store import NodeStatus, RunStatus
from tests.nodes.node_harness import registry


def node(nid: str, type_: str, name: str, **data: Any) -> dict[str, Any]:
    return {"id": nid, "type": type_, "name": name, "data": data}


def edge(source: str, target: str, source_handle: str = "output",
         target_handle: str = "input") -> dict[str, Any]:
    return {"id": f"{source}.{source_handle}->{target}.{target_handle}", "source": source,
            "sourceHandle": source_handle, "target": target, "targetHandle": target_handle,
            "data": {"channel": "flow"}}


def branching_graph() -> dict[str, Any]:
    return {"id": "g-branch", "nodes": [
        node("t", "manual_trigger", "Start"),
        node("c", "conditional", "Big?", condition="{{ input.score > 5 }}"),
        node("hi", "set_fields", "Mark High", fields={"band": "high"}),
        node("lo", "set_fields", "Mark Low", fields={"band": "low"}),
        node("m", "merge", "Join", mode="append"),
    ], "edges": [
        edge("t", "c"), edge("c", "hi", "true"), edge("c", "lo", "false"),
        edge("hi", "m", target_handle="input_1"), edge("lo", "m", target_handle="input_2"),
    ]}


async def test_merge_fires_when_other_branch_is_dead() -> None:
    run_input = {"score": 9}
    done = await run_graph_local(branching_graph(), registry(), run_input)
    assert done.status == RunStatus.SUCCEEDED
    assert done.node_states["lo"] == NodeStatus.SKIPPED
    assert done.output("m", "output") == [{**run_input, "band": "high"}]


async def test_conditional_expression_is_evaluated_by_the_kernel_before_routing() -> None:
    done = await run_graph_local(branching_graph(), registry(), {"score": 2})
    assert done.node_states["hi"] == NodeStatus.SKIPPED
    assert done.output("m", "output") == [{"score": 2, "band": "low"}]


async def test_filter_skips_the_reject_branch_when_everything_matches() -> None:
    graph = {"id": "g-filter", "nodes": [
        node("t", "manual_trigger", "Start"),
        node("f", "filter", "Adults", condition="{{ $item.age >= 18 }}"),
        node("ok", "type_converter", "Accepted", to="string"),
        node("no", "type_converter", "Rejected", to="string"),
    ], "edges": [edge("t", "f"), edge("f", "ok", "pass"), edge("f", "no", "reject")]}
    people = [{"age": 30}, {"age": 41}]
    done = await run_graph_local(graph, registry(), people)
    assert done.status == RunStatus.SUCCEEDED
    assert done.node_states["no"] == NodeStatus.SKIPPED
    assert done.node_states["ok"] == NodeStatus.SUCCEEDED


async def test_loop_runs_its_body_graph_once_per_item() -> None:
    body = {"id": "body", "nodes": [
        node("li", "loop_input", "Item"),
        node("s", "set_fields", "Tag", fields={"seen": True, "double": "{{ input.id * 2 }}"}),
    ], "edges": [edge("li", "s")]}
    graph = {"id": "g-loop", "nodes": [
        node("t", "manual_trigger", "Start"),
        node("l", "loop", "Each Row", mode="for_each", body=body, concurrency=2),
    ], "edges": [edge("t", "l")]}
    rows = [{"id": 1}, {"id": 2}, {"id": 3}]
    done = await run_graph_local(graph, registry(), rows)
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert done.output("l", "output") == {
        "results": [{**r, "seen": True, "double": r["id"] * 2} for r in rows],
        "iterations": len(rows)}


async def test_switch_routes_a_run_to_the_matching_case_only() -> None:
    cases = [{"id": "eu", "when": "{{ input.region == 'eu' }}"},
             {"id": "us", "when": "{{ input.region == 'us' }}"}]
    graph = {"id": "g-switch", "nodes": [
        node("t", "manual_trigger", "Start"),
        node("s", "switch", "Region", cases=cases),
        node("eu", "type_converter", "EU", to="string"),
        node("us", "type_converter", "US", to="string"),
        node("other", "type_converter", "Other", to="string"),
    ], "edges": [edge("t", "s"), edge("s", "eu", "case_0"), edge("s", "us", "case_1"),
                 edge("s", "other", "default")]}
    done = await run_graph_local(graph, registry(), {"region": "us"})
    ran = [n for n in ("eu", "us", "other") if done.node_states[n] == NodeStatus.SUCCEEDED]
    assert ran == ["us"]


def wide_join(width: int, mode: str = "append") -> dict[str, Any]:
    """A trigger fanned out to ``width`` set_fields nodes, all joined by one merge's
    ``inputs`` port; the edges into the merge are listed in reverse branch order."""
    nodes = [node("t", "manual_trigger", "Start"), node("m", "merge", "Join", mode=mode)]
    edges = []
    for i in range(width):
        nodes.append(node(f"b{i}", "set_fields", f"Branch {i}", fields={"i": i}))
        edges.append(edge("t", f"b{i}"))
    edges += [edge(f"b{i}", "m", target_handle="inputs") for i in reversed(range(width))]
    return {"id": "g-wide", "nodes": nodes, "edges": edges}


async def test_merge_joins_twenty_branches_in_edge_list_order() -> None:
    done = await run_graph_local(wide_join(20), registry(), {})
    assert done.status == RunStatus.SUCCEEDED
    assert [v["i"] for v in done.output("m", "output")] == list(reversed(range(20)))


async def test_merge_by_input_keys_many_branches_by_source_name() -> None:
    done = await run_graph_local(wide_join(5, mode="by_input"), registry(), {})
    assert done.output("m", "output") == {f"Branch {i}": {"i": i} for i in range(5)}


async def test_merge_of_many_waits_only_for_live_branches() -> None:
    graph = branching_graph()
    graph["edges"] = [e for e in graph["edges"] if e["target"] != "m"]
    graph["edges"] += [edge("hi", "m", target_handle="inputs"), edge("lo", "m", target_handle="inputs")]
    done = await run_graph_local(graph, registry(), {"score": 9})
    assert done.status == RunStatus.SUCCEEDED
    assert done.output("m", "output") == [{"score": 9, "band": "high"}]
