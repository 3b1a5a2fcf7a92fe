"""Set Fields sets dotted fields and removes others."""

from __future__ import annotations

import pytest

from tests.nodes.node_harness import run_node, values

USER = {"id": 1, "name": "Ada", "secret": "s3", "profile": {"city": "London", "token": "t"}}


async def test_set_fields_creates_nested_objects_from_dotted_names() -> None:
    data = {"fields": {"profile.country": "UK", "flags.vip": True}}
    out = values(await run_node("set_fields", data, {"input": USER}))["output"]
    assert out["profile"] == {**USER["profile"], "country": "UK"}
    assert out["flags"] == {"vip": True}
    assert out["name"] == USER["name"]


async def test_set_fields_without_keep_input_outputs_only_the_set_fields() -> None:
    data = {"fields": {"user.id": 1}, "keep_input": False}
    out = values(await run_node("set_fields", data, {"input": USER}))["output"]
    assert out == {"user": {"id": 1}}


async def test_set_fields_removes_dotted_paths_and_leaves_the_input_untouched() -> None:
    data = {"remove": ["secret", "profile.token", "not.there"]}
    out = values(await run_node("set_fields", data, {"input": USER}))["output"]
    assert "secret" not in out and "token" not in out["profile"]
    assert USER["secret"] == "s3" and "token" in USER["profile"]


async def test_set_fields_rejects_fields_that_are_not_an_object() -> None:
    with pytest.raises(ValueError, match="'fields'"):
        await run_node("set_fields", {"fields": ["a"]}, {"input": USER})


async def test_set_fields_keep_input_needs_an_object_input() -> None:
    with pytest.raises(ValueError, match="'keep_input'"):
        await run_node("set_fields", {"fields": {"a": 1}}, {"input": [1, 2]})


async def test_set_fields_inside_a_list_leaves_the_inputs_list_untouched() -> None:
    given = {"items": [{"n": 1, "tags": ["a"]}, {"n": 2}], "when": None, "ratio": 0.5}
    data = {"fields": {"items.0.n": 9, "items.0.tags.0": "b"}}
    out = values(await run_node("set_fields", data, {"input": given}))["output"]
    assert out == {"items": [{"n": 9, "tags": ["b"]}, {"n": 2}], "when": None, "ratio": 0.5}
    assert given["items"] == [{"n": 1, "tags": ["a"]}, {"n": 2}]
