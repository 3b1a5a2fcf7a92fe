"""Graph validation: everything that can be wrong with a graph, found before a run.

``validate_graph(raw, registry)`` parses the graph and checks, in this order, raising the
first fault as a ``GraphError`` subclass that names the graph and the node, edge, handle
or parameter at fault:

1. schema (``parse_graph``): shape, field types, every edge's channel is flow or link;
2. duplicate node ids, node names, edge ids (``DuplicateError``);
3. every node type is registered (``UnknownNodeTypeError``, with "did you mean");
4. every edge: both nodes exist, the source handle is an output port (or the error port
   when the node routes errors there), the target handle is an input port or a hybrid
   parameter's socket (``HandleError``); the edge's channel is the channel both ports
   declare (``ChannelError``); the sockets connect (``SocketTypeError``); an input that
   is not ``multiple`` has at most one edge (``HandleError``);
5. no cycle over flow edges (``CycleError``), none over link edges (``LinkCycleError``),
   each with the node names around the cycle in the message and in ``path``;
6. parameters (see ``_check_node``): unknown ids (did you mean), inline values of the
   declared type/enum/range, required ones present, expression syntax, and every
   ``$('Name')`` names an existing node upstream (``UpstreamReferenceError``); a
   parameter of type ``graph`` holds a graph that is validated recursively; no expression
   text is longer than ``GraphLimits.max_source_chars``.

Fan-out: a parameter declared ``fan_out`` (an integer) says how many runs of its node's
nested graphs may be in flight at once. Along a chain of nested graphs these multiply
(8 runs at once, each running a node that runs 8 at once, is 64); the product must stay
within ``GraphLimits.max_fan_out``, else the innermost node's parameter is refused
(``ParameterError``). Only literal values are known here; an expression is checked by
the node when it runs.

"Upstream" of a node: its flow ancestors; a node that only feeds link edges also sees
what the nodes it is linked into see (it is materialized on their behalf).
"""

from __future__ import annotations

import difflib
from collections.abc import Container, Mapping
from dataclasses import dataclass, field
from typing import Any

from .cycles import Visible, ancestors, find_cycle
from .definition import NodeDefinition, Parameter, Port
from .errors import (
    ChannelError,
    CycleError,
    DuplicateError,
    ExpressionError,
    GraphError,
    GraphSchemaError,
    HandleError,
    LinkCycleError,
    ParameterError,
    SocketTypeError,
    UpstreamReferenceError,
)
from .expression_limits import DEFAULT_LIMITS
from .expressions import check_syntax, find_references
from .graph import ERROR_PORT, Edge, Graph, Node, parse_graph
from .inline import check_inline_value, contains_expression
from .registry import Registry
from .sockets import can_connect

# The socket and channel of the implicit error port (``settings.on_error == "error_port"``).
_ERROR_PORT = Port(id=ERROR_PORT, socket="data", channel="flow")


@dataclass(frozen=True)
class GraphLimits:
    """Bounds a graph is checked against, besides its shape (the host's settings)."""

    max_source_chars: int = DEFAULT_LIMITS.max_source_chars  # one expression's text
    max_fan_out: int = 64  # runs of nested graphs in flight at once, multiplied along the nesting
    max_nodes: int = 5_000  # nodes of one graph (a nested graph counts on its own)
    max_edges: int = 20_000  # edges of one graph


DEFAULT_GRAPH_LIMITS = GraphLimits()


@dataclass
class ValidatedGraph:
    """A graph that passed every check, with the indices later stages need."""

    graph: Graph
    definitions: dict[str, NodeDefinition]  # node id -> definition
    upstream: Mapping[str, set[str]] = field(default_factory=dict)  # node id -> flow ancestor ids (lazy)
    refs: dict[str, list[str]] = field(default_factory=dict)  # node id -> ids its expressions read

    def start_nodes(self) -> list[str]:
        """Trigger nodes (``definition.trigger``), in node order."""
        return [n.id for n in self.graph.nodes if self.definitions[n.id].trigger]


def _label(node: Node) -> str:
    return f'node {node.id} ("{node.name}")'


