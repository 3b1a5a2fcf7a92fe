"""The one step function: run one node of one run, wherever it runs.

Workers call it for each node task; the local runner calls it for in-process runs and
nested sub-graphs. It claims the node (idempotent per run and node), gathers inputs and
referenced outputs from the store, resolves parameters, runs the executor under the
node's retry policy, timeout and the run's cancellation, applies the node's error mode,
and hands the completion to the store, which returns the successors that became ready.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .definition import NodeDefinition
from .environment import StepEnvironment, StepOptions
from .errors import (
    NodeSuperseded,
    OrchestratorError,
    RetryRequested,
    RunCancelled,
    SuspendRequested,
    WaitRequested,
)
from .expressions import Scope
from .fusion import run_links, stamp_duration, stamped_s
from .gathering import Gathered, gather
from .graph import ERROR_PORT, Graph, Node
from .limits import enter_ceiling, leave_ceiling, resolve_limits
from .lookahead import claim_taken, node_event, plan_graph, reach, step_reads
from .observer import UNOBSERVED, ObservedEnd, ObservedNode, observe, with_usage
from .output_limits import check_outputs
from .parameters import fixed_parameters, resolve_parameters_off_loop
from .previews import OUTPUT_PREVIEW_CHARS, PREVIEW_CHARS, output_preview, parameter_preview  # noqa: F401 - re-exported
from .protocol import DataValue, EventType, ExecutionResult, NodeEvent
from .registry import NodeType
from .retry import backoff_s, is_retryable
from .runtime import GraphRuntime, RunFrame
from .scheduling import RunPlan
from .store import ChainLink, Claim, ClaimRequest, NodeCompletion, NodeStatus, Take
from .streaming import EventStream, drive
from .supervision import Watch, supervise, supervisor_for, timed
from .usage import Usage

log = logging.getLogger("orchestrator.step")

@dataclass
class StepOutcome:
    ready: list[str]  # successors to dispatch now
    ran: bool  # the executor was called
    status: str  # node status, or done / busy / early / closed (it did not run), stale (superseded)
    node_type: str = ""
    duration_s: float = 0.0  # claim to completion, when it ran
    retry_in_s: float | None = None  # a retry is scheduled (or not due yet): run the node again after this long
    queued: int = 0  # ready successors this completion left on the run's queue (``take`` given)
    usage: dict[str, dict[str, float]] = field(default_factory=dict)  # what the execution reported (usage.py)
    # The claims of ``ready`` nodes granted with this completion (node id -> claim): run
    # each with its own, and claim the others first.
    claims: dict[str, Claim] = field(default_factory=dict)
    # The pure nodes run after it in this step and stored with it (fusion.py), in order:
    # (node type, status, duration in seconds) of each.
    fused: list[tuple[str, str, float]] = field(default_factory=list)


def main_output(definition: NodeDefinition, outputs: dict[str, DataValue]) -> Any:
    """The value ``$('Name').item.json`` reads: first populated flow output, else the error port."""
    for port in definition.flow_outputs():
        if port.id in outputs:
            return outputs[port.id].value
    if ERROR_PORT in outputs:
        return outputs[ERROR_PORT].value
    return next(iter(outputs.values())).value if outputs else None


def _error_info(exc: BaseException, node: Node) -> dict[str, Any]:
    if isinstance(exc, OrchestratorError):
        info = exc.to_dict()
    else:
        info = {"type": type(exc).__name__, "code": "node_failed", "message": str(exc) or type(exc).__name__}
    info.setdefault("node_id", node.id)
    info.setdefault("node_name", node.name)
    return info


@dataclass
class StepContext:
    """Everything one step of one node works with, bundled (as httpx bundles a request)."""

    env: StepEnvironment
    plan: RunPlan
    graph: Graph
    node: Node
    node_type: NodeType

    @property
    def options(self) -> StepOptions:
        return self.env.options

    def of(self, node: Node, node_type: NodeType) -> StepContext:
        """The step of another node of the same run (a chain's link, fusion.py)."""
        return StepContext(env=self.env, plan=self.plan, graph=self.graph, node=node, node_type=node_type)

    def event(self, event_type: str, data: dict[str, Any] | None = None, attempt: int = 1) -> NodeEvent:
        """A node event; ``started``, ``completed`` and ``error`` say which worker ran it."""
        event = node_event(self.env, self.plan.run_id, self.node, event_type, data)
        event.attempt = attempt
        return event


async def run_step(env: StepEnvironment, run_id: str, node_id: str, *,
                   take: Callable[[int], int] | None = None, claimed: Claim | None = None) -> StepOutcome:
    """Run ``node_id`` of ``run_id`` once; safe to call again for the same node.

    A failed attempt with attempts left does not wait here: its completion is
    ``retrying`` (the store frees the node) and the outcome's ``retry_in_s`` tells the
    host when to call again; the next call runs the next attempt.

    ``take`` (the host's slots, asked at completion time with how many nodes the completion
    may make ready: the host reserves its own slot and free ones for them) puts the
    successors that became ready on the run's queue and returns at most as many of the
    oldest queued as it answered in ``ready`` (see ``RunStore.complete_node``); without it
    ``ready`` holds them all.

    With ``take``, the completion also claims the nodes it hands over (a chain's next link,
    a fan-out's branches, older nodes of the run's queue) when it can: the outcome's
    ``claims``, which the host passes as ``claimed`` to the step of each of those nodes
    instead of a claim call of its own.

    ``env`` is what this process lends every step: store, registry, worker id, options,
    artifact cache, the runs' host objects and the nested-graph runner."""
    store, registry, opts = env.store, env.registry, env.options
    plan = await store.load_plan(run_id)
    graph = plan_graph(plan)
    node = graph.node_by_id.get(node_id)
    if node is None or node_id not in plan.nodes:
        return StepOutcome(ready=[], ran=False, status="closed")
    node_type = registry.get(node.type, graph_id=graph.id, node_id=node.id, node_name=node.name)
    step = StepContext(env=env, plan=plan, graph=graph, node=node, node_type=node_type)

    claim = claimed or await store.claim_node(
        run_id, ClaimRequest(node_id, lease_s=opts.lease_s, started=step.event(EventType.STARTED),
                             read=step_reads(plan, graph, node.id)), worker_id=env.worker_id)
    if claim.kind != "run":
        return StepOutcome(ready=claim.pending_dispatch, ran=False, status=claim.kind,
                           retry_in_s=claim.retry_in_s)

    started_at = time.monotonic()
    # From the claim on, the process's supervisor renews the lease and watches the run.
    watch = supervisor_for(store).hold(run_id, node_id, token=claim.token, lease_s=opts.lease_s,
                                       poll_s=opts.cancel_poll_s)
    # Without an observer (the usual host) nothing is built for one: two frozen objects a step.
    observer = opts.observer
    try:
        with UNOBSERVED if observer is None else observe(observer, ObservedNode(
                plan, node.id, node.type, node.name, claim.attempt, env.worker_id)) as seen:
            completion, retry_in_s = await _execute_node(step, claim, watch, usage := Usage())
            if completion.status == NodeStatus.WAITING and usage:  # what it used before it suspended
                completion.events.append(step.event(EventType.PROGRESS, {"suspended": True}, claim.attempt))
            reported = with_usage(completion.events, usage)
            if observer is not None:
                seen.end(ObservedEnd(completion.status, completion.error, reported))
        stamp_duration(completion, started_at)
        duration_s = time.monotonic() - started_at
        # A host that takes what completions hand over may get the pure nodes that follow run here.
        links = await run_links(step, claim, watch, completion, _execute_node) if take is not None else []
    finally:
        watch.release()
        if env.ceiling is not None:
            await leave_ceiling(env.ceiling, claim.workspace, f"{run_id}:{node_id}:{claim.attempt}")
    handover = None
    if take is not None:
        last = links[-1] if links else ChainLink(node.id, completion)
        handover = Take(take(reach(plan, last.node_id, last.completion)), claim_taken=claim_taken(env))
    if links and handover is not None:
        ready = await store.complete_chain(run_id, [ChainLink(node.id, completion), *links], take=handover,
                                           token=claim.token)
    else:
        ready = await store.complete_node(run_id, node_id, completion, take=handover, token=claim.token)
    if ready.stale:  # a later claim superseded this one: nothing was applied
        log.warning("run %s node %s: completion refused (token %d superseded)", run_id, node_id, claim.token)
        return StepOutcome(ready=[], ran=True, status="stale", node_type=node.type)
    fused = [(graph.node_by_id[k.node_id].type, k.completion.status, stamped_s(k.completion))
             for k in links[:max(0, ready.applied - 1)]]
    return StepOutcome(ready=ready.nodes, ran=True, status=completion.status, node_type=node.type,
                       duration_s=duration_s, retry_in_s=retry_in_s, queued=ready.queued,
                       usage=usage.to_json() if reported else {}, claims=ready.claims, fused=fused)


async def _execute_node(step: StepContext, claim: Claim, watch: Watch, usage: Usage,
                        own: list[NodeEvent] | None = None) -> tuple[NodeCompletion, float | None]:
    """Run the node's attempt ``claim.attempt``: (its completion, the retry delay when the
    completion is ``retrying``); what the executor reports goes to ``usage``. ``own``: the
    node is a chain's link (fusion.py), not claimed yet: the events it streams are kept
    there, and it runs in the ceiling unit of the node before it. Else they go to the
    store under its claim's token as it streams them (streaming.py), all stored before
    this returns."""
    if own is not None:
        return await _attempt(step, claim, watch, usage, own)
    stream = EventStream(step.env.store, claim.token)
    try:
        return await _attempt(step, claim, watch, usage, stream)
    finally:
        if stream.unsettled:
            await stream.settle()


async def _attempt(step: StepContext, claim: Claim, watch: Watch, usage: Usage,
                   events: list[NodeEvent] | EventStream) -> tuple[NodeCompletion, float | None]:
    """``_execute_node`` with the node's streamed events kept in ``events`` (a chain's
    link) or sent through it."""
    node, plan, graph, registry = step.node, step.plan, step.graph, step.env.registry
    definition = step.node_type.definition
    outputs = claim.outputs
    gathered = gather(plan, registry, node, definition, outputs)
    referenced = {
        graph.node_by_id[nid].name: main_output(registry.get(graph.node_by_id[nid].type).definition, outputs[nid])
        for nid in plan.refs.get(node.id, []) if nid in outputs
    }
    scope_input = gathered.scope_input if node.id not in plan.start or gathered.inputs else claim.run_input
    scope = Scope(input=scope_input, nodes=referenced,
                  run={"id": plan.run_id, "input": claim.run_input, "session_id": claim.session_id},
                  limits=step.options.expression_limits)

    async def sink(ev: NodeEvent) -> None:
        if isinstance(events, EventStream):
            await events.emit(ev)
        else:
            events.append(ev)

    run = RunFrame(graph=graph, run_id=plan.run_id, run_input=claim.run_input, session_id=claim.session_id,
                   host=step.env.host(plan.run_id, claim.workspace))
    runtime = GraphRuntime(step.env, run, node_id=node.id, scope=scope, sink=sink)
    policy = node.settings.retry
    attempt = claim.attempt
    resolved: dict[str, Any] = {}
    texts: dict[str, str] | None = None  # the outputs' values as JSON text, once checked
    try:
        if node.settings.disabled:
            result = _pass_through(definition, gathered)
        else:
            if step.env.ceiling is not None and isinstance(events, EventStream):
                await enter_ceiling(step.env.ceiling, claim.workspace, f"{plan.run_id}:{node.id}:{attempt}")
            if step.env.limiter is not None and node.settings.limits:
                await _acquire_limits(step, claim, scope)
            wires = await _link_wires(runtime, node, gathered) if gathered.linked else gathered.wires
            fixed = fixed_parameters(plan.memo, node, definition, scope)
            data = await resolve_parameters_off_loop(node, definition, wires, scope, fixed)
            # Wired values differ per step: their previews are made anew.
            resolved = parameter_preview(data, known={k: v for k, v in fixed.previews.items() if k not in wires}
                                         if wires else fixed.previews)
            ctx = runtime.context_for(node.id, attempt=attempt, resume=claim.resume,
                                      input_sources=gathered.sources, usage=usage)
            driven = drive(step.node_type.executor, data, gathered.inputs, ctx, sink)
            work = asyncio.ensure_future(driven if node.settings.timeout_s is None else timed(node, driven))
            try:
                result = await supervise(watch, work)
            finally:
                # Work the executor left in a thread (a timed-out or cancelled node cannot
                # be killed there) stops at its next expression step.
                scope.spending.stop("the node execution it belongs to has ended")
            if isinstance(events, EventStream) and events.unsettled:
                await events.flush()  # its events stored (or their refusal raised) before its completion
            texts = check_outputs(node, definition, result, max_bytes=step.options.max_output_bytes,
                          max_depth=step.options.max_output_depth)
    except WaitRequested as exc:
        wait_s = exc.remaining_s()
        log.info("run %s node %s waits %.2fs for %s", plan.run_id, node.id, wait_s, exc.reason)
        throttled = step.event(EventType.THROTTLED, {"delay_s": round(wait_s, 3), **exc.reason,
                                                     "message": exc.message}, attempt)
        return NodeCompletion(status=NodeStatus.RETRYING, events=[throttled], next_attempt=attempt,
                              retry_delay_s=wait_s), wait_s
    except SuspendRequested as exc:
        log.info("run %s node %s suspended", plan.run_id, node.id)
        return NodeCompletion(status=NodeStatus.WAITING, payload=exc.payload), None
    except (RunCancelled, NodeSuperseded) as exc:
        # the store ended the node with its run, or a later claim has it: this is refused
        return NodeCompletion(status=NodeStatus.FAILED, error=_error_info(exc, node)), None
    except Exception as exc:  # an executor may raise anything: it becomes node data
        if attempt < policy.max_attempts and is_retryable(policy, exc):
            delay = exc.delay_s if isinstance(exc, RetryRequested) and exc.delay_s is not None \
                else backoff_s(policy, attempt)
            log.warning("run %s node %s attempt %d failed (%s); retrying in %.2fs",
                        plan.run_id, node.id, attempt, type(exc).__name__, delay)
            retry = step.event(EventType.RETRY, {
                "attempt": attempt, "next_attempt": attempt + 1, "delay_s": round(delay, 3),
                "error": _error_info(exc, node)}, attempt)
            return NodeCompletion(status=NodeStatus.RETRYING, events=[retry], next_attempt=attempt + 1,
                                  retry_delay_s=delay), delay
        failure = _failure(step, exc, gathered, attempt)
        for ev in failure.events:
            if ev.data is not None:
                ev.data["parameters"] = resolved
        return failure, None
    extra = list(result.events)
    preview, cut = output_preview(result.outputs, texts)
    completed = step.event(EventType.COMPLETED, {"outputs": preview, "outputs_truncated": cut,
                                                 "parameters": resolved}, attempt)
    return NodeCompletion(status=NodeStatus.SUCCEEDED, outputs=result.outputs, events=[*extra, completed],
                          output_chars=sum(map(len, texts.values())) if texts else 0), None


async def _acquire_limits(step: StepContext, claim: Claim, scope: Scope) -> None:
    """The node's ``settings.limits``, acquired at once from the process's limiter; a
    refusal raises WaitRequested (kernel/limits.py)."""
    limiter, node = step.env.limiter, step.node
    if limiter is None or not node.settings.limits:
        return
    requests = resolve_limits(node.settings.limits, scope, node_id=node.id, node_name=node.name)
    decision = await limiter.acquire(requests, holder=f"{step.plan.run_id}:{node.id}:{claim.attempt}",
                                     workspace=claim.workspace)
    if decision.wait_s > 0:
        raise WaitRequested(f"rate limit {decision.key!r}", delay_s=decision.wait_s,
                            reason={"limit": decision.key, "source": "node"})


async def _link_wires(runtime: GraphRuntime, node: Node, gathered: Gathered) -> dict[str, tuple[Any, str]]:
    """The flow wires, and the values link edges give the parameters a flow wire does not set."""
    wires = dict(gathered.wires)
    for param_id in gathered.linked:
        if param_id not in wires:
            values = await runtime.resolve_links(node.id, param_id)
            if values:
                wires[param_id] = (values[0], runtime.source_socket(node.id, param_id))
    return wires


def _pass_through(definition: NodeDefinition, gathered: Gathered) -> ExecutionResult:
    """A disabled node forwards its main input on its first flow output."""
    outs = definition.flow_outputs()
    if not outs or gathered.scope_input is None:
        return ExecutionResult()
    return ExecutionResult(outputs={outs[0].id: DataValue("data", gathered.scope_input)})


def _failure(step: StepContext, exc: BaseException, gathered: Gathered, attempt: int) -> NodeCompletion:
    node, definition = step.node, step.node_type.definition
    info = _error_info(exc, node)
    mode = "stop" if getattr(exc, "stops_run", False) else node.settings.on_error
    log.warning("run %s node %s failed: %s (mode %s)", getattr(exc, "run_id", None) or "", node.id,
                info["message"], mode)
    error_event = step.event(EventType.ERROR, {"error": info, "recoverable": mode != "stop", "mode": mode},
                             attempt)
    if mode == "stop":
        return NodeCompletion(status=NodeStatus.FAILED, error=info, stop_run=True, events=[error_event])
    payload = {"error": info["message"], "error_type": info["type"], "node": node.name,
               "input": gathered.scope_input}
    if mode == "continue":
        outs = definition.flow_outputs()
        outputs = {outs[0].id: DataValue("data", payload)} if outs else {}
    else:
        outputs = {ERROR_PORT: DataValue("data", payload)}
    return NodeCompletion(status=NodeStatus.FAILED, error=info, outputs=outputs, events=[error_event])
