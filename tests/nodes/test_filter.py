"""Filter splits a list into pass and reject; an empty side is a dead branch."""

from __future__ import annotations

import pytest

from tests.nodes.node_harness import run_node, values

PEOPLE = [{"name": "Ada", "age": 36}, {"name": "Tim", "age": 12}, {"name": "Eve", "age": 18}]
ADULT = "{{ $item.age >= 18 }}"


async def test_filter_splits_items_by_the_condition() -> None:
    out = values(await run_node("filter", {"condition": ADULT}, {"input": PEOPLE}))
    assert out["pass"] == [p for p in PEOPLE if p["age"] >= 18]
    assert out["reject"] == [p for p in PEOPLE if p["age"] < 18]


async def test_filter_leaves_reject_empty_when_everything_matches() -> None:
    out = values(await run_node("filter", {"condition": "{{ $item.age > 0 }}"}, {"input": PEOPLE}))
    assert list(out) == ["pass"] and out["pass"] == PEOPLE


async def test_filter_leaves_pass_empty_when_nothing_matches() -> None:
    data = {"condition": "{{ input.age > 100 }}"}
    out = values(await run_node("filter", data, {"input": PEOPLE}))
    assert list(out) == ["reject"]


async def test_filter_reads_items_from_an_items_field() -> None:
    out = values(await run_node("filter", {"condition": ADULT}, {"input": {"items": PEOPLE}}))
    assert len(out["pass"]) + len(out["reject"]) == len(PEOPLE)


async def test_filter_exposes_the_item_index() -> None:
    data = {"condition": "{{ $index % 2 == 0 }}"}
    out = values(await run_node("filter", data, {"input": PEOPLE}))
    assert out["pass"] == PEOPLE[::2]


async def test_filter_rejects_an_input_that_is_not_a_list() -> None:
    with pytest.raises(ValueError, match="list"):
        await run_node("filter", {"condition": ADULT}, {"input": {"name": "Ada"}})


async def test_filter_names_the_item_whose_condition_failed() -> None:
    people = [{"age": 20}, {"age": "old"}]
    with pytest.raises(ValueError, match=r"'condition'.*item 1"):
        await run_node("filter", {"condition": ADULT}, {"input": people})