def validate_graph(raw: dict[str, Any] | Graph, registry: Registry, limits: GraphLimits = DEFAULT_GRAPH_LIMITS,
                   *, fan_out: int = 1) -> ValidatedGraph:
    """Parse and check ``raw``; raise the first fault as a ``GraphError`` subclass.

    ``fan_out``: how many runs of this graph the nodes it is nested in keep in flight."""
    graph = raw if isinstance(raw, Graph) else parse_graph(raw)
    _check_size(graph, limits)
    if isinstance(raw, Graph):
        _check_channels(graph)
    _check_duplicates(graph)
    definitions = {
        n.id: registry.get(n.type, graph_id=graph.id, node_id=n.id, node_name=n.name).definition
        for n in graph.nodes
    }
    _check_edges(graph, definitions)
    order = [n.id for n in graph.nodes]
    flow_succ: dict[str, list[str]] = {n: [] for n in order}
    link_succ: dict[str, list[str]] = {n: [] for n in order}
    wired: dict[str, set[str]] = {n: set() for n in order}
    for edge in graph.edges:
        (flow_succ if edge.channel == "flow" else link_succ)[edge.source].append(edge.target)
        wired[edge.target].add(edge.target_handle)
    _check_cycle(graph, order, flow_succ, CycleError, "flow")
    _check_cycle(graph, order, link_succ, LinkCycleError, "link")
    upstream = ancestors(order, flow_succ)
    refs: dict[str, list[str]] = {}
    for node in graph.nodes:
        names = _check_node(_NodeCheck(graph=graph, node=node, definition=definitions[node.id], wired=wired[node.id],
                                       visible=Visible(node.id, upstream, link_succ), registry=registry,
                                       limits=limits, fan_out=fan_out))
        if names:
            refs[node.id] = [graph.node_by_name[name].id for name in sorted(names)]
    return ValidatedGraph(graph=graph, definitions=definitions, upstream=upstream, refs=refs)


# -- structure -------------------------------------------------------------------------


def _check_size(graph: Graph, limits: GraphLimits) -> None:
    for what, count, bound in (("nodes", len(graph.nodes), limits.max_nodes),
                               ("edges", len(graph.edges), limits.max_edges)):
        if count > bound:
            raise GraphSchemaError(f"graph has {count} {what}, above the limit of {bound} "
                                   f"(setting ORCH_GRAPH_MAX_{what.upper()})", graph_id=graph.id)


def _check_channels(graph: Graph) -> None:
    """A Graph built in code skipped ``parse_graph``; its channels still must be valid."""
    for edge in graph.edges:
        channel = edge.data.channel if edge.data else None
        if channel not in ("flow", "link"):
            raise ChannelError(
                f"edge {edge.id} has channel {channel!r}; every edge must say 'flow' or 'link'",
                graph_id=graph.id, edge_id=edge.id,
            )


def _check_duplicates(graph: Graph) -> None:
    ids: set[str] = set()
    names: dict[str, str] = {}
    for node in graph.nodes:
        if node.id in ids:
            raise DuplicateError(f"duplicate node id {node.id!r}", graph_id=graph.id,
                                 node_id=node.id, node_name=node.name)
        ids.add(node.id)
        if node.name in names:
            raise DuplicateError(
                f"duplicate node name {node.name!r} on nodes {names[node.name]} and {node.id}; "
                "names must be unique because expressions use them",
                graph_id=graph.id, node_id=node.id, node_name=node.name,
            )
        names[node.name] = node.id
    edge_ids: set[str] = set()
    for edge in graph.edges:
        if edge.id in edge_ids:
            raise DuplicateError(f"duplicate edge id {edge.id!r}", graph_id=graph.id,
                                 edge_id=edge.id)
        edge_ids.add(edge.id)


def _port_names(ports: list[str]) -> str:
    return ", ".join(repr(p) for p in ports) or "none"


def _source_port(graph: Graph, edge: Edge, node: Node, definition: NodeDefinition) -> Port:
    port = definition.output_port(edge.source_handle)
    if port is None and edge.source_handle == ERROR_PORT and node.settings.on_error == "error_port":
        port = _ERROR_PORT
    if port is None:
        outputs = [p.id for p in definition.outputs]
        if node.settings.on_error == "error_port":
            outputs.append(ERROR_PORT)
        raise HandleError(
            f"edge {edge.id}: {_label(node)} of type {node.type!r} has no output "
            f"{edge.source_handle!r} (outputs: {_port_names(outputs)})",
            graph_id=graph.id, edge_id=edge.id, node_id=node.id, node_name=node.name,
            handle=edge.source_handle,
        )
    return port


