"""Parameter resolution: wire > expression > inline value > default, then coercion.

A declared default is evaluated exactly as an inline value would be (a default of
``{{ input.message }}`` is the input's ``message``).

``inputs`` and parameters are separate: a flow edge into a declared input port is an
input; a flow or link edge into a hybrid parameter's socket (handle = parameter id) is a
*wire* that overrides the parameter.
"""

from __future__ import annotations

from typing import Any

from .definition import NodeDefinition, Parameter
from .errors import CoercionError, EvaluationError, OrchestratorError
from .expressions import Scope, render
from .graph import Node
from .sockets import coerce, coerce_parameter

_MISSING = object()


def _context(exc: OrchestratorError, node: Node, param: Parameter) -> OrchestratorError:
    exc.node_id = exc.node_id or node.id
    exc.node_name = exc.node_name or node.name
    exc.parameter = exc.parameter or param.id
    return exc


def resolve_parameter(
    node: Node, param: Parameter, wired: Any, scope: Scope
) -> Any:
    """One parameter's value. ``wired`` is ``(value, source_socket)`` or ``_MISSING``."""
    try:
        if wired is not _MISSING:
            value, source_socket = wired
            target_socket = param.socket.type if param.socket else "any"
            return coerce_parameter(coerce(value, source_socket, target_socket), param.type)
        if param.id in node.data:
            raw = node.data[param.id]
            # A nested graph's expressions belong to its own nodes, evaluated when it runs.
            return render(raw, scope) if param.expressions and param.type != "graph" else raw
        # A default is a value like any other: "{{ input.message }}" reads the input.
        if param.expressions and param.type != "graph" and param.default is not None:
            return render(param.default, scope)
        return param.default
    except (EvaluationError, CoercionError) as exc:
        raise _context(exc, node, param) from exc


def resolve_parameters(
    node: Node, definition: NodeDefinition, wires: dict[str, tuple[Any, str]], scope: Scope
) -> dict[str, Any]:
    """Every declared parameter of ``node`` resolved (validation rejected unknown ones)."""
    return {
        p.id: resolve_parameter(node, p, wires.get(p.id, _MISSING), scope) for p in definition.parameters
    }
