"""``POST /graphs/{graph_id}/test-step``: run one node on the workers (n8n's "test step").

The console's *Test step* runs the selected node without running the graph. Nothing of
the graph runs in the API process: the route builds a run whose only active node is the
one under test and starts it like any run (admission, validation, the store, the
workers), so a Code node runs in its sandbox and an HTTP Request passes the egress policy
exactly as in a full run. The console follows it on the ordinary event stream.

The run's graph is the graph (the body's ``graph``, e.g. the editor's unsaved JSON, else
the latest stored version) less every node downstream of the tested one over flow edges
(:func:`step_graph`); the tested node is the run's only start node, so nothing else is
dispatched. Nodes wired into it over link edges (a model, tools, sub-agents) stay in the
graph and are materialized inside it as in a full run. Its inputs are ``outputs``: for
each upstream node, ``{port: value}`` (the console sends pinned data, else the last run's
outputs), stored as the outputs of nodes that do not run, as a rerun stores its prefix;
expressions read them as ``$('Name')``. A node with no stored inputs reads ``input`` (the
run input) instead. The run is ``meta.trigger = "test_step"`` with ``meta.test_node``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.errors import ForbiddenError, GraphNotFoundError
from orchestrator.kernel.errors import ParameterError
from orchestrator.kernel.protocol import DataValue
from orchestrator.service.runs import RunRequest, admit_and_start

from .auth import role
from .drafts import _check_owner
from .models import GraphId
from .principal import Principal
from .services import Services, get_services

router = APIRouter(tags=["console"])


class StepTestIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node_id: str = Field(min_length=1, max_length=200)
    graph: dict[str, Any] | None = Field(default=None, description="the graph as edited (default: the latest version)")
    input: Any = Field(default=None, description="the run input (what a node with no stored inputs reads)")
    outputs: dict[str, dict[str, Any]] = Field(
        default_factory=dict, max_length=2000,
        description="node id -> {port: value}: stored as the outputs of upstream nodes, which do not run")


def descendants(graph: dict[str, Any], node_id: str) -> set[str]:
    """Every node reachable from ``node_id`` over flow edges (``node_id`` excluded)."""
    succ: dict[str, list[str]] = {}
    for edge in graph.get("edges") or []:
        if ((edge.get("data") or {}).get("channel") or "flow") == "flow":
            succ.setdefault(str(edge.get("source")), []).append(str(edge.get("target")))
    seen: set[str] = set()
    stack = list(succ.get(node_id, []))
    while stack:
        current = stack.pop()
        if current not in seen and current != node_id:
            seen.add(current)
            stack.extend(succ.get(current, []))
    return seen


def step_graph(graph: dict[str, Any], node_id: str) -> dict[str, Any]:
    """``graph`` less the flow descendants of ``node_id`` and their edges: a run started at
    ``node_id`` then has that one active node. ``ParameterError`` when it is not a node."""
    nodes = graph.get("nodes") or []
    if not any(isinstance(n, dict) and n.get("id") == node_id for n in nodes):
        raise ParameterError(f"graph has no node {node_id!r} to test", graph_id=graph.get("id"),
                             node_id=node_id, parameter="node_id")
    below = descendants(graph, node_id)
    kept_edges = [e for e in graph.get("edges") or []
                  if str(e.get("source")) not in below and str(e.get("target")) not in below]
    return {**graph, "nodes": [n for n in nodes if n.get("id") not in below], "edges": kept_edges}


def seeds(graph: dict[str, Any], node_id: str, outputs: dict[str, dict[str, Any]],
          services: Services) -> dict[str, dict[str, DataValue]]:
    """``outputs`` as stored outputs of the graph's other nodes (each port typed by its
    node's definition); entries for unknown nodes or for the tested node are dropped."""
    types = {n.get("id"): n.get("type") for n in graph.get("nodes") or []}
    out: dict[str, dict[str, DataValue]] = {}
    for nid, ports in outputs.items():
        if nid == node_id or nid not in types:
            continue
        definition = services.registry.get(str(types[nid])).definition
        out[nid] = {}
        for port, value in ports.items():
            declared = definition.output_port(port)
            out[nid][port] = DataValue(declared.socket if declared else "data", value)
    return out


@router.post("/graphs/{graph_id}/test-step", status_code=202)
async def start_test_step(graph_id: GraphId, body: StepTestIn, services: Services = Depends(get_services),  # noqa: B008
                    who: Principal = Depends(role("runner"))) -> JSONResponse:  # noqa: B008
    """Start a run of ``node_id`` alone; 202 ``{run_id, events_url}`` (see the module)."""
    await _check_owner(services, graph_id, who.workspace)  # a graph or draft of another workspace: 404
    stored = await services.redis.exists(services.keys.graph(graph_id))
    if body.graph is not None and not who.can("editor"):
        # Running a graph the caller wrote is what saving it would allow: an editor's right.
        raise ForbiddenError(f"testing a step of an edited graph (the body's 'graph') needs the editor role; "
                             f"the key is a {who.role} of workspace {who.workspace!r} (omit 'graph' to test "
                             "the stored version)")
    if body.graph is not None:
        graph = {**body.graph, "id": graph_id, "version": None}
    elif stored:
        graph = await services.graphs.get(graph_id, workspace=who.workspace)
    else:
        raise GraphNotFoundError(f"unknown graph {graph_id!r}; send the graph to test a node of it",
                                 graph_id=graph_id)
    run_graph = step_graph(graph, body.node_id)
    tested = next(n for n in run_graph["nodes"] if isinstance(n, dict) and n.get("id") == body.node_id)
    if not services.registry.get(str(tested.get("type"))).can_execute:  # it failed with an AttributeError
        raise ParameterError(f"node {body.node_id!r} ({tested.get('type')}) does not run on its own: it is "
                             "materialized into the node it is wired to; test that node", graph_id=graph_id,
                             node_id=body.node_id, parameter="node_id")
    meta = {"workspace": who.workspace, "test_node": body.node_id, "graph_version": graph.get("version")}
    request = RunRequest(body.input, start=[body.node_id], meta=meta,
                         seed_outputs=seeds(run_graph, body.node_id, body.outputs, services))
    run_id = await admit_and_start(services, run_graph, request, trigger="test_step")
    if not stored:  # listed under a graph not saved yet: the list expires as a run would
        await services.redis.expire(services.keys.graph_runs(graph_id), services.settings.retention_s)
    return JSONResponse({"run_id": run_id, "events_url": f"/runs/{run_id}/events"}, status_code=202)