def _target_port(graph: Graph, edge: Edge, node: Node, definition: NodeDefinition) -> Port:
    port = definition.input_port(edge.target_handle)
    if port is None:
        handles = [p.id for p in definition.inputs]
        handles += [p.id for p in definition.parameters if p.socket is not None]
        raise HandleError(
            f"edge {edge.id}: {_label(node)} of type {node.type!r} has no input "
            f"{edge.target_handle!r} (inputs: {_port_names(handles)})",
            graph_id=graph.id, edge_id=edge.id, node_id=node.id, node_name=node.name,
            handle=edge.target_handle,
        )
    return port


def _check_edges(graph: Graph, definitions: dict[str, NodeDefinition]) -> None:
    nodes = graph.node_by_id
    fan_in: dict[tuple[str, str], str] = {}
    for edge in graph.edges:
        for role, node_id in (("source", edge.source), ("target", edge.target)):
            if node_id not in nodes:
                raise HandleError(f"edge {edge.id}: {role} node {node_id!r} does not exist",
                                  graph_id=graph.id, edge_id=edge.id)
        source, target = nodes[edge.source], nodes[edge.target]
        out_port = _source_port(graph, edge, source, definitions[source.id])
        in_port = _target_port(graph, edge, target, definitions[target.id])
        # A parameter socket takes a wire on either channel (a flow value or a linked
        # value both override the inline parameter); declared ports fix their channel.
        target_is_param = not any(p.id == edge.target_handle for p in definitions[target.id].inputs)
        checked = ((source, out_port),) if target_is_param else ((source, out_port), (target, in_port))
        for node, port in checked:
            if port.channel != edge.channel:
                raise ChannelError(
                    f"edge {edge.id} is a {edge.channel} edge but handle {port.id!r} of "
                    f"{_label(node)} is a {port.channel} port",
                    graph_id=graph.id, edge_id=edge.id, node_id=node.id, node_name=node.name,
                    handle=port.id,
                )
        if not can_connect(out_port.socket, in_port.socket):
            raise SocketTypeError(
                f"edge {edge.id}: cannot connect socket type {out_port.socket!r} "
                f"({_label(source)}, handle {out_port.id!r}) to socket type {in_port.socket!r} "
                f"({_label(target)}, handle {in_port.id!r})",
                graph_id=graph.id, edge_id=edge.id, node_id=target.id, node_name=target.name,
                handle=in_port.id,
            )
        key = (target.id, in_port.id)
        if key in fan_in and not in_port.multiple:
            raise HandleError(
                f"edge {edge.id}: input {in_port.id!r} of {_label(target)} already has edge "
                f"{fan_in[key]} and accepts only one",
                graph_id=graph.id, edge_id=edge.id, node_id=target.id, node_name=target.name,
                handle=in_port.id,
            )
        fan_in.setdefault(key, edge.id)


def _check_cycle(graph: Graph, order: list[str], successors: dict[str, list[str]],
                 error: type[GraphError], channel: str) -> None:
    cycle = find_cycle(order, successors)
    if cycle is None:
        return
    names = [graph.node_by_id[n].name for n in cycle]
    first = graph.node_by_id[cycle[0]]
    hint = " (loops are container nodes)" if channel == "flow" else ""
    raise error(f"cycle over {channel} edges: {' -> '.join(names)}{hint}", graph_id=graph.id,
                node_id=first.id, node_name=first.name, path=names)


# -- parameters ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _NodeCheck:
    """What checking one node's parameters needs: the node, its graph and definition, the
    inputs wired to it, the nodes its expressions may read, and the graph's
    ``validate_graph`` arguments (``fan_out``: runs of this graph kept in flight)."""

    graph: Graph
    node: Node
    definition: NodeDefinition
    wired: set[str]
    visible: Container[str]
    registry: Registry
    limits: GraphLimits
    fan_out: int


