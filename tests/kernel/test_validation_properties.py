"""validate_graph on random graphs: a ValidatedGraph or a GraphError, never anything else."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.kernel.errors import GraphError
from orchestrator.kernel.validation import ValidatedGraph, validate_graph
from tests.fake_nodes import DEFINITIONS, make_registry

REGISTRY = make_registry()
TYPES = [d.id for d, _ in DEFINITIONS] + ["nope"]
HANDLES = sorted({p.id for d, _ in DEFINITIONS for p in [*d.inputs, *d.outputs, *d.parameters]}
                 | {"error", "x"})
PARAMS = sorted({p.id for d, _ in DEFINITIONS for p in d.parameters} | {"valeu"})
NAMES = ["A", "B", "C", "D", "E"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False)
    | st.sampled_from(["", "x", "{{ input.x }}", "{{ $('A').item.json }}", "{{ $('Z').a }}",
                       "{{ oops", "a {{ $('B').item.json.k }} b"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b"]), inner,
                                                                  max_size=2),
    max_leaves=6,
)


@st.composite
def nested_body(draw: st.DrawFn) -> dict[str, Any]:
    return {"id": "inner", "nodes": [{"id": "i", "type": "emit", "name": "In"}],
            "edges": draw(st.sampled_from([[], [{"id": "x", "source": "i", "sourceHandle": "out",
                                                  "target": "i", "targetHandle": "in",
                                                  "data": {"channel": "flow"}}]]))}


@st.composite
def random_node(draw: st.DrawFn, index: int) -> dict[str, Any]:
    node: dict[str, Any] = {
        "id": draw(st.sampled_from([f"n{index}", f"n{index}", "n0"])),
        "type": draw(st.sampled_from(TYPES)),
        "name": draw(st.sampled_from([*NAMES, f"N{index}", f"N{index}"])),
        "data": draw(st.dictionaries(st.sampled_from(PARAMS), json_values | nested_body(),
                                     max_size=3)),
    }
    if draw(st.booleans()):
        node["settings"] = {"on_error": draw(st.sampled_from(["stop", "error_port", "bad"]))}
    for key in draw(st.sets(st.sampled_from(["id", "name", "type", "data"]), max_size=1)):
        if draw(st.integers(0, 9)) == 0:
            del node[key]  # sometimes a field is missing
    return node


@st.composite
def random_edge(draw: st.DrawFn, index: int, ids: list[str]) -> dict[str, Any]:
    endpoint = st.sampled_from([*ids, "ghost"]) if ids else st.just("ghost")
    edge: dict[str, Any] = {
        "id": draw(st.sampled_from([f"e{index}", f"e{index}", "e0"])),
        "source": draw(endpoint),
        "sourceHandle": draw(st.sampled_from(HANDLES)),
        "target": draw(endpoint),
        "targetHandle": draw(st.sampled_from(HANDLES)),
        "data": {"channel": draw(st.sampled_from(["flow", "flow", "link", "link", "other"]))},
    }
    if draw(st.integers(0, 9)) == 0:
        del edge[draw(st.sampled_from(sorted(edge)))]
    return edge


@st.composite
def random_graph(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(0, 7))
    nodes = [draw(random_node(i)) for i in range(count)]
    ids = [str(n["id"]) for n in nodes if "id" in n]
    edges = [draw(random_edge(i, ids)) for i in range(draw(st.integers(0, 10)))]
    return {"id": "g", "nodes": nodes, "edges": edges}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graph())
def test_validation_returns_a_validated_graph_or_raises_a_graph_error(raw: dict[str, Any]) -> None:
    try:
        result = validate_graph(raw, REGISTRY)
    except GraphError as exc:
        assert exc.message and exc.graph_id
        return
    assert isinstance(result, ValidatedGraph)
    ids = {n.id for n in result.graph.nodes}
    assert set(result.upstream) == ids
    for node_id, ancestors in result.upstream.items():
        assert node_id not in ancestors  # acyclic
    assert set(result.start_nodes()) <= ids


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.data())
def test_random_acyclic_graphs_of_relays_validate(count: int, data: st.DataObject) -> None:
    nodes = [{"id": "n0", "type": "emit", "name": "N0"}]
    nodes += [{"id": f"n{i}", "type": "collect", "name": f"N{i}"} for i in range(1, count)]
    edges = []
    for i in range(1, count):
        for j in sorted(data.draw(st.sets(st.integers(0, i - 1), max_size=3))):
            edges.append({"id": f"e{i}_{j}", "source": f"n{j}", "sourceHandle": "out",
                          "target": f"n{i}", "targetHandle": "in", "data": {"channel": "flow"}})
    result = validate_graph({"id": "g", "nodes": nodes, "edges": edges}, REGISTRY)
    for edge in edges:
        assert edge["source"] in result.upstream[edge["target"]]
