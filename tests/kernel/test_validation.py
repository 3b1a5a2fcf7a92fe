"""validate_graph: each check raises its error class and names where the fault is."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.kernel.errors import (
    ChannelError,
    CycleError,
    DuplicateError,
    ExpressionError,
    GraphSchemaError,
    HandleError,
    LinkCycleError,
    ParameterError,
    SocketTypeError,
    UnknownNodeTypeError,
    UpstreamReferenceError,
)
from orchestrator.kernel.graph import parse_graph
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.validation import ValidatedGraph, validate_graph
from tests.fake_nodes import graph, make_registry


@pytest.fixture
def registry() -> Registry:
    return make_registry()


def chain(*extra_nodes: Any, edges: Any = ()) -> dict[str, Any]:
    """emit A -> relay B, plus whatever a test adds."""
    return graph(
        [("a", "emit", "A"), ("b", "relay", "B"), *extra_nodes], [("a", "out", "b", "in"), *edges]
    )


# -- a valid graph ---------------------------------------------------------------------


def test_a_valid_graph_returns_definitions_ancestors_and_start_nodes(registry: Registry) -> None:
    raw = graph(
        [
            ("a", "emit", "A"),
            ("b", "relay", "B"),
            ("c", "relay", "C", {"value": "{{ $('A').item.json }}"}),
        ],
        [("a", "out", "b", "in"), ("b", "out", "c", "in")],
    )
    vg = validate_graph(raw, registry)
    assert isinstance(vg, ValidatedGraph)
    assert vg.start_nodes() == ["a"]
    assert vg.upstream["c"] == {"a", "b"}
    assert vg.upstream["a"] == set()
    assert vg.refs == {"c": ["a"]}
    assert vg.definitions["b"] is registry.get("relay").definition


def test_a_parsed_graph_object_is_accepted_as_well_as_json(registry: Registry) -> None:
    vg = validate_graph(parse_graph(chain()), registry)
    assert [n.id for n in vg.graph.nodes] == ["a", "b"]


def test_link_edges_and_a_wired_hybrid_parameter_validate(registry: Registry) -> None:
    raw = graph(
        [
            ("a", "emit", "A"),
            ("s", "assemble", "S"),
            ("p", "part", "P"),
            ("q", "part", "Q"),
            ("n", "number", "N"),
            ("r", "relay", "R"),
        ],
        [
            ("a", "out", "s", "in"),
            ("p", "part", "s", "parts", "link"),
            ("q", "part", "p", "parts", "link"),
            ("q", "part", "s", "parts", "link"),
            ("s", "out", "r", "in"),
            ("n", "value", "r", "delay_s", "link"),
        ],
    )
    vg = validate_graph(raw, registry)
    assert vg.upstream["r"] == {"a", "s"}  # link sources are not flow ancestors


# -- schema and duplicates -------------------------------------------------------------


def test_a_node_without_a_name_is_a_schema_error_naming_the_node(registry: Registry) -> None:
    raw = chain()
    del raw["nodes"][1]["name"]
    with pytest.raises(GraphSchemaError) as info:
        validate_graph(raw, registry)
    assert info.value.node_id == "b"
    assert "name" in info.value.message


def test_an_edge_without_a_channel_is_rejected_naming_the_edge(registry: Registry) -> None:
    raw = chain()
    raw["edges"][0]["data"] = {}
    with pytest.raises(ChannelError) as info:
        validate_graph(raw, registry)
    assert info.value.edge_id == "e1"
    assert "e1" in info.value.message


def test_duplicate_node_ids_are_rejected(registry: Registry) -> None:
    raw = chain(("b", "relay", "Other"))
    with pytest.raises(DuplicateError) as info:
        validate_graph(raw, registry)
    assert info.value.node_id == "b"
    assert "'b'" in info.value.message


def test_duplicate_node_names_are_rejected_naming_both_nodes(registry: Registry) -> None:
    raw = chain(("c", "relay", "B"))
    with pytest.raises(DuplicateError) as info:
        validate_graph(raw, registry)
    assert info.value.node_name == "B"
    assert "b" in info.value.message and "c" in info.value.message


def test_duplicate_edge_ids_are_rejected(registry: Registry) -> None:
    raw = chain(("c", "relay", "C"), edges=[("b", "out", "c", "in")])
    raw["edges"][1]["id"] = "e1"
    with pytest.raises(DuplicateError) as info:
        validate_graph(raw, registry)
    assert info.value.edge_id == "e1"


def test_an_unknown_node_type_suggests_the_closest_one(registry: Registry) -> None:
    raw = chain(("c", "rellay", "C"))
    with pytest.raises(UnknownNodeTypeError) as info:
        validate_graph(raw, registry)
    assert info.value.node_id == "c"
    assert info.value.node_name == "C"
    assert "did you mean 'relay'" in info.value.message


# -- edges -----------------------------------------------------------------------------


def test_an_edge_to_a_missing_node_names_the_edge_and_the_node(registry: Registry) -> None:
    raw = chain(edges=[("b", "out", "ghost", "in")])
    with pytest.raises(HandleError) as info:
        validate_graph(raw, registry)
    assert info.value.edge_id == "e2"
    assert "ghost" in info.value.message


def test_an_unknown_source_handle_names_the_handle_and_the_outputs(registry: Registry) -> None:
    raw = chain(("c", "relay", "C"), edges=[("b", "yes", "c", "in")])
    with pytest.raises(HandleError) as info:
        validate_graph(raw, registry)
    assert (info.value.edge_id, info.value.node_id, info.value.handle) == ("e2", "b", "yes")
    assert "'out'" in info.value.message


def test_the_error_port_exists_only_when_the_node_routes_errors_there(registry: Registry) -> None:
    raw = chain(("c", "relay", "C"), edges=[("b", "error", "c", "in")])
    with pytest.raises(HandleError) as info:
        validate_graph(raw, registry)
    assert info.value.handle == "error"
    raw["nodes"][1]["settings"] = {"on_error": "error_port"}
    assert validate_graph(raw, registry).upstream["c"] == {"a", "b"}


def test_an_unknown_target_handle_names_the_handle(registry: Registry) -> None:
    raw = graph([("a", "emit", "A"), ("b", "relay", "B")], [("a", "out", "b", "inn")])
    with pytest.raises(HandleError) as info:
        validate_graph(raw, registry)
    assert (info.value.edge_id, info.value.node_id, info.value.handle) == ("e1", "b", "inn")
    assert "'inn'" in info.value.message


def test_a_flow_edge_into_a_link_port_is_a_channel_error(registry: Registry) -> None:
    raw = chain(("s", "assemble", "S"), edges=[("b", "out", "s", "parts")])
    with pytest.raises(ChannelError) as info:
        validate_graph(raw, registry)
    assert (info.value.edge_id, info.value.handle) == ("e2", "parts")
    assert "flow" in info.value.message and "link" in info.value.message


def test_a_link_edge_from_a_flow_port_is_a_channel_error(registry: Registry) -> None:
    raw = chain(("s", "assemble", "S"), edges=[("b", "out", "s", "parts", "link")])
    with pytest.raises(ChannelError) as info:
        validate_graph(raw, registry)
    assert (info.value.edge_id, info.value.node_id, info.value.handle) == ("e2", "b", "out")


def test_incompatible_sockets_are_rejected_naming_both_types(registry: Registry) -> None:
    # a json link output into a float parameter socket (json does not become a float)
    raw = chain(
        ("p", "part", "P"), ("n", "number", "N"), edges=[("p", "part", "b", "delay_s", "link")]
    )
    raw["nodes"][1]["data"] = {}
    with pytest.raises(SocketTypeError) as info:
        validate_graph(raw, registry)
    assert (info.value.edge_id, info.value.handle) == ("e2", "delay_s")
    assert "'json'" in info.value.message and "'float'" in info.value.message


def test_two_edges_into_a_single_input_are_rejected(registry: Registry) -> None:
    raw = chain(("c", "emit", "C"), edges=[("c", "out", "b", "in")])
    with pytest.raises(HandleError) as info:
        validate_graph(raw, registry)
    assert (info.value.edge_id, info.value.node_id, info.value.handle) == ("e2", "b", "in")
    assert "e1" in info.value.message


def test_a_multiple_input_accepts_several_edges(registry: Registry) -> None:
    raw = graph(
        [("a", "emit", "A"), ("c", "emit", "C"), ("k", "collect", "K")],
        [("a", "out", "k", "in"), ("c", "out", "k", "in")],
    )
    assert validate_graph(raw, registry).upstream["k"] == {"a", "c"}


# -- cycles ----------------------------------------------------------------------------


def test_a_flow_cycle_names_the_nodes_around_it(registry: Registry) -> None:
    raw = graph(
        [("a", "emit", "A"), ("j", "join", "Join"), ("b", "relay", "B"), ("c", "relay", "C")],
        [
            ("a", "out", "j", "left"),
            ("j", "out", "b", "in"),
            ("b", "out", "c", "in"),
            ("c", "out", "j", "right"),
        ],
    )
    with pytest.raises(CycleError) as info:
        validate_graph(raw, registry)
    assert info.value.path == ["Join", "B", "C", "Join"]
    assert "Join -> B -> C -> Join" in info.value.message


def test_a_link_cycle_names_the_nodes_around_it(registry: Registry) -> None:
    raw = graph(
        [("p", "part", "P"), ("q", "part", "Q")],
        [("p", "part", "q", "parts", "link"), ("q", "part", "p", "parts", "link")],
    )
    with pytest.raises(LinkCycleError) as info:
        validate_graph(raw, registry)
    assert info.value.path == ["P", "Q", "P"]
    assert "P -> Q -> P" in info.value.message


# -- parameters ------------------------------------------------------------------------


def test_an_unknown_parameter_suggests_the_closest_one(registry: Registry) -> None:
    raw = graph(
        [("a", "emit", "A"), ("b", "relay", "B", {"dealy_s": 1})], [("a", "out", "b", "in")]
    )
    with pytest.raises(ParameterError) as info:
        validate_graph(raw, registry)
    assert (info.value.node_id, info.value.parameter) == ("b", "dealy_s")
    assert info.value.message == (
        "unknown parameter 'dealy_s' on node b (\"B\") of type 'relay'; did you mean 'delay_s'?"
    )


@pytest.mark.parametrize(
    ("node_type", "param", "value", "says"),
    [
        ("flaky", "fail_times", "two", "an integer"),
        ("flaky", "fail_times", True, "an integer"),
        ("flaky", "fail_times", -1, "minimum"),
        ("relay", "delay_s", "slow", "a number"),
        ("relay", "record", "yes", "true or false"),
        ("relay", "label", 5, "a string"),
    ],
)
def test_an_inline_value_of_the_wrong_type_or_range_is_rejected(
    registry: Registry, node_type: str, param: str, value: Any, says: str
) -> None:
    raw = graph(
        [("a", "emit", "A"), ("b", node_type, "B", {param: value})], [("a", "out", "b", "in")]
    )
    with pytest.raises(ParameterError) as info:
        validate_graph(raw, registry)
    assert (info.value.node_id, info.value.parameter) == ("b", param)
    assert says in info.value.message and repr(param) in info.value.message


def test_an_enum_value_outside_its_choices_is_rejected(registry: Registry) -> None:
    reg = make_registry()
    from orchestrator.kernel.definition import NodeDefinition

    class Pick:
        node_type = "pick"

        async def execute(self, data: Any, inputs: Any, ctx: Any) -> Any:
            return None

    reg.register(
        NodeDefinition.model_validate(
            {
                "id": "pick",
                "name": "Pick",
                "category": "test",
                "trigger": True,
                "parameters": [{"id": "mode", "type": "enum", "values": ["fast", "slow"]}],
                "outputs": [{"id": "out"}],
            }
        ),
        Pick(),
    )
    with pytest.raises(ParameterError) as info:
        validate_graph(graph([("p", "pick", "P", {"mode": "medium"})], []), reg)
    assert info.value.parameter == "mode"
    assert "'medium'" in info.value.message and "'fast'" in info.value.message
    assert validate_graph(graph([("p", "pick", "P", {"mode": "slow"})], []), reg).start_nodes() == [
        "p"
    ]


def test_an_expression_skips_the_inline_type_check(registry: Registry) -> None:
    raw = graph(
        [("a", "emit", "A"), ("b", "relay", "B", {"delay_s": "{{ $('A').item.json.s }}"})],
        [("a", "out", "b", "in")],
    )
    assert validate_graph(raw, registry).refs == {"b": ["a"]}


def test_a_required_parameter_without_value_or_wire_is_rejected(registry: Registry) -> None:
    raw = chain(("n", "nest", "Nest"), edges=[("b", "out", "n", "in")])
    with pytest.raises(ParameterError) as info:
        validate_graph(raw, registry)
    assert (info.value.node_id, info.value.parameter) == ("n", "body")
    assert "required" in info.value.message


def test_an_expression_with_bad_syntax_names_node_and_parameter(registry: Registry) -> None:
    raw = graph(
        [("a", "emit", "A"), ("b", "relay", "B", {"label": "hi {{ input.x "})],
        [("a", "out", "b", "in")],
    )
    with pytest.raises(ExpressionError) as info:
        validate_graph(raw, registry)
    assert (info.value.node_id, info.value.parameter) == ("b", "label")
    assert "'label'" in info.value.message


def test_a_reference_to_a_missing_node_says_it_does_not_exist(registry: Registry) -> None:
    raw = graph(
        [("a", "emit", "A"), ("b", "relay", "B", {"label": "{{ $('Nobody').item.json }}"})],
        [("a", "out", "b", "in")],
    )
    with pytest.raises(UpstreamReferenceError) as info:
        validate_graph(raw, registry)
    assert (info.value.node_id, info.value.parameter) == ("b", "label")
    assert "references node 'Nobody' which does not exist" in info.value.message


def test_a_reference_to_a_node_that_is_not_upstream_is_rejected(registry: Registry) -> None:
    raw = graph(
        [
            ("a", "emit", "A"),
            ("b", "relay", "B", {"label": "{{ $('C').item.json }}"}),
            ("c", "relay", "C"),
        ],
        [("a", "out", "b", "in"), ("b", "out", "c", "in")],
    )
    with pytest.raises(UpstreamReferenceError) as info:
        validate_graph(raw, registry)
    assert info.value.node_id == "b"
    assert "references node 'C' which is not upstream of node b (\"B\")" in info.value.message


def test_a_link_source_may_reference_what_its_consumer_sees(registry: Registry) -> None:
    raw = graph(
        [
            ("a", "emit", "A"),
            ("s", "assemble", "S"),
            ("p", "part", "P", {"name": "{{ $('A').item.json.k }}"}),
        ],
        [("a", "out", "s", "in"), ("p", "part", "s", "parts", "link")],
    )
    assert validate_graph(raw, registry).refs == {"p": ["a"]}


# -- nested graphs ---------------------------------------------------------------------


def inner(*nodes: Any, edges: Any = ()) -> dict[str, Any]:
    return graph([("i", "emit", "In"), *nodes], list(edges), id="inner")


def test_a_valid_nested_graph_passes(registry: Registry) -> None:
    body = inner(
        ("r", "relay", "R", {"label": "{{ $('In').item.json }}"}), edges=[("i", "out", "r", "in")]
    )
    raw = chain(("n", "nest", "Nest", {"body": body}), edges=[("b", "out", "n", "in")])
    assert validate_graph(raw, registry).upstream["n"] == {"a", "b"}


def test_a_fault_in_a_nested_graph_keeps_its_class_and_names_the_outer_node(
    registry: Registry,
) -> None:
    body = inner(("r", "relay", "R"), edges=[("i", "out", "r", "nope")])
    raw = chain(("n", "nest", "Nest", {"body": body}), edges=[("b", "out", "n", "in")])
    with pytest.raises(HandleError) as info:
        validate_graph(raw, registry)
    assert (info.value.node_id, info.value.parameter) == ("n", "body")
    assert 'node n ("Nest")' in info.value.message and "'nope'" in info.value.message


def test_nested_expressions_are_not_checked_against_the_outer_graph(registry: Registry) -> None:
    body = inner(
        ("r", "relay", "R", {"label": "{{ $('A').item.json }}"}), edges=[("i", "out", "r", "in")]
    )
    raw = chain(("n", "nest", "Nest", {"body": body}), edges=[("b", "out", "n", "in")])
    with pytest.raises(UpstreamReferenceError) as info:
        validate_graph(raw, registry)
    assert "'A' which does not exist" in info.value.message
    assert info.value.node_id == "n"


def test_a_graph_parameter_holding_no_graph_is_rejected(registry: Registry) -> None:
    raw = chain(("n", "nest", "Nest", {"body": [1, 2]}), edges=[("b", "out", "n", "in")])
    with pytest.raises(ParameterError) as info:
        validate_graph(raw, registry)
    assert (info.value.node_id, info.value.parameter) == ("n", "body")


# -- scale -----------------------------------------------------------------------------


def test_a_thousand_node_chain_validates(registry: Registry) -> None:
    count = 1000
    nodes: list[Any] = [("n0", "emit", "N0")] + [
        (f"n{i}", "relay", f"N{i}") for i in range(1, count)
    ]
    edges: list[Any] = [(f"n{i}", "out", f"n{i + 1}", "in") for i in range(count - 1)]
    vg = validate_graph(graph(nodes, edges), registry)
    assert len(vg.upstream[f"n{count - 1}"]) == count - 1


def test_a_graph_over_the_node_or_edge_limit_is_refused_naming_the_setting(registry: Registry) -> None:
    from orchestrator.kernel.errors import GraphSchemaError
    from orchestrator.kernel.validation import GraphLimits

    nodes = [("a", "emit", "A")] + [(f"n{i}", "relay", f"N{i}") for i in range(30)]
    wide = graph(nodes, [("a", "out", f"n{i}", "in") for i in range(30)])
    validate_graph(wide, registry, GraphLimits(max_nodes=31, max_edges=30))
    with pytest.raises(GraphSchemaError, match=r"31 nodes, above the limit of 20 \(setting ORCH_GRAPH_MAX_NODES\)"):
        validate_graph(wide, registry, GraphLimits(max_nodes=20))
    with pytest.raises(GraphSchemaError, match="ORCH_GRAPH_MAX_EDGES"):
        validate_graph(wide, registry, GraphLimits(max_edges=10))
