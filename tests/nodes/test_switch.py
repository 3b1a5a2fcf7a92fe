"""Switch routes by ordered cases, to case_<i> or default."""

from __future__ import annotations

import pytest

from tests.nodes.node_harness import run_node, values

CASES = [
    {"id": "small", "when": "{{ input.n < 10 }}"},
    {"id": "even", "when": "input.n % 2 == 0"},  # braces are optional
    {"id": "huge", "when": "{{ input.n > 1000 }}"},
]


async def test_switch_routes_to_the_first_matching_case() -> None:
    order = {"n": 4}  # small and even: the first wins
    out = values(await run_node("switch", {"cases": CASES, "mode": "first"}, {"input": order}))
    assert out == {"case_0": order}


async def test_switch_in_mode_all_routes_to_every_matching_case() -> None:
    order = {"n": 4}
    out = values(await run_node("switch", {"cases": CASES, "mode": "all"}, {"input": order}))
    assert out == {"case_0": order, "case_1": order}


async def test_switch_routes_to_default_when_no_case_matches() -> None:
    order = {"n": 51}
    out = values(await run_node("switch", {"cases": CASES}, {"input": order}))
    assert out == {"default": order}


async def test_switch_accepts_cases_as_json_text() -> None:
    import json

    out = values(await run_node("switch", {"cases": json.dumps(CASES)}, {"input": {"n": 2000}}))
    assert list(out) == ["case_1"]


async def test_switch_rejects_more_cases_than_it_has_ports() -> None:
    cases = [{"id": f"c{i}", "when": "true"} for i in range(9)]
    with pytest.raises(ValueError, match="at most 8"):
        await run_node("switch", {"cases": cases}, {"input": {}})


async def test_switch_reports_a_bad_case_expression_with_its_index() -> None:
    cases = [{"id": "ok", "when": "{{ input.n > 1 }}"}, {"id": "bad", "when": "{{ input.n >> 2 }}"}]
    with pytest.raises(ValueError, match=r"'cases'.*case 1"):
        await run_node("switch", {"cases": cases}, {"input": {"n": 0}})


async def test_switch_rejects_a_case_without_a_condition() -> None:
    with pytest.raises(ValueError, match="case 0"):
        await run_node("switch", {"cases": [{"id": "x"}]}, {"input": {}})
