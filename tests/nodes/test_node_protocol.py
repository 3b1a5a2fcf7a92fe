"""Every discovered node folder obeys the node protocol and its own meta.example runs."""

from __future__ import annotations

import pytest

from orchestrator.kernel.definition import NodeDefinition
from orchestrator.kernel.registry import NodeType
from tests.nodes.node_harness import registry, run_node

# Categories owned by nodes that need external services (models, MCP servers); their
# examples are skipped only when they declare so with meta.example.needs_services.
SERVICE_CATEGORIES = {"ai", "agents", "tools", "integration"}

NODE_TYPES = list(registry())


@pytest.fixture(params=NODE_TYPES, ids=[t.id for t in NODE_TYPES])
def node_type(request: pytest.FixtureRequest) -> NodeType:
    entry: NodeType = request.param
    return entry


def test_every_definition_is_a_valid_node_definition(node_type: NodeType) -> None:
    again = NodeDefinition.model_validate(node_type.definition.model_dump())
    assert again.id == node_type.id


def test_executor_node_type_matches_the_definition_id(node_type: NodeType) -> None:
    assert getattr(node_type.executor, "node_type", None) == node_type.id


def test_executor_can_execute_or_materialize(node_type: NodeType) -> None:
    assert node_type.can_execute or node_type.can_materialize


def test_definition_has_category_icon_and_description(node_type: NodeType) -> None:
    d = node_type.definition
    assert d.category.strip() and d.icon.strip() and d.description.strip()


def test_triggers_have_no_inputs_and_an_output(node_type: NodeType) -> None:
    d = node_type.definition
    if not d.trigger:
        pytest.skip("not a trigger")
    assert d.flow_inputs() == [] and d.output_port("output") is not None


async def test_meta_example_reaches_exactly_the_expected_ports(node_type: NodeType) -> None:
    d = node_type.definition
    example = d.meta.get("example")
    if not node_type.can_execute:
        pytest.skip("materialize-only node")
    if d.category in SERVICE_CATEGORIES and (example is None or example.get("needs_services")):
        pytest.skip("example needs services this test cannot provide")
    assert isinstance(example, dict), f"{d.id} has no meta.example"
    if example.get("needs_workers"):  # a child run: tests/integration/test_child_runs.py runs it
        pytest.skip("example needs workers (a child run)")
    result = await run_node(d.id, example.get("data", {}), example.get("inputs", {}),
                            run_input=example.get("run_input"), session_id="s-1")
    assert sorted(result.outputs) == sorted(example["expect_ports"])
    declared = {p.id for p in d.outputs}
    assert set(result.outputs) <= declared
