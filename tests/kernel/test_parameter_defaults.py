"""Declared defaults are values like inline ones: their expressions are evaluated."""

from __future__ import annotations

from orchestrator.kernel.definition import NodeDefinition
from orchestrator.kernel.expressions import Scope
from orchestrator.kernel.graph import Node
from orchestrator.kernel.parameters import resolve_parameters


def definition() -> NodeDefinition:
    return NodeDefinition.model_validate({
        "id": "asker", "name": "Asker", "category": "test",
        "inputs": [{"id": "input"}], "outputs": [{"id": "output"}],
        "parameters": [
            {"id": "prompt", "type": "string", "default": "{{ input.message }}"},
            {"id": "greeting", "type": "string", "default": "Hello {{ input.name }}!"},
            {"id": "plain", "type": "string", "default": "as is"},
        ],
    })


def test_an_expression_default_is_evaluated_against_the_input() -> None:
    node = Node(id="n", type="asker", name="Ask")
    values = resolve_parameters(node, definition(), {}, Scope(input={"message": "What is 6 x 7?", "name": "Ada"}))
    assert values["prompt"] == "What is 6 x 7?"
    assert values["greeting"] == "Hello Ada!"
    assert values["plain"] == "as is"


def test_an_inline_value_still_wins_over_the_default() -> None:
    node = Node(id="n", type="asker", name="Ask", data={"prompt": "fixed"})
    values = resolve_parameters(node, definition(), {}, Scope(input={"message": "ignored"}))
    assert values["prompt"] == "fixed"