def _check_node(check: _NodeCheck) -> set[str]:
    """Check ``check.node``'s parameters; return the node names its expressions reference."""
    graph, node, definition, limits = check.graph, check.node, check.definition, check.limits
    where: dict[str, Any] = {"graph_id": graph.id, "node_id": node.id, "node_name": node.name}
    for key in node.data:
        if definition.parameter(key) is None:
            ids = [p.id for p in definition.parameters]
            close = difflib.get_close_matches(key, ids, n=1)
            hint = (f"; did you mean {close[0]!r}?" if close
                    else f" (parameters: {_port_names(ids)})")
            raise ParameterError(
                f"unknown parameter {key!r} on {_label(node)} of type {node.type!r}{hint}",
                parameter=key, **where,
            )
    names: set[str] = set()
    nested_fan_out = _fan_out(graph, node, definition, limits, check.fan_out)
    for param in definition.parameters:
        value = node.data.get(param.id)
        if value is None or value == "":
            if param.required and param.default is None and param.id not in check.wired:
                raise ParameterError(
                    f"required parameter {param.id!r} on {_label(node)} of type {node.type!r} "
                    "has no value, no default and no wire",
                    parameter=param.id, **where,
                )
            continue
        if param.type == "graph":
            _check_nested(check, param, value, nested_fan_out)
            continue
        if param.expressions and contains_expression(value):
            names |= _check_expressions(check, param, value)
            if isinstance(value, str):
                continue  # an expression string: its type is known only at run time
        problem = check_inline_value(param, value)
        if not problem and param.graph_ref and value == graph.id:
            problem = f"names graph {graph.id!r} itself, and a graph may not run itself"
        if problem:
            raise ParameterError(
                f"parameter {param.id!r} on {_label(node)}: {problem}", parameter=param.id, **where
            )
    return names


def _fan_out(graph: Graph, node: Node, definition: NodeDefinition, limits: GraphLimits, outer: int) -> int:
    """Runs of ``node``'s nested graphs in flight at once: ``outer`` times its fan-out
    parameters' literal values (or defaults); refused above ``limits.max_fan_out``."""
    total = outer
    for param in definition.parameters:
        if not param.fan_out:
            continue
        value = node.data.get(param.id, param.default)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
            total *= int(value)
            if total > limits.max_fan_out:
                raise ParameterError(
                    f"parameter {param.id!r} on {_label(node)} would keep {total} runs of its nested "
                    f"graph in flight at once ({outer} from the nodes it is nested in x {int(value)}), "
                    f"above the limit of {limits.max_fan_out} (max_fan_out); lower it or the "
                    "outer nodes' value", graph_id=graph.id, node_id=node.id, node_name=node.name,
                    parameter=param.id)
    return total


def _check_expressions(check: _NodeCheck, param: Parameter, value: Any) -> set[str]:
    graph, node = check.graph, check.node
    where: dict[str, Any] = {"graph_id": graph.id, "node_id": node.id, "node_name": node.name,
                             "parameter": param.id}
    try:
        check_syntax(value, check.limits.max_source_chars)
    except ExpressionError as exc:
        message = f"parameter {param.id!r} on {_label(node)}: {exc.message}"
        raise type(exc)(message, **where) from None
    names = find_references(value)
    for name in sorted(names):
        source = graph.node_by_name.get(name)
        if source is None:
            close = difflib.get_close_matches(name, list(graph.node_by_name), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UpstreamReferenceError(
                f"parameter {param.id!r} on {_label(node)} references node {name!r} "
                f"which does not exist{hint}", **where,
            )
        if source.id not in check.visible:
            raise UpstreamReferenceError(
                f"parameter {param.id!r} on {_label(node)} references node {name!r} "
                f"which is not upstream of {_label(node)}", **where,
            )
    return names


def _check_nested(check: _NodeCheck, param: Parameter, value: Any, fan_out: int) -> None:
    """Validate the graph ``value`` of ``check.node``'s parameter ``param``, whose runs the
    nodes around it keep ``fan_out`` in flight."""
    graph, node = check.graph, check.node
    where: dict[str, Any] = {"graph_id": graph.id, "node_id": node.id, "node_name": node.name,
                             "parameter": param.id}
    if not isinstance(value, dict):
        raise ParameterError(
            f"parameter {param.id!r} on {_label(node)} must hold a graph object, "
            f"got {type(value).__name__}", **where,
        )
    try:
        validate_graph(value, check.registry, check.limits, fan_out=fan_out)
    except GraphError as exc:
        inner = type(exc)(f"in the graph of parameter {param.id!r} on {_label(node)}: {exc}",
                          path=exc.path, edge_id=exc.edge_id, handle=exc.handle, **where)
        raise inner from None
