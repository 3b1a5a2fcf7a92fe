"""Runs: start one of a stored graph, read it, cancel it, re-run it from a node, approve.

Nothing here is tied to the caller's connection: a run, once started, is driven by the
workers and the Redis run store, whoever is still listening.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from orchestrator.kernel.errors import ParameterError, RunStateError
from orchestrator.kernel.store import RunStatus
from orchestrator.service import admission
from orchestrator.service.runs import RunRequest, StoredGraph

from .auth import role
from .launch import child_links, find_node, launch, owned_run, relaunch, run_detail, start_node
from .models import Approval, GraphId, Rerun, StartRun
from .principal import Principal
from .services import Services, get_services

router = APIRouter(tags=["runs"])
SERVICES = Depends(get_services)
VIEWER = Depends(role("viewer"))
RUNNER = Depends(role("runner"))


def accepted(run_id: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"run_id": run_id, "events_url": f"/runs/{run_id}/events", **extra}, status_code=202)


@router.post("/graphs/{graph_id}/runs", status_code=202)
async def start(graph_id: GraphId, body: StartRun, services: Services = SERVICES,
                who: Principal = RUNNER) -> JSONResponse:
    """Start a run; 202 ``{run_id, events_url}``. ``trigger`` picks the start node."""
    starts = None
    if body.trigger is not None:
        graph = await services.graphs.get(graph_id, body.version, workspace=who.workspace)
        starts = [start_node(graph, body.trigger, services)]
    run_id = await launch(
        services,
        StoredGraph(graph_id, version=body.version, workspace=who.workspace),
        RunRequest(body.input, start=starts, session_id=body.session_id),
        trigger="manual",
    )
    return accepted(run_id)


@router.get("/runs/{run_id}")
async def get_run(run_id: str, services: Services = SERVICES, who: Principal = VIEWER) -> dict[str, Any]:
    """Status, error, per-node status and outputs, and the run's final output."""
    await owned_run(services, run_id, who.workspace)
    return await run_detail(services, run_id)


@router.post("/runs/{run_id}/cancel")
async def cancel(run_id: str, services: Services = SERVICES, who: Principal = RUNNER) -> dict[str, Any]:
    """Cancel: queued nodes never start; running ones stop within ``cancel_poll_s``.

    ``cancelled`` is false when the run had already ended (its status is returned).
    """
    await owned_run(services, run_id, who.workspace)  # 404 for an unknown id or another workspace's
    done = await services.runs.finish_run(
        run_id,
        RunStatus.CANCELLED,
        {"type": "RunCancelled", "code": "cancelled", "message": "cancelled through the API"},
    )
    # a run under a concurrency key frees its place (or leaves its queue): the next starts
    await admission.release(services.runs, run_id, services.dispatch)
    links = child_links(services)
    if links is not None:  # its child runs end with it; a child's end resumes its parent
        await links.after_finish(run_id)
    record = await services.runs.get_run(run_id)
    return {"run_id": run_id, "cancelled": done, "status": record.status}


def ancestors(plan: Any, node_id: str) -> list[str]:
    """Every flow ancestor of ``node_id`` in the plan, in plan order."""
    parents: dict[str, set[str]] = {n: set() for n in plan.order}
    for source, node in plan.nodes.items():
        for edge in node.out:
            parents.setdefault(edge.target, set()).add(source)
    seen: set[str] = set()
    stack = list(parents.get(node_id, ()))
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(parents.get(current, ()))
    return [n for n in plan.order if n in seen]


@router.post("/runs/{run_id}/rerun", status_code=202)
async def rerun(run_id: str, body: Rerun, services: Services = SERVICES, who: Principal = RUNNER) -> JSONResponse:
    """Run the old run's graph snapshot again from ``from_node``, reusing the stored
    outputs of the nodes before it. 202 ``{run_id, rerun_of}``; the old run must be over.
    Admitted like a new run: 429 with ``Retry-After`` while the queue is over its bound."""
    old = await owned_run(services, run_id, who.workspace)
    if old.status not in RunStatus.TERMINAL:
        raise RunStateError(f"run {run_id} is still {old.status}; cancel it or wait for it to end", run_id=run_id)
    plan = await services.runs.load_plan(run_id)
    node = find_node(plan.graph, body.from_node)
    if node is None or node["id"] not in plan.nodes:
        raise ParameterError(
            f"node {body.from_node!r} is not part of run {run_id}",
            run_id=run_id,
            node_id=body.from_node,
            parameter="from_node",
        )
    from_id = str(node["id"])
    seed = await services.runs.read_outputs(run_id, ancestors(plan, from_id))
    new_id = await relaunch(services, old, plan.graph, from_id, seed)
    return accepted(new_id, rerun_of=run_id)


@router.post("/runs/{run_id}/approvals")
async def approve(run_id: str, body: Approval, services: Services = SERVICES,
                  who: Principal = RUNNER) -> dict[str, Any]:
    """Answer a node waiting for approval (the only waiting node when ``node_id`` is omitted).

    A node of the run that waits for a child run passes the approval on to the child (and
    its children): ``run_id`` in the answer is the run whose node was resumed."""
    from orchestrator.service import approvals
    from orchestrator.service.child_links import submit_approval_through

    await owned_run(services, run_id, who.workspace)
    links = child_links(services)
    approval = approvals.Approval(body.decision, body.arguments, body.note)
    if links is not None:
        target_run, resumed = await submit_approval_through(links, run_id, body.node_id, approval)
        return {"run_id": target_run, "node_id": resumed, "decision": body.decision}
    dispatch = services.dispatch
    node_id = await approvals.submit_approval(services.run_store, run_id, body.node_id, approval,
                                              dispatch=lambda rid, nid: dispatch(rid, [nid]))
    return {"run_id": run_id, "node_id": node_id, "decision": body.decision}
