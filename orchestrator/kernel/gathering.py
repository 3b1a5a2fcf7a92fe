"""What a step of a node takes from its flow in-edges: the values on its input ports, the
values wired into its parameters, and the names of the nodes each port's values came from.

Which in-edge feeds a port and which a parameter, the socket a wire carries and the source
node's name depend on the plan and the node types only: they are derived once per plan,
node and registry (``plan.memo``, shared by every run of a stored graph's version), and a
step only looks up the values its claim read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .definition import NodeDefinition
from .graph import Graph, Node
from .lookahead import plan_graph
from .protocol import DataValue
from .registry import Registry
from .scheduling import RunPlan


@dataclass
class Gathered:
    inputs: dict[str, DataValue]
    wires: dict[str, tuple[Any, str]]
    sources: dict[str, list[str]]
    scope_input: Any
    linked: tuple[str, ...] = ()  # parameters with a socket that link edges lead to (resolved per step)


@dataclass(frozen=True)
class _InEdge:
    """One flow in-edge as a step reads it: the source's node id, port and name, the
    target handle, and for a wire into a parameter the socket of the source's port
    (``None``: the edge feeds an input port)."""

    source: str
    source_handle: str
    source_name: str
    target_handle: str
    wired: bool
    socket: str | None  # a wire's source port socket, if the source type declares the port


@dataclass(frozen=True)
class _Shape:
    edges: tuple[_InEdge, ...]
    ports: tuple[tuple[str, bool], ...]  # the definition's input ports: (id, multiple)
    flow_inputs: tuple[str, ...]  # its flow input ports, in order
    linked: tuple[str, ...]  # its parameters with a socket that a link edge leads to


def _shape(graph: Graph, registry: Registry, node: Node, definition: NodeDefinition) -> _Shape:
    input_ids = {p.id for p in definition.inputs}
    edges = []
    for edge in graph.incoming(node.id, "flow"):
        source = graph.node_by_id[edge.source]
        wired = definition.parameter(edge.target_handle) is not None and edge.target_handle not in input_ids
        socket = None
        if wired:
            out_port = registry.get(source.type).definition.output_port(edge.source_handle)
            socket = out_port.socket if out_port else None
        edges.append(_InEdge(edge.source, edge.source_handle, source.name, edge.target_handle, wired, socket))
    links = {e.target_handle for e in graph.incoming(node.id, "link")}
    return _Shape(tuple(edges), tuple((p.id, p.multiple) for p in definition.inputs),
                  tuple(p.id for p in definition.flow_inputs()),
                  tuple(p.id for p in definition.parameters if p.socket is not None and p.id in links))


def _known_shape(plan: RunPlan, graph: Graph, registry: Registry, node: Node, definition: NodeDefinition) -> _Shape:
    """The node's :class:`_Shape`, derived once per plan, node, registry and definition."""
    known: dict[str, tuple[Registry, NodeDefinition, _Shape]] = plan.memo.setdefault("step_in_edges", {})
    found = known.get(node.id)
    if found is not None and found[0] is registry and found[1] is definition:
        return found[2]
    shape = _shape(graph, registry, node, definition)
    known[node.id] = (registry, definition, shape)
    return shape


def gather(plan: RunPlan, registry: Registry, node: Node, definition: NodeDefinition,
           outputs: dict[str, dict[str, DataValue]]) -> Gathered:
    """Values on flow in-edges: declared ports become inputs, parameter sockets wires."""
    shape = _known_shape(plan, plan_graph(plan), registry, node, definition)
    port_values: dict[str, list[DataValue]] = {}
    wires: dict[str, tuple[Any, str]] = {}
    sources: dict[str, list[str]] = {}
    for edge in shape.edges:
        value = outputs.get(edge.source, {}).get(edge.source_handle)
        if value is None:
            continue
        if edge.wired:
            wires[edge.target_handle] = (value.value, value.type if edge.socket is None else edge.socket)
            continue
        port_values.setdefault(edge.target_handle, []).append(value)
        sources.setdefault(edge.target_handle, []).append(edge.source_name)
    inputs: dict[str, DataValue] = {}
    for port_id, multiple in shape.ports:
        values = port_values.get(port_id)
        if not values:
            continue
        inputs[port_id] = DataValue("data", [v.value for v in values]) if multiple else values[0]
    scope_input = next((inputs[p].value for p in shape.flow_inputs if p in inputs), None)
    return Gathered(inputs, wires, sources, scope_input, shape.linked)
