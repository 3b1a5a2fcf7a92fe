"""Conditional routes its input to exactly one of true/false."""

from __future__ import annotations

from typing import Any

import pytest

from tests.nodes.node_harness import run_node, values

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
