"""A compiled plan's graph is kept once, for every run derived from it."""

from __future__ import annotations

from orchestrator.kernel.compile import compile_run
from orchestrator.kernel.lookahead import plan_graph
from orchestrator.kernel.validation import validate_graph
from tests.fake_nodes import graph, make_registry


def test_runs_derived_from_one_compiled_plan_share_its_parsed_graph() -> None:
    g = graph([("a", "emit", "A", {"value": 5}), ("b", "relay", "B")], [("a", "out", "b", "in")])
    compiled = compile_run(validate_graph(g, make_registry()), "", None)
    first, second = compiled.for_run("r1"), compiled.for_run("r2")
    parsed = plan_graph(first)
    assert plan_graph(second) is parsed and plan_graph(compiled) is parsed
    assert [n.id for n in parsed.nodes] == ["a", "b"]


def test_a_plan_of_its_own_parses_its_own_graph() -> None:
    g = graph([("a", "emit", "A", {"value": 5})], [])
    one = compile_run(validate_graph(g, make_registry()), "r1", None)
    other = compile_run(validate_graph(g, make_registry()), "r2", None)
    assert plan_graph(one) is not plan_graph(other)


def test_a_step_that_changes_its_settings_changes_nothing_the_next_step_sees() -> None:
    g = graph([("a", "emit", "A", {"value": 5})], [])
    parsed = plan_graph(compile_run(validate_graph(g, make_registry()), "r1", None))
    given = parsed.settings_data("a")
    given["retry"]["max_attempts"] = 99
    given["limits"].append({"key": "x"})
    again = parsed.settings_data("a")
    assert again["retry"]["max_attempts"] == 1 and again["limits"] == []
