"""Parameter resolution: wire > expression > inline value > default, then coercion.

A declared default is evaluated exactly as an inline value would be (a default of
``{{ input.message }}`` is the input's ``message``).

Whatever produced it, a resolved value is held to what the definition declares, as an
inline value is at validation: a number parameter takes a number (a numeric string, as
an expression inside text makes, becomes that number), within ``min``/``max``; an enum
parameter one of its ``values``. Otherwise the node fails with a ``ParameterValueError``
naming the parameter and the bound: ``"{{ 8192 }}"`` cannot lift a declared maximum of
4096 that a literal 8192 would not pass.

``inputs`` and parameters are separate: a flow edge into a declared input port is an
input; a flow or link edge into a hybrid parameter's socket (handle = parameter id) is a
*wire* that overrides the parameter.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from .definition import NodeDefinition, Parameter
from .errors import CoercionError, EvaluationError, OrchestratorError, ParameterValueError
from .expression_limits import OverAllowance
from .expressions import Scope, render
from .graph import Node
from .inline import check_inline_value, contains_expression
from .sockets import coerce, coerce_parameter

_MISSING = object()


def _context(exc: OrchestratorError, node: Node, param: Parameter) -> OrchestratorError:
    exc.node_id = exc.node_id or node.id
    exc.node_name = exc.node_name or node.name
    exc.parameter = exc.parameter or param.id
    return exc


_NUMBERS = ("int", "float")


def _number(text: str) -> int | float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def within_definition(param: Parameter, value: Any) -> Any:
    """``value`` held to ``param``'s declared type, bounds and values (see the module
    docstring); a numeric string for a number parameter comes back as the number."""
    if value is None or param.type not in (*_NUMBERS, "enum"):
        return value
    if param.type in _NUMBERS and isinstance(value, str):
        number = _number(value.strip())
        if number is None:
            raise ParameterValueError(f"parameter {param.id!r} resolved to {value[:100]!r}, not a number")
        value = number
    problem = check_inline_value(param, value)
    if problem is not None:
        raise ParameterValueError(f"parameter {param.id!r} resolved to a value its definition refuses: "
                                  f"{problem}")
    return value


def resolve_parameter(
    node: Node, param: Parameter, wired: Any, scope: Scope
) -> Any:
    """One parameter's value. ``wired`` is ``(value, source_socket)`` or ``_MISSING``."""
    try:
        if wired is not _MISSING:
            value, source_socket = wired
            target_socket = param.socket.type if param.socket else "any"
            value = coerce_parameter(coerce(value, source_socket, target_socket), param.type)
        elif param.id in node.data:
            value = node.data[param.id]
            # A nested graph's expressions belong to its own nodes, evaluated when it runs.
            if param.expressions and param.type != "graph":
                value = render(value, scope)
        elif param.expressions and param.type != "graph" and param.default is not None:
            # A default is a value like any other: "{{ input.message }}" reads the input.
            value = render(param.default, scope)
        else:
            value = param.default
        return within_definition(param, value)
    except (EvaluationError, CoercionError) as exc:
        raise _context(exc, node, param) from exc


def resolve_parameters(
    node: Node, definition: NodeDefinition, wires: dict[str, tuple[Any, str]], scope: Scope
) -> dict[str, Any]:
    """Every declared parameter of ``node`` resolved (validation rejected unknown ones)."""
    return {
        p.id: resolve_parameter(node, p, wires.get(p.id, _MISSING), scope) for p in definition.parameters
    }


def _evaluates(node: Node, definition: NodeDefinition) -> bool:
    """Whether resolving ``node``'s parameters evaluates any expression."""
    for p in definition.parameters:
        if p.expressions and p.type != "graph" and contains_expression(node.data.get(p.id, p.default)):
            return True
    return False


ON_LOOP_STEPS = 5_000  # ~5 ms of evaluation: more moves to a thread


async def resolve_parameters_off_loop(
    node: Node, definition: NodeDefinition, wires: dict[str, tuple[Any, str]], scope: Scope
) -> dict[str, Any]:
    """:func:`resolve_parameters`, never stalling the event loop for long: expression budgets
    allow seconds of CPU per node execution (``max_total_steps``), which the other steps
    sharing the loop must not wait for.

    Resolution is tried on the loop with an allowance of ``ON_LOOP_STEPS`` (almost every
    node's expressions need far fewer: no thread hop, ~0.2 ms saved per node); past it, it
    is redone from the start in the loop's default executor (a bounded thread pool) with
    the node execution's own tally. Evaluation has no side effects, so redoing is safe."""
    if not _evaluates(node, definition):
        return resolve_parameters(node, definition, wires, scope)
    trial = replace(scope, spending=scope.spending.trial(ON_LOOP_STEPS))
    try:
        resolved = resolve_parameters(node, definition, wires, trial)
    except OverAllowance:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, resolve_parameters, node, definition, wires, scope)
    scope.spending.adopt(trial.spending)
    return resolved
