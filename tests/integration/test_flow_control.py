"""Branching graphs run on real workers: diamonds, dead branches, switch, filter, loop."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fake_nodes import graph

pytestmark = pytest.mark.integration


def set_fields(node_id: str, name: str, **fields: Any) -> tuple[str, str, str, dict[str, Any]]:
    return (node_id, "set_fields", name, {"fields": fields})


async def test_diamond_runs_each_node_once_and_merges_both_branches(run_graph: Any) -> None:
    g = graph(
        [("t", "manual_trigger", "Start"), set_fields("a", "Left", left=True),
         set_fields("b", "Right", right=True), ("m", "merge", "Merge", {"mode": "combine"})],
        [("t", "output", "a", "input"), ("t", "output", "b", "input"),
         ("a", "output", "m", "input_1"), ("b", "output", "m", "input_2")],
    )
    result = await run_graph(g, {"seed": 1})
    assert result.status == "succeeded"
    assert result.output("m") == {"seed": 1, "left": True, "right": True}
    for node_id in ("t", "a", "b", "m"):
        assert len(result.of(node_id, "completed")) == 1, node_id


async def test_merge_fires_with_the_live_input_when_the_other_branch_is_dead(
    run_graph: Any,
) -> None:
    g = graph(
        [("t", "manual_trigger", "Start"),
         ("c", "conditional", "Big?", {"condition": "{{ input.score > 5 }}"}),
         set_fields("hi", "High", band="high"), set_fields("lo", "Low", band="low"),
         ("m", "merge", "Merge", {"mode": "append"})],
        [("t", "output", "c", "input"), ("c", "true", "hi", "input"),
         ("c", "false", "lo", "input"), ("hi", "output", "m", "input_1"),
         ("lo", "output", "m", "input_2")],
    )
    result = await run_graph(g, {"score": 3})
    assert result.status == "succeeded"
    assert result.states["hi"] == "skipped"
    assert result.states["lo"] == "succeeded"
    assert result.output("m") == [{"score": 3, "band": "low"}]
    assert result.of("hi", "started") == []


async def test_switch_runs_only_the_matching_case(run_graph: Any) -> None:
    cases = [{"id": "small", "when": "{{ input.n < 10 }}"},
             {"id": "big", "when": "{{ input.n >= 10 }}"}]
    g = graph(
        [("t", "manual_trigger", "Start"), ("s", "switch", "Size", {"cases": cases}),
         set_fields("small", "Small", size="small"), set_fields("big", "Big", size="big"),
         set_fields("other", "Other", size="other")],
        [("t", "output", "s", "input"), ("s", "case_0", "small", "input"),
         ("s", "case_1", "big", "input"), ("s", "default", "other", "input")],
    )
    result = await run_graph(g, {"n": 42})
    assert result.status == "succeeded"
    assert result.output("big") == {"n": 42, "size": "big"}
    assert result.states["small"] == "skipped"
    assert result.states["other"] == "skipped"


async def test_filter_sends_passing_and_rejected_items_down_separate_branches(
    run_graph: Any,
) -> None:
    people = [{"name": "ada", "age": 36}, {"name": "tim", "age": 12}, {"name": "eve", "age": 19}]
    g = graph(
        [("t", "manual_trigger", "Start"),
         ("f", "filter", "Adults", {"condition": "{{ $item.age >= 18 }}"}),
         ("ok", "probe", "Accepted"), ("no", "probe", "Rejected")],
        [("t", "output", "f", "input"), ("f", "pass", "ok", "input"),
         ("f", "reject", "no", "input")],
    )
    result = await run_graph(g, people)
    assert result.status == "succeeded"
    assert result.output("f", "pass") == [people[0], people[2]]
    assert result.output("f", "reject") == [people[1]]
    assert result.states["ok"] == result.states["no"] == "succeeded"


async def test_filter_with_nothing_rejected_skips_the_reject_branch(run_graph: Any) -> None:
    g = graph(
        [("t", "manual_trigger", "Start"),
         ("f", "filter", "Adults", {"condition": "{{ $item.age >= 18 }}"}),
         ("ok", "probe", "Accepted"), ("no", "probe", "Rejected")],
        [("t", "output", "f", "input"), ("f", "pass", "ok", "input"),
         ("f", "reject", "no", "input")],
    )
    result = await run_graph(g, [{"age": 40}])
    assert result.status == "succeeded"
    assert result.states["no"] == "skipped"


async def test_loop_runs_its_body_once_per_item(run_graph: Any) -> None:
    body = graph(
        [("li", "loop_input", "Item"), ("d", "set_fields", "Mark", {"fields": {"seen": True}})],
        [("li", "output", "d", "input")], id="body",
    )
    g = graph(
        [("t", "manual_trigger", "Start"),
         ("l", "loop", "Each", {"mode": "for_each", "body": body})],
        [("t", "output", "l", "input")],
    )
    items = [{"n": 1}, {"n": 2}, {"n": 3}]
    result = await run_graph(g, items)
    assert result.status == "succeeded", result.of("l", "error")
    assert result.output("l")["results"] == [{**item, "seen": True} for item in items]
    assert result.output("l")["iterations"] == len(items)
