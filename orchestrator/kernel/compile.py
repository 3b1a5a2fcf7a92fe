"""Compile a validated graph into a run plan (the API and the CLI call this once per run)."""

from __future__ import annotations

from .errors import GraphError
from .scheduling import FlowGraph, PlanInput, RunPlan, plan_run
from .validation import ValidatedGraph


def compile_run(vg: ValidatedGraph, run_id: str, start: list[str] | None = None) -> RunPlan:
    """Plan the sub-graph reachable from ``start`` (default: the graph's trigger nodes)."""
    graph = vg.graph
    if start is None:
        start = vg.start_nodes()
        if not start:
            raise GraphError("the graph has no trigger node to start a run from", graph_id=graph.id)
    for node_id in start:
        if node_id not in graph.node_by_id:
            raise GraphError(f"start node {node_id!r} is not in the graph", graph_id=graph.id, node_id=node_id)
    nodes = [
        PlanInput(
            node_id=n.id,
            node_type=n.type,
            name=n.name,
            required_ports={p.id for p in vg.definitions[n.id].flow_inputs() if p.required},
        )
        for n in graph.nodes
    ]
    flow_edges = [
        (e.id, e.source, e.source_handle, e.target, e.target_handle) for e in graph.edges if e.channel == "flow"
    ]
    plan = plan_run(run_id, graph.to_json(), FlowGraph(nodes, flow_edges), list(start), refs=vg.refs)
    plan.parsed = graph  # the graph its snapshot is (lookahead.plan_graph): not parsed again from it
    return plan
