"""Chains of pure nodes run in the step that readies them, and are stored with it in one call.

A node type whose definition is ``pure`` reads only its inputs, parameters and
expressions (within their budgets) and touches nothing outside: run again, it gives the
same result. When a step's completion readies exactly one node, that node is pure, this
completion alone feeds it, and everything its step reads is in hand, the step runs it at
once instead of storing the completion and having the next link claimed and its inputs
read back; then the same for that node's successor, up to ``StepOptions.fuse_max_nodes``
links, no new link once the chain has run ``fuse_max_s`` or its outputs pass ``MAX_CHARS``
of JSON. The links' completions are stored with the first in one store call
(``RunStore.complete_chain``): the same state changes and events, in the same order, as a
call per link; each link's ``started`` event is appended by the claim that call makes for
it.

What a crash costs: nothing of a chain is stored before that call. A worker lost meanwhile
loses the links' executions with the first node's; the first node runs again when its
lease expires, as any node whose worker died, and its pure links again after it, with the
same results. The chain runs under the first node's lease, supervision (a cancelled run
stops it) and workspace ceiling unit.

A link whose execution does not succeed (an error, whatever its error mode; a retry; a
cancelled run) ends the chain before it, unstored: the links before it are stored, and it
runs as any node handed over, with its own claim, retries and error handling.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .graph import Graph
from .lookahead import step_reads
from .observer import UNOBSERVED, ObservedEnd, ObservedNode, observe, with_usage
from .protocol import EventType, NodeEvent
from .registry import Registry
from .scheduling import RunPlan
from .store import ChainLink, Claim, NodeCompletion, NodeStatus
from .usage import Usage

if TYPE_CHECKING:
    from .supervision import Watch

log = logging.getLogger("orchestrator.fusion")

# A chain grows no further once its outputs pass this much JSON: the one script call that
# stores it carries them all (each node's own outputs may reach ORCH_MAX_OUTPUT_BYTES).
MAX_CHARS = 1 << 20

# step._execute_node: (step context, claim, watch, usage, own events) -> (completion, retry
# delay); the step context is step.StepContext (this module is below step.py).
Execute = Callable[[Any, Claim, "Watch", Usage, list[NodeEvent]], Awaitable[tuple[NodeCompletion, float | None]]]


def _sole_target(plan: RunPlan, node_id: str) -> tuple[str, str] | None:
    """(target, output port) when the node's only out-edge leads to a node with no other
    flow in-edge that is not a start node; else None (derived once per plan)."""
    memo: dict[str, tuple[str, str] | None] = plan.memo.setdefault("fuse_next", {})
    if node_id in memo:
        return memo[node_id]
    rank = plan.rank()
    edges = [e for e in plan.nodes[node_id].out if e.target in rank]
    found = None
    if len(edges) == 1 and plan.nodes[edges[0].target].pending == 1 and edges[0].target not in plan.start:
        found = (edges[0].target, edges[0].source_handle)
    memo[node_id] = found
    return found


def _may_fuse(plan: RunPlan, graph: Graph, registry: Registry, node_id: str) -> bool:
    """Whether the node is a pure type's, with no rate limits and no link edges into it
    (derived once per plan)."""
    memo: dict[str, bool] = plan.memo.setdefault("fusable", {})
    known = memo.get(node_id)
    if known is None:
        node = graph.node_by_id.get(node_id)
        known = memo[node_id] = bool(
            node is not None and registry.get(node.type).definition.pure and not node.settings.limits
            and not graph.incoming(node_id, "link"))
    return known


@dataclass
class InHand:
    """What a step running a chain holds: the run's plan, graph and node types, and the
    outputs in hand (what the first node's claim read, and every output of the chain)."""

    plan: RunPlan
    graph: Graph
    registry: Registry
    outputs: dict[str, Any]

    def next_link(self, node_id: str, completion: NodeCompletion) -> str | None:
        """The node that ``completion`` of ``node_id`` readies and the step may run now
        (see the module docstring), or None."""
        if completion.status != NodeStatus.SUCCEEDED or completion.stop_run:
            return None
        sole = _sole_target(self.plan, node_id)
        if sole is None or sole[1] not in completion.outputs:
            return None
        target = sole[0]
        if not _may_fuse(self.plan, self.graph, self.registry, target):
            return None
        if any(n not in self.outputs for n in step_reads(self.plan, self.graph, target)):
            return None
        return target


def stamp_duration(completion: NodeCompletion, started_at: float) -> None:
    """The ``duration_ms`` of a completion's ``completed`` event: its execution's time."""
    if completion.status != NodeStatus.WAITING:
        for ev in completion.events:
            if ev.event_type == EventType.COMPLETED and ev.data is not None:
                ev.data["duration_ms"] = round((time.monotonic() - started_at) * 1000, 3)


def stamped_s(completion: NodeCompletion) -> float:
    """The execution time :func:`stamp_duration` gave a completion, in seconds (0: none)."""
    for ev in completion.events:
        if ev.event_type == EventType.COMPLETED and ev.data is not None:
            return float(ev.data.get("duration_ms", 0.0)) / 1000
    return 0.0


async def run_links(step: Any, claim: Claim, watch: Watch, completion: NodeCompletion,
                    execute: Execute) -> list[ChainLink]:
    """Run the links that follow the node of ``step`` (a ``step.StepContext``), whose
    ``completion`` is not stored yet, here, one after the other, while each is fusable;
    their completions, in order."""
    opts = step.options
    if opts.fuse_max_nodes <= 0:
        return []
    registry, observer = step.env.registry, opts.observer
    hand = InHand(step.plan, step.graph, registry, {**claim.outputs, step.node.id: completion.outputs})
    # Every link runs as attempt 1 of a first claim, on the outputs in hand (their claims
    # are made when the chain is stored).
    claimed = Claim(kind="run", claims=1, run_input=claim.run_input, session_id=claim.session_id,
                    workspace=claim.workspace, outputs=hand.outputs, attempt=1, token=claim.token)
    deadline = time.monotonic() + opts.fuse_max_s
    links: list[ChainLink] = []
    current, done = step.node.id, completion
    chars = completion.output_chars
    try:
        while len(links) < opts.fuse_max_nodes and time.monotonic() < deadline and chars <= MAX_CHARS:
            target = hand.next_link(current, done)
            if target is None:
                break
            node = step.graph.node_by_id[target]
            link = step.of(node, registry.get(node.type))
            started_at, own, usage = time.monotonic(), list[NodeEvent](), Usage()
            with UNOBSERVED if observer is None else observe(observer, ObservedNode(
                    step.plan, node.id, node.type, node.name, 1, step.env.worker_id)) as seen:
                done, _ = await execute(link, claimed, watch, usage, own)
                done.events[:0] = own  # what it streamed comes before its completed event
                reported = with_usage(done.events, usage)
                if observer is not None:
                    seen.end(ObservedEnd(done.status, done.error, reported))
            if done.status != NodeStatus.SUCCEEDED:
                break  # unstored: it runs as any node handed over
            stamp_duration(done, started_at)
            links.append(ChainLink(target, done))
            hand.outputs[target] = done.outputs
            chars += done.output_chars
            current = target
    except Exception:  # a fault of the chain's own code (a link's failure is node data): store what ran
        log.exception("run %s: the chain after node %s stopped", step.plan.run_id, current)
    return links
