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

A parameter whose inline value (or default) holds no expression resolves to the same value
at every step of every run of a plan: :func:`fixed_parameters` resolves it once per plan and
node (with its event preview), and each step takes it from there instead of walking and
checking it again (issue 22: a chain node's CPU).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from .definition import NodeDefinition, Parameter
from .errors import CoercionError, EvaluationError, OrchestratorError, ParameterValueError
from .expression_limits import OverAllowance
from .expressions import Scope, render
from .graph import Node
from .inline import check_inline_value, contains_expression
from .previews import parameter_preview
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


def _renders(node: Node, param: Parameter) -> bool:
    """Whether :func:`resolve_parameter` renders ``param``'s unwired value (which copies its
    lists and objects, and evaluates the expressions in them)."""
    return param.expressions and param.type != "graph" and (param.id in node.data or param.default is not None)


def _fresh(value: Any) -> Any:
    """``value``'s lists and objects rebuilt, as :func:`render` rebuilds a value without
    expressions: a step's executor gets its own, as it did when each step rendered it."""
    if isinstance(value, dict):  # first: the usual object, and cheaper to check than the ABC
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, Mapping):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    return value


@dataclass(frozen=True)
class FixedParameters:
    """What resolving one node's parameters gives at every step of a plan, found once.

    ``values`` (and their ``previews`` for events, shared by every step's events: never
    changed) hold the parameters without an expression whose value the definition accepts;
    a refused one is left to each step, which fails with its error as before. A wire still
    overrides any of them at the step it carries a value."""

    definition: NodeDefinition  # what they were found for: a reloaded definition finds them anew
    values: dict[str, Any]  # param id -> resolved value
    previews: dict[str, Any]  # param id -> the value as events carry it (``parameter_preview``)
    copied: frozenset[str]  # ids whose value each step gets as its own copy (``_fresh``)
    evaluating: frozenset[str]  # ids whose value holds an expression, evaluated at each step
    flat: frozenset[str] = frozenset()  # of ``copied``: a dict or list holding no list or object (``copy()``)


def _find_fixed(node: Node, definition: NodeDefinition, scope: Scope) -> FixedParameters:
    values: dict[str, Any] = {}
    copied: set[str] = set()
    evaluating: set[str] = set()
    for p in definition.parameters:
        renders = _renders(node, p)
        if renders and contains_expression(node.data[p.id] if p.id in node.data else p.default):
            evaluating.add(p.id)
            continue
        try:  # no expression: ``scope`` is not read
            values[p.id] = resolve_parameter(node, p, _MISSING, scope)
        except OrchestratorError:
            continue
        if renders:
            copied.add(p.id)
    flat = {k for k in copied if _flat(values[k])}
    return FixedParameters(definition, values, parameter_preview(values), frozenset(copied), frozenset(evaluating),
                           frozenset(flat))


def _flat(value: Any) -> bool:
    """Whether ``value`` is a dict or list with no list or object in it: its ``copy()`` is
    what :func:`_fresh` makes of it."""
    if type(value) is dict:
        items: Any = value.values()
    elif type(value) is list:
        items = value
    else:
        return False
    return not any(isinstance(v, Mapping | list) for v in items)


def fixed_parameters(memo: dict[str, Any], node: Node, definition: NodeDefinition, scope: Scope) -> FixedParameters:
    """``node``'s :class:`FixedParameters`, found at its first step and kept in ``memo`` (a
    plan's, shared by its runs)."""
    known: dict[str, FixedParameters] = memo.setdefault("fixed_parameters", {})
    found = known.get(node.id)
    if found is None or found.definition is not definition:
        found = known[node.id] = _find_fixed(node, definition, scope)
    return found


def resolve_parameters(
    node: Node, definition: NodeDefinition, wires: dict[str, tuple[Any, str]], scope: Scope,
    fixed: FixedParameters | None = None,
) -> dict[str, Any]:
    """Every declared parameter of ``node`` resolved (validation rejected unknown ones);
    an unwired one of ``fixed`` is taken from there."""
    values, copied, flat = (fixed.values, fixed.copied, fixed.flat) if fixed is not None else \
        ({}, frozenset[str](), frozenset[str]())
    out: dict[str, Any] = {}
    for p in definition.parameters:
        if p.id in values and p.id not in wires:
            value = values[p.id]
            if p.id in copied:
                value = value.copy() if p.id in flat else _fresh(value)
            out[p.id] = value
        else:
            out[p.id] = resolve_parameter(node, p, wires.get(p.id, _MISSING), scope)
    return out


def _evaluates(node: Node, definition: NodeDefinition) -> bool:
    """Whether resolving ``node``'s parameters evaluates any expression."""
    for p in definition.parameters:
        if p.expressions and p.type != "graph" and contains_expression(node.data.get(p.id, p.default)):
            return True
    return False


ON_LOOP_STEPS = 5_000  # ~5 ms of evaluation: more moves to a thread


async def resolve_parameters_off_loop(
    node: Node, definition: NodeDefinition, wires: dict[str, tuple[Any, str]], scope: Scope,
    fixed: FixedParameters | None = None,
) -> dict[str, Any]:
    """:func:`resolve_parameters`, never stalling the event loop for long: expression budgets
    allow seconds of CPU per node execution (``max_total_steps``), which the other steps
    sharing the loop must not wait for.

    Resolution is tried on the loop with an allowance of ``ON_LOOP_STEPS`` (almost every
    node's expressions need far fewer: no thread hop, ~0.2 ms saved per node); past it, it
    is redone from the start in the loop's default executor (a bounded thread pool) with
    the node execution's own tally. Evaluation has no side effects, so redoing is safe.

    With ``fixed`` (:func:`fixed_parameters`), its values are used and its ``evaluating``
    says whether any expression is evaluated, instead of walking the values again."""
    # (fixed: an expression is evaluated unless a wire sets every parameter that holds one)
    evaluates = not fixed.evaluating.issubset(wires) if fixed is not None else _evaluates(node, definition)
    if not evaluates:
        return resolve_parameters(node, definition, wires, scope, fixed)
    trial = replace(scope, spending=scope.spending.trial(ON_LOOP_STEPS))
    try:
        resolved = resolve_parameters(node, definition, wires, trial, fixed)
    except OverAllowance:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, resolve_parameters, node, definition, wires, scope, fixed)
    scope.spending.adopt(trial.spending)
    return resolved
