"""Type Converter converts explicitly and fails loudly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.nodes.node_harness import run_node, values


@pytest.mark.parametrize(("value", "to", "expected"), [
    ("3.5", "float", 3.5), ("42", "int", 42), ("4.0", "int", 4), (True, "int", 1),
    ("true", "boolean", True), ("No", "boolean", False), (0, "boolean", False),
    ('{"a": [1, 2]}', "json", {"a": [1, 2]}), ({"a": 1}, "string", '{"a": 1}'),
    (12, "string", "12"), ("x", "array", ["x"]), (None, "array", []), ("[1, 2]", "array", [1, 2]),
])
async def test_type_converter_converts_values_explicitly(
    value: Any, to: str, expected: Any
) -> None:
    out = values(await run_node("type_converter", {"to": to}, {"input": value}))
    assert out == {"output": expected}


async def test_type_converter_text_renders_objects_as_indented_json() -> None:
    obj = {"a": {"b": 1}}
    out = values(await run_node("type_converter", {"to": "text"}, {"input": obj}))
    assert json.loads(out["output"]) == obj and "\n" in out["output"]


async def test_type_converter_converts_one_field_and_keeps_the_rest() -> None:
    row = {"price": "3.5", "sku": "a", "meta": {"qty": "2"}}
    out = values(await run_node("type_converter", {"to": "int", "field": "meta.qty"},
                                {"input": row}))["output"]
    assert out == {**row, "meta": {"qty": int(row["meta"]["qty"])}}
    assert row["meta"]["qty"] == "2"


@pytest.mark.parametrize(("value", "to"), [("abc", "float"), ("3.5", "int"), ("maybe", "boolean"),
                                           ("{not json", "json"), ([1], "int")])
async def test_type_converter_names_the_value_and_target_when_it_cannot_convert(
    value: Any, to: str
) -> None:
    with pytest.raises(ValueError, match=f"cannot convert .* to {to}"):
        await run_node("type_converter", {"to": to}, {"input": value})


async def test_type_converter_reports_a_missing_field() -> None:
    with pytest.raises(ValueError, match="'field'"):
        await run_node("type_converter", {"to": "int", "field": "nope"}, {"input": {"a": 1}})
