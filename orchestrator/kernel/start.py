"""A start node resolved by the run's start: no step is spent on it.

A run's single start node whose type can tell its result from its parameters and the run
input alone (``protocol.StartResolver``: a trigger's output is the run input) is
completed with the run's creation, in the same store call (``RunStore.create_run``'s
``started``): its ``started`` and ``completed`` events, its outputs and its successors
made ready are stored with the run, and the caller dispatches those successors instead
of the start node. That is a broker message, a claim and a completion less per run; a
run of that node alone ends at its creation.

Everything else takes the step as before, so that the step reports it with its error,
retry and events: a node type without ``at_start``, a disabled node, a node with rate
limits, a node with more than one successor (its step's completion hands them over in
the worker's process, into its free slots, where the start would send a message per
node: a fan-out from the trigger costs the same either way, and a message per branch
more here), a parameter that holds an expression or that its definition refuses, an
``at_start`` that returns None or raises, and outputs that break the output limits.
Resolving here follows what the step does: the same parameter resolution (the plan's
memo), the same output checks, previews and events (``worker_id``: the starting process).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from .environment import StepOptions
from .errors import OrchestratorError
from .expressions import Scope
from .graph import Node
from .lookahead import event_by, plan_graph
from .observer import ObservedEnd, ObservedNode, observe
from .output_limits import check_outputs
from .parameters import FixedParameters, fixed_parameters, resolve_parameters
from .previews import output_preview
from .protocol import EventType, ExecutionResult, can_resolve_at_start
from .registry import NodeType, Registry
from .scheduling import RunPlan
from .store import NodeCompletion, NodeStatus, StartedNode

log = logging.getLogger("orchestrator.start")


@dataclass(frozen=True)
class Starting:
    """Who resolves start nodes, and the output limits a step of theirs would check."""

    registry: Registry
    worker_id: str
    options: StepOptions


@dataclass(frozen=True)
class StartInput:
    """What a start node's ``at_start`` reads of its run."""

    run_input: Any
    session_id: str | None = None


def resolve_at_start(plan: RunPlan, run: StartInput, starting: Starting) -> StartedNode | None:
    """The run's start node completed now, or None when it takes a step (module docstring)."""
    found = _resolvable(plan, starting)
    if found is None:
        return None
    node, node_type, fixed = found.node, found.node_type, found.fixed
    begun = time.monotonic()
    data = resolve_parameters(node, node_type.definition, {}, found.scope, fixed)
    try:
        result = node_type.executor.at_start(data, run.run_input, run.session_id)  # type: ignore[attr-defined]
        if not isinstance(result, ExecutionResult):
            return None
        texts = check_outputs(node, node_type.definition, result, max_bytes=starting.options.max_output_bytes,
                              max_depth=starting.options.max_output_depth)
    except Exception as exc:  # the step runs it and reports this as the node's error
        log.debug("run %s node %s: not resolved at start (%s)", plan.run_id, node.id, exc)
        return None
    preview, cut = output_preview(result.outputs, texts)
    completed = event_by(starting.worker_id, plan.run_id, node, EventType.COMPLETED, {
        "outputs": preview, "outputs_truncated": cut, "parameters": fixed.previews,
        "duration_ms": round((time.monotonic() - begun) * 1000, 3)})
    started = event_by(starting.worker_id, plan.run_id, node, EventType.STARTED)
    if starting.options.observer is not None:  # seen as a step's execution (a trace's node span), once resolved
        with observe(starting.options.observer, ObservedNode(plan, node.id, node.type, node.name, 1,
                                                             starting.worker_id)) as seen:
            seen.end(ObservedEnd(NodeStatus.SUCCEEDED, None, {}))
    return StartedNode(node.id, NodeCompletion(status=NodeStatus.SUCCEEDED, outputs=dict(result.outputs),
                                               events=[started, *result.events, completed]))


@dataclass(frozen=True)
class _Resolvable:
    """A plan's start node that may be resolved at start: what every start of the plan
    reuses (its parameters hold no expression, so ``scope`` is never read)."""

    node: Node
    node_type: NodeType
    fixed: FixedParameters
    scope: Scope


def _resolvable(plan: RunPlan, starting: Starting) -> _Resolvable | None:
    """The plan's start node when it may be resolved at start, else None: decided once per
    plan (``plan.memo``, shared by its runs) and ``starting``."""
    known = plan.memo.get("at_start")
    if known is not None and known[0] is starting:
        found: _Resolvable | None = known[1]
        return found
    found = _find(plan, starting)
    plan.memo["at_start"] = (starting, found)
    return found


def _find(plan: RunPlan, starting: Starting) -> _Resolvable | None:
    if len(plan.start) != 1:
        return None
    node = plan_graph(plan).node_by_id.get(plan.start[0])
    planned = plan.nodes.get(plan.start[0])
    if node is None or planned is None or node.settings.disabled or node.settings.limits \
            or len({edge.target for edge in planned.out}) > 1:
        return None
    try:
        node_type = starting.registry.get(node.type)
    except OrchestratorError:
        return None
    if not can_resolve_at_start(node_type.executor):
        return None
    definition = node_type.definition
    scope = Scope(limits=starting.options.expression_limits)
    fixed = fixed_parameters(plan.memo, node, definition, scope)
    if fixed.evaluating or any(p.id not in fixed.values for p in definition.parameters):
        return None  # an expression, or a value the definition refuses: the step evaluates or reports it
    return _Resolvable(node, node_type, fixed, scope)
