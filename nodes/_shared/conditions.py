"""Conditions and templates that a node evaluates itself, per item or per case.

Parameters declared ``"expressions": false`` reach the executor as raw strings; these
helpers evaluate them with the kernel's expression engine (a parser, never ``eval``).
A condition may be written with or without braces: ``{{ $item.age >= 18 }}`` and
``$item.age >= 18`` mean the same. Kernel expression errors are re-raised as
``ValueError`` naming the parameter (and the item or case), since they are bad runtime
input of this node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.kernel.errors import OrchestratorError
from orchestrator.kernel.expression_limits import check_source
from orchestrator.kernel.expressions import Scope, evaluate, has_expression, parse_template, render
from orchestrator.kernel.protocol import FlowContext

_FALSE_STRINGS = frozenset({"", "false", "0", "no", "off", "null", "none"})


def make_scope(ctx: FlowContext, value: Any, extra: Mapping[str, Any] | None = None) -> Scope:
    """A scope whose ``input``/``$json`` is ``value``, with ``$run`` from ``ctx``.

    Evaluations in it run under the host's expression limits and add to the tally of the
    node execution (``ctx.expression_spending``): conditions evaluated per item count
    toward the same ``max_total_chars`` and ``max_total_steps`` as the node's parameters,
    and stop at their next step once the node execution ended (timed out, cancelled)."""
    return Scope(
        input=value,
        run={"id": ctx.run_id, "input": ctx.run_input},
        extra=dict(extra or {}),
        limits=ctx.expression_limits,
        spending=ctx.expression_spending,
    )


def truthy(value: Any) -> bool:
    """Truthiness of an evaluated condition; strings like "false"/"0"/"no" are false."""
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_STRINGS
    return bool(value)


def evaluate_condition(text: Any, scope: Scope, *, parameter: str, where: str = "") -> bool:
    """Evaluate a condition string (braces optional) or pass a literal bool through."""
    if isinstance(text, bool):
        return text
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"parameter {parameter!r} must be a non-empty condition{_at(where)}")
    source = text if has_expression(text) else "{{ " + text + " }}"
    try:
        check_source(source, scope.limits)
        template = parse_template(source)
        value = evaluate(template, scope) if template.whole else render(source, scope)
    except OrchestratorError as exc:
        raise ValueError(f"parameter {parameter!r}: {exc.message}{_at(where)}") from exc
    return truthy(value)


def render_text(text: str, scope: Scope, *, parameter: str) -> Any:
    """Render a template string; ``{{ }}`` parts are evaluated, the rest kept literally."""
    try:
        return render(text, scope)
    except OrchestratorError as exc:
        raise ValueError(f"parameter {parameter!r}: {exc.message}") from exc


def _at(where: str) -> str:
    return f" ({where})" if where else ""
