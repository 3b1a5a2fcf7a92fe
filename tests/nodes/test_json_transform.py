"""JSON Transform reshapes the input with JSONata."""

from __future__ import annotations

import pytest

from tests.nodes.node_harness import run_node, values

ORDER = {"customer": "Ada", "items": [{"sku": "a", "price": 2.5, "qty": 2},
                                      {"sku": "b", "price": 4.0, "qty": 1}]}


async def test_json_transform_computes_a_new_shape_from_the_input() -> None:
    expression = '{"who": customer, "total": $sum(items.(price * qty)), "skus": items.sku}'
    out = values(await run_node("json_transform", {"expression": expression}, {"input": ORDER}))
    assert out["output"] == {
        "who": ORDER["customer"],
        "total": sum(i["price"] * i["qty"] for i in ORDER["items"]),
        "skus": [i["sku"] for i in ORDER["items"]],
    }


async def test_json_transform_outputs_null_when_the_path_matches_nothing() -> None:
    data = {"expression": "missing.field"}
    out = values(await run_node("json_transform", data, {"input": ORDER}))
    assert out == {"output": None}


async def test_json_transform_reports_bad_expression() -> None:
    with pytest.raises(ValueError, match=r"'expression'.*position \d+") as info:
        await run_node("json_transform", {"expression": "items[price >"}, {"input": ORDER})
    assert "items[price >" in str(info.value)


async def test_json_transform_reports_an_evaluation_error() -> None:
    with pytest.raises(ValueError, match="'expression'"):
        await run_node("json_transform", {"expression": "$undefined_fn()"}, {"input": ORDER})


async def test_json_transform_needs_an_expression() -> None:
    with pytest.raises(ValueError, match="'expression'"):
        await run_node("json_transform", {"expression": "  "}, {"input": ORDER})
