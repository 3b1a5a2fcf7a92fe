"""Parameters without expressions are resolved once per plan and node, and every step of
every run still sees what resolving them at that step would give: its own copy, a wire's
value over them, an expression evaluated anew, a refused value refused again."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.kernel import parameters
from orchestrator.kernel.errors import ParameterValueError
from orchestrator.kernel.expressions import Scope
from orchestrator.kernel.graph import Node
from orchestrator.kernel.previews import parameter_preview
from tests.fake_nodes import make_registry

RELAY = make_registry().get("relay").definition


def relay(**data: Any) -> Node:
    return Node.model_validate({"id": "b", "type": "relay", "name": "B", "data": data})


async def step(memo: dict[str, Any], node: Node, scope: Scope, wires: dict[str, tuple[Any, str]] | None = None
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """What one step resolves, and the preview its events carry, as the step function does."""
    fixed = parameters.fixed_parameters(memo, node, RELAY, scope)
    data = await parameters.resolve_parameters_off_loop(node, RELAY, wires or {}, scope, fixed)
    known = {k: v for k, v in fixed.previews.items() if k not in (wires or {})}
    return data, parameter_preview(data, known=known)


async def test_a_step_that_changes_its_object_parameter_does_not_change_the_next_steps() -> None:
    memo: dict[str, Any] = {}
    node = relay(value={"items": [1, 2]}, delay_s="0.5")
    first, preview = await step(memo, node, Scope())
    first["value"]["items"].append(3)  # an executor changing what it was given
    second, again = await step(memo, node, Scope())
    assert second == {"value": {"items": [1, 2]}, "label": None, "delay_s": 0.5, "record": False}
    assert preview == again == parameter_preview(second)
    assert node.data["value"] == {"items": [1, 2]}


@pytest.mark.parametrize("value", [{"a": 1, "b": "x"}, [1, "x", None]])
async def test_a_step_that_changes_its_flat_object_or_list_parameter_does_not_change_the_next_steps(
        value: Any) -> None:
    memo: dict[str, Any] = {}
    node = relay(value=value)
    first, _ = await step(memo, node, Scope())
    assert first["value"] == value and first["value"] is not node.data["value"]
    first["value"].clear()  # an executor changing what it was given
    second, _ = await step(memo, node, Scope())
    assert second["value"] == value == node.data["value"]
    assert second["value"] is not first["value"]


async def test_a_wire_overrides_a_fixed_parameter_at_the_step_it_carries_a_value() -> None:
    memo: dict[str, Any] = {}
    node = relay(label="inline")
    wired, preview = await step(memo, node, Scope(), {"label": ("from the wire", "string")})
    assert wired["label"] == preview["label"] == "from the wire"
    unwired, preview = await step(memo, node, Scope())
    assert unwired["label"] == preview["label"] == "inline"


async def test_expressions_are_evaluated_at_every_step_beside_fixed_parameters() -> None:
    memo: dict[str, Any] = {}
    node = relay(value="{{ input.x }}", label="inline")
    assert (await step(memo, node, Scope(input={"x": 1})))[0]["value"] == 1
    data, preview = await step(memo, node, Scope(input={"x": 2}))
    assert data["value"] == preview["value"] == 2 and data["label"] == "inline"


async def test_a_value_the_definition_refuses_fails_every_step() -> None:
    memo: dict[str, Any] = {}
    node = relay(delay_s=-1)
    for _ in range(2):
        with pytest.raises(ParameterValueError, match="delay_s"):
            await step(memo, node, Scope())
