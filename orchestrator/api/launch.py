"""Starting runs of stored graphs, and summarizing a run for responses.

A manual start, a webhook and a chat message go through :func:`launch`
(``orchestrator/service/runs.py:start_stored``: the stored version's cached, compiled
plan; the run records the version it ran, ``meta.graph_version``); a rerun through
:func:`relaunch` (the old run's graph snapshot, ``admit_and_start``).
It checks back-pressure first (``orchestrator/service/admission.py``: 429 with ``Retry-After``,
nothing stored), then starts the run, which belongs to its graph's workspace
(``meta.workspace``) and is listed under the graph. Scheduled runs start in the workers
(``workers/beat.py``) through the same function.
"""

from __future__ import annotations

from typing import Any

from orchestrator.kernel.errors import ParameterError, RunNotFoundError
from orchestrator.kernel.protocol import DataValue
from orchestrator.kernel.store import RunRecord, RunStatus
from orchestrator.service import admission
from orchestrator.service.child_links import ChildLinks, final_output
from orchestrator.service.graph_store import DEFAULT_WORKSPACE
from orchestrator.service.runs import RunRequest, StoredGraph, admit_and_start, start_stored
from orchestrator.store.redis_store import RedisRunStore
from orchestrator.telemetry import usage
from orchestrator.telemetry.pricing import load_table
from orchestrator.telemetry.tracing import trace_of

from .services import Services


def find_node(graph: dict[str, Any], ref: str) -> dict[str, Any] | None:
    """A node of ``graph`` by id, else by name."""
    nodes: list[dict[str, Any]] = graph.get("nodes") or []
    return next((n for n in nodes if n.get("id") == ref), None) or next(
        (n for n in nodes if n.get("name") == ref), None
    )


def nodes_of_type(graph: dict[str, Any], node_type: str) -> list[dict[str, Any]]:
    return [n for n in graph.get("nodes") or [] if n.get("type") == node_type]


def start_node(graph: dict[str, Any], ref: str, services: Services) -> str:
    """The id of trigger node ``ref``; a ``ParameterError`` naming it when it is not one."""
    node = find_node(graph, ref)
    if node is None:
        raise ParameterError(f"graph has no node {ref!r} to start at", graph_id=graph.get("id"), parameter="trigger")
    node_type = services.registry.get(node["type"], graph_id=graph.get("id"), node_id=node["id"])
    if not node_type.definition.trigger:
        raise ParameterError(
            f"node {node['id']!r} ({node['type']}) is not a trigger node and cannot start a run",
            graph_id=graph.get("id"),
            node_id=node["id"],
            node_name=node.get("name"),
            parameter="trigger",
        )
    return str(node["id"])


async def launch(services: Services, source: StoredGraph, request: RunRequest, *, trigger: str) -> str:
    """Start a run of a stored graph; returns the run id (the run is queued, not finished).
    See ``orchestrator/service/runs.py:start_stored``: the version's cached plan, the
    graph's workspace, the version it ran in ``meta.graph_version``, 404 for a graph of
    another ``source.workspace``, 429 (nothing stored) while the queue is over its bound."""
    return await start_stored(services, source, request, trigger=trigger)


async def relaunch(services: Services, old: RunRecord, graph: dict[str, Any], from_node: str,
                   seed_outputs: dict[str, dict[str, DataValue]]) -> str:
    """Start ``old``'s graph snapshot again from ``from_node`` with ``seed_outputs`` (a
    rerun); admitted like any other start. The new run is of ``old``'s workspace."""
    meta = {"rerun_of": old.run_id, "graph_version": old.graph_version, "workspace": workspace_of_run(old)}
    request = RunRequest(old.run_input, start=[from_node], session_id=old.session_id, meta=meta,
                         seed_outputs=seed_outputs)
    return await admit_and_start(services, graph, request, trigger="rerun")


def child_links(services: Services) -> ChildLinks | None:
    """The parent/child links of the API's run store (a Redis one; None for another)."""
    store = services.runs
    return ChildLinks(store, services.dispatch, services.settings) if isinstance(store, RedisRunStore) else None


def workspace_of_run(record: RunRecord) -> str:
    return str((record.meta or {}).get("workspace") or DEFAULT_WORKSPACE)


async def owned_run(services: Services, run_id: str, workspace: str) -> RunRecord:
    """The run record, or RunNotFoundError (404) when it belongs to another workspace."""
    record = await services.runs.get_run(run_id)
    if workspace_of_run(record) != workspace:
        raise RunNotFoundError(f"unknown run {run_id!r}", run_id=run_id)
    return record


def record_json(record: RunRecord) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "status": record.status,
        "graph_id": record.graph_id,
        "graph_version": record.graph_version,
        "created_at": record.created_at,
        "finished_at": record.finished_at,
        "error": record.error,
        "session_id": record.session_id,
        "meta": record.meta,
    }


async def run_detail(services: Services, run_id: str, *, usage_too: bool = True) -> dict[str, Any]:
    """The run record plus every planned node's status and stored outputs, the model usage
    and cost per node and in all (``usage``), and the run's ``trace_id`` / ``trace_url``."""
    record = await services.runs.get_run(run_id)
    plan = await services.runs.load_plan(run_id)
    states = await services.runs.node_states(run_id)
    outputs = await services.runs.read_outputs(run_id, list(plan.order))
    nodes: dict[str, Any] = {}
    for node_id in plan.order:
        state = states.get(node_id) if isinstance(states, dict) else None
        status = state.get("status") if isinstance(state, dict) else state
        nodes[node_id] = {
            "name": plan.nodes[node_id].name,
            "type": plan.nodes[node_id].node_type,
            "status": status or "pending",
            "outputs": {port: dv.to_json() for port, dv in outputs.get(node_id, {}).items()},
        }
    links = child_links(services)
    detail = {
        **record_json(record),
        # parent and child runs (service/children.py): meta.parent_run / parent_node name the parent
        "parent_run": (record.meta or {}).get("parent_run"),
        "children": await links.viewable_children(run_id) if links is not None else [],
        "nodes": nodes,
        "output": final_output(plan, outputs),
        **trace_of(plan.labels, services.settings.trace_link_template),
    }
    if record.status == RunStatus.QUEUED and (plan.graph.get("settings") or {}).get("concurrency"):
        # waiting for a place under its graph's concurrency key (service/admission.py)
        detail["queue_position"] = await admission.queue_position(services.runs, run_id)
    if not usage_too:  # the usage is summed from the whole event stream: skipped when not wanted
        return detail
    prices = load_table(services.settings.price_table_path)
    return usage.attach(detail, usage.summarize(await usage.usage_events(services.runs, run_id), prices))
