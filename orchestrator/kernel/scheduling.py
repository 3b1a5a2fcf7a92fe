"""Scheduling as pure functions over plain data.

``plan_run`` compiles a validated graph into a :class:`RunPlan`: the active sub-graph
(nodes reachable from the start nodes over flow edges), each node's count of flow
in-edges that can still deliver, its required ports, and its flow out-edges. Nodes off
the active sub-graph never run (link-only sources are materialized on demand).

``complete`` is the barrier's transition function, applied once per finished node:

* each out-edge is *live* when the node produced a value on its source port, *dead*
  otherwise; either way the target's pending count drops by one;
* a target whose pending count reaches zero runs when at least one in-edge was live and
  every required port that has in-edges received a value; otherwise it is skipped, and
  all its out-edges are dead (the skip propagates);
* so a merge fires when every input that can still arrive has arrived, and does not
  wait for dead branches.

The Redis Lua script in ``workers/`` implements the same function; a conformance suite
checks both against the same cases.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .cycles import topological_order
from .errors import GraphError


@dataclass
class OutEdge:
    edge_id: str
    target: str
    source_handle: str
    target_handle: str


@dataclass
class PlanNode:
    node_id: str
    node_type: str
    name: str
    pending: int  # flow in-edges from active nodes
    required: list[str]  # required input ports that have in-edges from active nodes
    out: list[OutEdge]

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "node_type": self.node_type,
            "name": self.name,
            "pending": self.pending,
            "required": self.required,
            "out": [[e.edge_id, e.target, e.source_handle, e.target_handle] for e in self.out],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> PlanNode:
        return cls(
            node_id=raw["node_id"],
            node_type=raw["node_type"],
            name=raw["name"],
            pending=int(raw["pending"]),
            required=list(raw["required"]),
            out=[OutEdge(*e) for e in raw["out"]],
        )


@dataclass
class RunPlan:
    run_id: str
    graph: dict[str, Any]  # the validated graph snapshot this run executes
    start: list[str]  # start node ids (ready at once)
    order: list[str]  # active node ids in topological order
    nodes: dict[str, PlanNode]  # active nodes only
    refs: dict[str, list[str]] = field(default_factory=dict)  # node -> nodes its expressions read
    # Strings the host attaches when the run starts (e.g. a trace context); never read here.
    labels: dict[str, str] = field(default_factory=dict)
    # The parsed graph, cached on the plan object by the step function (not serialized).
    parsed: Any = field(default=None, init=False, repr=False, compare=False)
    # What a host derives once from a plan (e.g. its encoded form), shared by every plan
    # ``for_run`` makes from the same one (not serialized).
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _rank: dict[str, int] | None = field(default=None, init=False, repr=False, compare=False)

    def for_run(self, run_id: str) -> RunPlan:
        """The same plan for run ``run_id`` (no labels): a compiled plan reused by every
        run of one graph version. Graph, nodes, refs and the parsed graph are shared, not
        copied: plans are never changed after compilation."""
        plan = RunPlan(run_id=run_id, graph=self.graph, start=self.start, order=self.order, nodes=self.nodes,
                       refs=self.refs, memo=self.memo)
        plan.parsed, plan._rank = self.parsed, self._rank
        return plan

    def rank(self) -> dict[str, int]:
        """Each node's index in ``order``, built once per plan object."""
        if self._rank is None:
            self._rank = {n: i for i, n in enumerate(self.order)}
        return self._rank

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "graph": self.graph,
            "start": self.start,
            "order": self.order,
            "nodes": {k: v.to_json() for k, v in self.nodes.items()},
            "refs": self.refs,
            "labels": self.labels,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RunPlan:
        return cls(
            run_id=raw["run_id"],
            graph=raw["graph"],
            start=list(raw["start"]),
            order=list(raw["order"]),
            nodes={k: PlanNode.from_json(v) for k, v in raw["nodes"].items()},
            refs={k: list(v) for k, v in raw.get("refs", {}).items()},
            labels={str(k): str(v) for k, v in raw.get("labels", {}).items()},
        )


@dataclass
class PlanInput:
    """The minimum the planner needs about one node (kept free of pydantic models)."""

    node_id: str
    node_type: str
    name: str
    required_ports: set[str]  # required flow input ports per the definition


@dataclass(frozen=True)
class FlowGraph:
    """The graph as the planner reads it: its nodes in graph order and its flow edges."""

    nodes: list[PlanInput]
    edges: list[tuple[str, str, str, str, str]]  # (edge_id, source, source_handle, target, target_handle)


