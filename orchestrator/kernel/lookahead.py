"""What a step derives from the plan about the nodes around it: what a node's step reads,
how many nodes its completion may make ready, and the claims its completion makes for
the nodes its host takes.

A completion that hands its host nodes to run (a chain's next link, a fan-out's branches,
older nodes of the run's queue) claims them in the same store call
(``RunStore.complete_node``'s ``Take.claim_taken``): the host then runs them with no claim
call of their own. The store derives each taken node's claim from the plan
(``taken_claim``: its ``started`` event and what its step reads). Per-node lists are
derived once per plan (``plan.memo``, shared by its runs).
"""

from __future__ import annotations

from typing import Any

from .environment import StepEnvironment
from .graph import Graph, Node, trusted_graph
from .protocol import EventType, NodeEvent
from .scheduling import RunPlan
from .store import ClaimRequest, NodeCompletion, NodeStatus, TakenClaims

_WHERE_EVENTS = frozenset({EventType.STARTED, EventType.COMPLETED, EventType.ERROR})


def node_event(env: StepEnvironment, run_id: str, node: Node, event_type: str,
               data: dict[str, Any] | None = None) -> NodeEvent:
    """A node event of attempt 1 (the caller sets another); ``started``, ``completed`` and
    ``error`` say which worker ran it."""
    return event_by(env.worker_id, run_id, node, event_type, data)


def event_by(worker_id: str, run_id: str, node: Node, event_type: str,
             data: dict[str, Any] | None = None) -> NodeEvent:
    """:func:`node_event` of the process ``worker_id`` names (a worker, or a run's start)."""
    if event_type in _WHERE_EVENTS:
        data = {**(data or {}), "worker_id": worker_id}
    return NodeEvent(run_id=run_id, node_id=node.id, node_type=node.type, node_name=node.name,
                     event_type=event_type, data=data)


def plan_graph(plan: RunPlan) -> Graph:
    """The plan's graph snapshot, parsed once per plan object and shared by every run
    :meth:`RunPlan.for_run` derives from it (a compiled plan keeps the graph it was compiled
    from; a plan read from Redis is parsed once per process); validated when the run was
    compiled, so trusted."""
    if plan.parsed is None:
        plan.parsed = trusted_graph(plan.graph)
    graph: Graph = plan.parsed
    return graph


def step_reads(plan: RunPlan, graph: Graph, node_id: str) -> list[str]:
    """The nodes whose outputs a step of ``node_id`` reads (its flow sources and the nodes
    its expressions name), sorted."""
    reads: dict[str, list[str]] = plan.memo.setdefault("step_reads", {})
    known = reads.get(node_id)
    if known is None:
        sources = {e.source for e in graph.incoming(node_id, "flow")}
        known = reads[node_id] = sorted(sources | set(plan.refs.get(node_id, [])))
    return known


def _targets(plan: RunPlan, node_id: str) -> list[frozenset[str]]:
    """For each target of the node's out-edges, the node's output ports that lead to it
    (derived once per plan)."""
    known_all: dict[str, list[frozenset[str]]] = plan.memo.setdefault("step_targets", {})
    known = known_all.get(node_id)
    if known is None:
        rank = plan.rank()
        ports: dict[str, set[str]] = {}
        for e in plan.nodes[node_id].out:
            if e.target in rank:
                ports.setdefault(e.target, set()).add(e.source_handle)
        known = known_all[node_id] = [frozenset(p) for p in ports.values()]
    return known


def reach(plan: RunPlan, node_id: str, completion: NodeCompletion) -> int:
    """How many nodes ``completion`` of ``node_id`` may make ready at once: the targets its
    live ports lead to (what its host reserves slots for; skips may ready more, which
    wait on the run's queue). None for a completion that readies nothing."""
    if completion.status not in (NodeStatus.SUCCEEDED, NodeStatus.FAILED) or completion.stop_run:
        return 0
    live = completion.outputs.keys()
    return sum(1 for ports in _targets(plan, node_id) if not ports.isdisjoint(live))


def taken_claim(plan: RunPlan, node_id: str, taken: TakenClaims) -> ClaimRequest:
    """The claim ``taken`` describes for ``node_id`` of the plan's run: its lease, the
    node's ``started`` event with ``taken.started_data``, and what its step reads (for a
    store that derives the request of each node a completion takes, ``Take.claim_taken``)."""
    graph, node = plan_graph(plan), plan.nodes[node_id]
    started = NodeEvent(run_id=plan.run_id, node_id=node_id, node_type=node.node_type, node_name=node.name,
                        event_type=EventType.STARTED, data=dict(taken.started_data))
    return ClaimRequest(node_id=node_id, lease_s=taken.lease_s, started=started,
                        read=step_reads(plan, graph, node_id))


def claim_taken(env: StepEnvironment) -> TakenClaims:
    """How a completion of this host claims every node it takes (``Take.claim_taken``):
    the host's lease, and ``started`` events that name this worker, as ``node_event`` does."""
    return TakenClaims(lease_s=env.options.lease_s, started_data={"worker_id": env.worker_id})
