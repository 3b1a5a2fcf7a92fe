"""Conditional routes its input to exactly one of true/false."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from typing import Any

import pytest

from nodes._shared.patterns import PatternClock, PatternTimeout
from orchestrator.kernel.local import LocalRunner
from orchestrator.kernel.store import RunStatus
from tests.nodes.node_harness import registry, run_node, values
from tests.nodes.test_flow_graphs import edge, node

RECORD = {"score": 7, "status": "active", "tags": ["vip", "new"], "name": "Ada Lovelace"}


async def test_conditional_sends_the_input_to_true_when_the_condition_holds() -> None:
    out = values(await run_node("conditional", {"condition": True}, {"input": RECORD}))
    assert out == {"true": RECORD}


async def test_conditional_sends_the_input_to_false_only_when_the_condition_fails() -> None:
    out = values(await run_node("conditional", {"condition": False}, {"input": RECORD}))
    assert out == {"false": RECORD}


async def test_conditional_reads_a_string_false_as_false() -> None:
    out = values(await run_node("conditional", {"condition": "false"}, {"input": RECORD}))
    assert list(out) == ["false"]


@pytest.mark.parametrize(("value", "operation", "compare_to"), [
    (RECORD["score"], "gt", 5), (RECORD["score"], "gte", 7), (RECORD["score"], "lt", 10),
    (RECORD["score"], "lte", 7), (RECORD["status"], "equals", "active"),
    (str(RECORD["score"]), "equals", 7), (RECORD["status"], "not_equals", "banned"),
    (RECORD["tags"], "contains", "vip"), (RECORD["name"], "contains", "Love"),
    (RECORD["tags"], "not_contains", "old"), (RECORD["name"], "starts_with", "Ada"),
    (RECORD["name"], "ends_with", "lace"), (RECORD["name"], "matches_regex", r"^A\w+ L"),
    ("", "is_empty", None), ([], "is_empty", None), (RECORD["tags"], "is_not_empty", None),
    (RECORD["status"], "exists", None), (True, "is_true", None), ("no", "is_false", None),
])
async def test_conditional_operations_route_matching_values_to_true(
    value: Any, operation: str, compare_to: Any
) -> None:
    data = {"value": value, "operation": operation, "compare_to": compare_to}
    out = values(await run_node("conditional", data, {"input": RECORD}))
    assert list(out) == ["true"]


@pytest.mark.parametrize(("value", "operation", "compare_to"), [
    (3, "gt", 5), ("b", "equals", "a"), (["x"], "contains", "y"), (None, "exists", None),
    ("text", "is_empty", None), ("abc", "matches_regex", r"^\d+$"),
])
async def test_conditional_operations_route_other_values_to_false(
    value: Any, operation: str, compare_to: Any
) -> None:
    data = {"value": value, "operation": operation, "compare_to": compare_to}
    assert list(values(await run_node("conditional", data, {"input": RECORD}))) == ["false"]


async def test_conditional_needs_exactly_one_form() -> None:
    with pytest.raises(ValueError, match="'condition'"):
        await run_node("conditional", {}, {"input": RECORD})
    both = {"condition": True, "value": 1, "operation": "equals", "compare_to": 1}
    with pytest.raises(ValueError, match="not both"):
        await run_node("conditional", both, {"input": RECORD})


async def test_conditional_reports_a_bad_regular_expression_by_parameter() -> None:
    data = {"value": "x", "operation": "matches_regex", "compare_to": "(unclosed"}
    with pytest.raises(ValueError, match="compare_to"):
        await run_node("conditional", data, {"input": RECORD})


async def test_conditional_refuses_to_order_an_object_against_a_number() -> None:
    data = {"value": {"a": 1}, "operation": "gt", "compare_to": 1}
    with pytest.raises(ValueError, match="'value'"):
        await run_node("conditional", data, {"input": RECORD})


# -- regular expressions from graphs: a time budget, off the event loop -----------------

# Backtracks exponentially in Python's re (the red team froze a worker 12-16 s with 28
# characters against ^(a+)+$; this one would run for hours).
CATASTROPHIC = {"value": "a" * 40 + "!", "operation": "matches_regex", "compare_to": "^(a|aa)+$"}


async def test_a_backtracking_pattern_fails_within_its_budget_naming_the_setting() -> None:
    # unguarded, the match takes ~fib(60) steps (days); the budget is 1 s, and the bound
    # leaves room for a busy host's set-up of the node (its first import of the regex library)
    began = time.monotonic()
    with pytest.raises(PatternTimeout, match=r"parameter 'compare_to'.*ORCH_PATTERN_TIMEOUT_S"):
        await run_node("conditional", {**CATASTROPHIC, "value": "a" * 60 + "!"}, {"input": RECORD})
    assert time.monotonic() - began < 30


async def test_the_event_loop_keeps_running_while_a_pattern_is_matched() -> None:
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    ticker = asyncio.ensure_future(tick())
    try:
        with pytest.raises(PatternTimeout):
            await run_node("conditional", CATASTROPHIC, {"input": RECORD})
    finally:
        ticker.cancel()
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(ticks) > 20 and max(gaps) < 0.3


async def test_a_conditionals_timeout_fires_while_its_pattern_runs() -> None:
    g = {"id": "g-re", "nodes": [node("t", "manual_trigger", "Start"), node("c", "conditional", "Re", **CATASTROPHIC)],
         "edges": [edge("t", "c")]}
    g["nodes"][1]["settings"] = {"timeout_s": 0.2}
    done = await LocalRunner(registry()).run(g, {})
    assert done.status == RunStatus.FAILED
    failed = next(e for e in done.events if e.event_type == "error")
    assert failed.data["error"]["code"] == "node_timeout"
    # the node's own clock, from its start to its timeout (the run's set-up, slow on a busy
    # host, is not the point): before the pattern's own 1 s budget
    started = next(e for e in done.events if e.event_type == "started" and e.node_id == "c")
    assert failed.timestamp - started.timestamp < 0.9


@pytest.mark.parametrize(("value", "pattern", "port"), [
    ("order-1234", r"^order-\d+$", "true"), ("Order-1234", r"(?i)^order-\d+$", "true"),
    ("café", r"^\w+$", "true"), ("a,b", r"^\w+$", "false"), ("x" * 100_000 + "y", r"x+y$", "true"),
])
async def test_ordinary_patterns_keep_pythons_re_semantics(value: str, pattern: str, port: str) -> None:
    data = {"value": value, "operation": "matches_regex", "compare_to": pattern}
    assert set(values(await run_node("conditional", data, {"input": RECORD}))) == {port}
    assert (re.search(pattern, value) is not None) == (port == "true")


def test_a_pattern_clock_is_shared_by_every_match_of_a_node_execution() -> None:
    clock = PatternClock(budget_s=0.3)
    with pytest.raises(PatternTimeout):
        clock.search("^(a|aa)+$", "a" * 40 + "!", what="schema pattern")
    with pytest.raises(PatternTimeout):  # nothing left for the next one, however cheap
        clock.search("a", "a", what="schema pattern")
    assert PatternClock(budget_s=0.3).search("a", "a", what="x")
