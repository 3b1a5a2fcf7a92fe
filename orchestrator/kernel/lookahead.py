"""What a step derives from the plan about the nodes around it: what a node's step reads,
and the claims its completion may make for the successors the same host runs next.

A completion that hands its host nodes to run (a chain's next link, a fan-out's branches)
can claim them in the same store call (``RunStore.complete_node``'s ``Take.claims``): the
host then runs them with no claim call of their own. The candidates are the targets of
the node's out-edges on the ports its completion made live that have no other input, in
plan order, as many as the host takes: the nodes a completion hands over first when they
become ready. Per-node lists are derived once per plan (``plan.memo``, shared by its runs).
"""

from __future__ import annotations

from typing import Any

from .environment import StepEnvironment
from .graph import Graph, Node, trusted_graph
from .protocol import EventType, NodeEvent
from .scheduling import RunPlan
from .store import ClaimRequest, NodeCompletion, NodeStatus

_WHERE_EVENTS = frozenset({EventType.STARTED, EventType.COMPLETED, EventType.ERROR})


def node_event(env: StepEnvironment, run_id: str, node: Node, event_type: str,
               data: dict[str, Any] | None = None) -> NodeEvent:
    """A node event of attempt 1 (the caller sets another); ``started``, ``completed`` and
    ``error`` say which worker ran it."""
    if event_type in _WHERE_EVENTS:
        data = {**(data or {}), "worker_id": env.worker_id}
    return NodeEvent(run_id=run_id, node_id=node.id, node_type=node.type, node_name=node.name,
                     event_type=event_type, data=data)


def plan_graph(plan: RunPlan) -> Graph:
    """The plan's graph snapshot, built once per compiled plan (kept in ``plan.memo``, which
    every run :meth:`RunPlan.for_run` derives from it shares: a process that starts runs of
    a stored graph's version and runs their steps parses its graph once, not once per run);
    validated when the run was compiled, so trusted."""
    if plan.parsed is None:
        parsed = plan.memo.get("parsed_graph")
        if parsed is None:
            parsed = plan.memo["parsed_graph"] = trusted_graph(plan.graph)
        plan.parsed = parsed
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


def _targets(plan: RunPlan, node_id: str) -> list[tuple[str, frozenset[str], bool]]:
    """The targets of the node's out-edges in plan order, each with the node's output ports
    that lead to it and whether this node is its only input (derived once per plan)."""
    known_all: dict[str, list[tuple[str, frozenset[str], bool]]] = plan.memo.setdefault("step_targets", {})
    known = known_all.get(node_id)
    if known is None:
        rank = plan.rank()
        ports: dict[str, set[str]] = {}
        for e in plan.nodes[node_id].out:
            if e.target in rank:
                ports.setdefault(e.target, set()).add(e.source_handle)
        known = known_all[node_id] = [(t, frozenset(ports[t]), plan.nodes[t].pending == 1)
                                      for t in sorted(ports, key=rank.__getitem__)]
    return known


def reach(plan: RunPlan, node_id: str, completion: NodeCompletion) -> int:
    """How many nodes ``completion`` of ``node_id`` may make ready at once: the targets its
    live ports lead to (what its host reserves slots for; skips may ready more, which
    wait on the run's queue). None for a completion that readies nothing."""
    if completion.status not in (NodeStatus.SUCCEEDED, NodeStatus.FAILED) or completion.stop_run:
        return 0
    live = completion.outputs.keys()
    return sum(1 for _, ports, _ in _targets(plan, node_id) if not ports.isdisjoint(live))


def next_claims(env: StepEnvironment, plan: RunPlan, node_id: str, completion: NodeCompletion,
                limit: int) -> list[ClaimRequest]:
    """The claims ``completion`` of ``node_id`` may make for the successors its host runs
    next, at most ``limit`` (the nodes the host takes): the first of those its live ports
    lead to that it alone makes ready (one in-edge; a join waits for its last input, so the
    completion of each of its other inputs would prepare a claim for nothing). None for a
    completion that readies nothing (a retry, a suspension, a stop)."""
    if completion.status not in (NodeStatus.SUCCEEDED, NodeStatus.FAILED) or completion.stop_run or limit <= 0:
        return []
    graph, lease_s, live = plan_graph(plan), env.options.lease_s, completion.outputs.keys()
    targets = [nid for nid, ports, sole in _targets(plan, node_id) if sole and not ports.isdisjoint(live)][:limit]
    return [ClaimRequest(node_id=nid, lease_s=lease_s, read=step_reads(plan, graph, nid),
                         started=node_event(env, plan.run_id, graph.node_by_id[nid], EventType.STARTED))
            for nid in targets]
