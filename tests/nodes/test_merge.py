"""Merge joins the branches that arrived, in input order."""

from __future__ import annotations

import pytest

from tests.nodes.node_harness import run_node, values

A = [{"id": 1}, {"id": 2}]
B = {"id": 3}


async def test_merge_append_flattens_lists_in_input_order() -> None:
    out = values(await run_node("merge", {"mode": "append"}, {"input_3": B, "input_1": A}))
    assert out["output"] == [*A, B]


async def test_merge_combine_deep_merges_objects_later_inputs_winning() -> None:
    first = {"user": {"name": "Ada", "role": "admin"}, "n": 1}
    second = {"user": {"role": "owner"}, "m": 2}
    inputs = {"input_1": first, "input_2": second}
    out = values(await run_node("merge", {"mode": "combine"}, inputs))
    assert out["output"] == {"user": {"name": "Ada", "role": "owner"}, "n": 1, "m": 2}
    assert first["user"]["role"] == "admin"  # inputs are not mutated


async def test_merge_by_input_keys_values_by_the_inputs_that_arrived() -> None:
    out = values(await run_node("merge", {"mode": "by_input"}, {"input_2": B, "input_4": A}))
    assert out["output"] == {"input_2": B, "input_4": A}


async def test_merge_combine_rejects_a_non_object_naming_the_input() -> None:
    with pytest.raises(ValueError, match="input_2"):
        await run_node("merge", {"mode": "combine"}, {"input_1": B, "input_2": A})