def plan_run(run_id: str, graph: dict[str, Any], flow: FlowGraph, start: list[str],
             refs: dict[str, list[str]] | None = None) -> RunPlan:
    """Compile the active sub-graph reachable from ``start`` over flow edges; linear in
    nodes + edges."""
    nodes, flow_edges = flow.nodes, flow.edges
    by_id = {n.node_id: n for n in nodes}
    for s in start:
        if s not in by_id:
            raise GraphError(f"start node {s!r} is not in the graph")
    succ: dict[str, list[tuple[str, str, str, str]]] = {n.node_id: [] for n in nodes}
    for eid, s, sh, t, th in flow_edges:
        succ[s].append((eid, t, sh, th))
    active: set[str] = set()
    stack = list(start)
    while stack:
        n = stack.pop()
        if n in active:
            continue
        active.add(n)
        stack.extend(t for _, t, _, _ in succ[n])
    ordered_ids = [n.node_id for n in nodes if n.node_id in active]
    successors: dict[str, list[str]] = {n: [] for n in ordered_ids}
    for _, s, _, t, _ in flow_edges:
        if s in active and t in active:
            successors[s].append(t)
    order = topological_order(ordered_ids, successors)
    if len(order) != len(ordered_ids):
        raise GraphError("the flow edges form a cycle")
    in_edges_of: dict[str, list[str]] = {n: [] for n in ordered_ids}  # target -> handles of active in-edges
    for _, s, _, t, th in flow_edges:
        if s in active and t in active:
            in_edges_of[t].append(th)
    plan_nodes: dict[str, PlanNode] = {}
    for nid in order:
        info = by_id[nid]
        in_edges = in_edges_of[nid]
        ports_with_edges = set(in_edges)
        plan_nodes[nid] = PlanNode(
            node_id=nid,
            node_type=info.node_type,
            name=info.name,
            pending=0 if nid in start else len(in_edges),
            required=sorted(info.required_ports & ports_with_edges) if nid not in start else [],
            out=[OutEdge(eid, t, sh, th) for eid, t, sh, th in succ[nid] if t in active],
        )
    return RunPlan(run_id=run_id, graph=graph, start=list(start), order=order, nodes=plan_nodes,
                   refs=refs or {})


# ---------------------------------------------------------------------------------------
# The barrier's transition function (mirrored by orchestrator/store/lua/complete.lua)


@dataclass
class BarrierState:
    status: dict[str, str]  # node -> pending|running|succeeded|failed|skipped|waiting
    pending: dict[str, int]
    live: dict[str, dict[str, int]]  # node -> port -> live in-edges
    remaining: int  # active nodes not yet finished
    ready: set[str] = field(default_factory=set)  # became ready (start nodes included)
    dispatched: set[str] = field(default_factory=set)
    run_failed: bool = False

    @classmethod
    def initial(cls, plan: RunPlan) -> BarrierState:
        return cls(
            status={n: "pending" for n in plan.order},
            pending={n: p.pending for n, p in plan.nodes.items()},
            live={n: {} for n in plan.order},
            remaining=len(plan.order),
            ready=set(plan.start),
        )


@dataclass
class Transition:
    ready: list[str]  # newly ready, in plan order
    skipped: list[str]  # newly skipped, in plan order
    run_finished: bool  # every active node has finished


FINISHED = ("succeeded", "failed", "skipped")


def should_run(node: PlanNode, live: dict[str, int]) -> bool:
    """A node whose inputs are all resolved runs iff something arrived and no required port is empty."""
    if sum(live.values()) == 0:
        return False
    return all(live.get(port, 0) > 0 for port in node.required)


def complete(plan: RunPlan, state: BarrierState, node_id: str, status: str, live_ports: set[str]) -> Transition:
    """Apply one node's completion to ``state`` (mutated). Idempotent on ``status``."""
    if state.status.get(node_id) in FINISHED:
        return Transition(ready=[], skipped=[], run_finished=state.remaining == 0)
    ready: list[str] = []
    skipped: list[str] = []
    queue: deque[tuple[str, set[str]]] = deque([(node_id, live_ports)])
    state.status[node_id] = status
    state.remaining -= 1
    while queue:
        current, ports = queue.popleft()
        for edge in plan.nodes[current].out:
            target = edge.target
            if edge.source_handle in ports:
                state.live[target][edge.target_handle] = state.live[target].get(edge.target_handle, 0) + 1
            state.pending[target] -= 1
            if state.pending[target] == 0 and state.status[target] == "pending":
                if should_run(plan.nodes[target], state.live[target]):
                    ready.append(target)
                    state.ready.add(target)
                else:
                    state.status[target] = "skipped"
                    state.remaining -= 1
                    skipped.append(target)
                    queue.append((target, set()))
    rank = plan.rank()
    return Transition(
        ready=sorted(ready, key=rank.__getitem__),
        skipped=sorted(skipped, key=rank.__getitem__),
        run_finished=state.remaining == 0,
    )


@dataclass(frozen=True)
class StartEffect:
    """What one start node's completion with ``live`` ports does to a fresh run of a plan
    (``complete`` on the initial state): the same for every run of the plan, so a store
    that applies it with the run's creation writes it rather than working it out. Nodes
    in plan order."""

    ready: list[str]
    skipped: list[str]
    arrivals: dict[str, int]  # node -> its flow in-edges resolved (its pending count goes down by this)
    live: dict[str, dict[str, int]]  # node -> port -> live in-edges
    remaining: int  # active nodes not finished after it
    finished: bool  # nothing remains: the run ends succeeded


def start_effect(plan: RunPlan, node_id: str, live_ports: frozenset[str]) -> StartEffect:
    """:class:`StartEffect` of ``node_id`` (a start node) ending succeeded with
    ``live_ports``, derived once per plan and ports (``plan.memo``, shared by its runs)."""
    known: dict[tuple[str, frozenset[str]], StartEffect] = plan.memo.setdefault("start_effect", {})
    found = known.get((node_id, live_ports))
    if found is None:
        state = BarrierState.initial(plan)
        before = dict(state.pending)
        moved = complete(plan, state, node_id, "succeeded", set(live_ports))
        found = known[(node_id, live_ports)] = StartEffect(
            ready=moved.ready, skipped=moved.skipped,
            arrivals={n: before[n] - state.pending[n] for n in plan.order if state.pending[n] != before[n]},
            live={n: dict(ports) for n, ports in state.live.items() if ports},
            remaining=state.remaining, finished=moved.run_finished)
    return found
