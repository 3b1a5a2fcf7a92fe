"""Retries, error ports and continue-on-fail, on real workers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fake_nodes import graph

pytestmark = pytest.mark.integration

FAST_RETRY = {"initial_interval_s": 0.05, "backoff_factor": 1.0, "jitter": False}


def with_settings(g: dict[str, Any], node_id: str, **settings: Any) -> dict[str, Any]:
    for node in g["nodes"]:
        if node["id"] == node_id:
            node["settings"] = settings
    return g


async def test_flaky_node_succeeds_on_a_later_attempt_after_retry_events(run_graph: Any) -> None:
    g = graph(
        [("t", "manual_trigger", "Start"), ("f", "flaky", "Flaky", {"fail_times": 2}),
         ("after", "probe", "After")],
        [("t", "output", "f", "input"), ("f", "output", "after", "input")],
    )
    with_settings(g, "f", retry={"max_attempts": 3, **FAST_RETRY})
    result = await run_graph(g, {"x": 1})
    assert result.status == "succeeded"
    assert [e.data["attempt"] for e in result.of("f", "retry") if e.data] == [1, 2]
    assert result.output("f") == {"input": {"x": 1}, "attempt": 3}
    assert result.states["after"] == "succeeded"


async def test_node_that_keeps_failing_routes_to_its_error_port_after_retries(
    run_graph: Any,
) -> None:
    g = graph(
        [("t", "manual_trigger", "Start"), ("f", "flaky", "Flaky", {"fail_times": 99}),
         ("ok", "probe", "On Success"), ("handler", "probe", "On Error")],
        [("t", "output", "f", "input"), ("f", "output", "ok", "input"),
         ("f", "error", "handler", "input")],
    )
    with_settings(g, "f", retry={"max_attempts": 2, **FAST_RETRY}, on_error="error_port")
    result = await run_graph(g, {"x": 1})
    assert result.status == "succeeded"
    assert len(result.of("f", "retry")) == 1
    assert result.states["ok"] == "skipped"
    assert result.states["handler"] == "succeeded"
    [received] = result.output("handler")["input"]  # probe's input takes many edges: a list
    assert "flaky: attempt 2 fails" in received["error"]
    assert received["input"] == {"x": 1}


async def test_failing_node_in_continue_mode_passes_its_error_on_as_data(run_graph: Any) -> None:
    g = graph(
        [("t", "manual_trigger", "Start"), ("b", "boom", "Boom", {"message": "bad input"}),
         ("next", "probe", "Next")],
        [("t", "output", "b", "input"), ("b", "output", "next", "input")],
    )
    with_settings(g, "b", on_error="continue")
    result = await run_graph(g, {"x": 1})
    assert result.status == "succeeded"
    assert result.states["b"] == "failed"
    [received] = result.output("next")["input"]
    assert "boom: bad input" in received["error"]


async def test_failing_node_in_stop_mode_fails_the_run_and_names_the_node(run_graph: Any) -> None:
    g = graph(
        [("t", "manual_trigger", "Start"), ("b", "boom", "Boom", {"message": "bad input"}),
         ("next", "probe", "Next")],
        [("t", "output", "b", "input"), ("b", "output", "next", "input")],
    )
    result = await run_graph(g, {"x": 1})
    assert result.status == "failed"
    assert result.of("next", "started") == []
    errors = result.of("b", "error")
    assert len(errors) == 1 and errors[0].data
    assert "boom: bad input" in errors[0].data["error"]["message"]
