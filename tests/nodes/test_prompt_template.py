"""Prompt Template renders {{ }} against the input and $vars."""

from __future__ import annotations

import pytest

from orchestrator.kernel.expressions import stringify
from tests.nodes.node_harness import run_node, values


async def test_prompt_template_renders_input_fields_and_variables() -> None:
    doc = {"title": "Tides", "points": ["moon", "sun"]}
    data = {"template": "Explain {{ input.title }} to {{ $vars.who }}: {{ input.points }}",
            "variables": {"who": "kids"}}
    out = values(await run_node("prompt_template", data, {"input": doc}))
    expected = f"Explain {doc['title']} to kids: {stringify(doc['points'])}"
    assert out == {"output": {"prompt": expected}}


async def test_prompt_template_keeps_text_without_expressions_as_is() -> None:
    text = "Say hello. {not an expression}"
    out = values(await run_node("prompt_template", {"template": text}, {"input": {}}))
    assert out["output"]["prompt"] == text


async def test_prompt_template_reports_a_bad_template_by_parameter() -> None:
    with pytest.raises(ValueError, match="'template'"):
        await run_node("prompt_template", {"template": "Hi {{ input. }}"}, {"input": {}})
