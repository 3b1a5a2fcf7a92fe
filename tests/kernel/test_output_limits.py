"""A node's outputs are held to ``max_output_bytes`` by the length of their JSON, to the byte,
and the texts the check measured are what the completed event's preview carries."""

from __future__ import annotations

import json

import pytest

from orchestrator.kernel.errors import NodeExecutionError
from orchestrator.kernel.graph import Node
from orchestrator.kernel.output_limits import check_outputs
from orchestrator.kernel.previews import output_preview
from orchestrator.kernel.protocol import BinaryRef, DataValue, ExecutionResult
from tests.fake_nodes import make_registry

GATE = make_registry().get("gate").definition
NODE = Node.model_validate({"id": "a", "type": "gate", "name": "A"})


@pytest.mark.parametrize("outputs", [
    {},
    {"yes": DataValue("data", {"name": "Zoë", "items": [1, 2.5, None, True]})},
    {"yes": DataValue("data", "text"), "no": DataValue("file", BinaryRef("ref-1", "text/plain", 3))},
])
def test_outputs_of_exactly_the_limit_pass_and_one_byte_more_is_refused(outputs: dict[str, DataValue]) -> None:
    result = ExecutionResult(outputs=outputs)
    size = len(json.dumps({port: value.to_json() for port, value in outputs.items()}))
    texts = check_outputs(NODE, GATE, result, max_bytes=size)
    assert output_preview(outputs, texts) == output_preview(outputs)
    with pytest.raises(NodeExecutionError, match=f"outputs are {size} bytes, above the {size - 1}-byte limit"):
        check_outputs(NODE, GATE, result, max_bytes=size - 1)


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth, refused", [(4, False), (5, True), (64, True), (5_000, True)])
def test_a_value_nested_past_the_depth_is_refused_short_or_long_or_past_the_recursion_limit(
        depth: int, refused: bool) -> None:
    result = ExecutionResult(outputs={"yes": DataValue("data", {"pad": "x" * 50, "v": _nested(depth - 1)})})
    if refused:
        with pytest.raises(NodeExecutionError, match="nests lists and objects more than 4 levels deep"):
            check_outputs(NODE, GATE, result, max_bytes=10_000_000, max_depth=4)
    else:
        check_outputs(NODE, GATE, result, max_bytes=10_000_000, max_depth=4)


def test_a_value_that_holds_itself_is_refused_as_too_deep() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(NodeExecutionError, match="levels deep"):
        check_outputs(NODE, GATE, ExecutionResult(outputs={"yes": DataValue("data", loop)}), max_bytes=10**9)
