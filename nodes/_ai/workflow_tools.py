"""Stored graphs offered to an agent as tools (Dify's workflow-as-tool).

A Workflow Tool node (``nodes/tools/workflow_tool``) materializes a :class:`WorkflowTool`:
an Agno toolkit with one function marked ``external_execution``. When the model calls it,
Agno pauses the run with the call; the Agent node then starts the stored graph as a child
run per call (``NodeHost.start_child``; the call's ``input`` argument is the run input)
and suspends, holding no slot and no worker (:func:`start_calls`). When the children have
ended, the node is resumed: each call gets its child's output as the tool result (JSON),
or ``error (<status>): <message>`` for a child that did not succeed, so the model can
answer otherwise (:func:`resolved`); then the Agno run continues.

The suspend payload keeps what the approvals' payload keeps (``requirements``,
``agno_run_id``, ``session_id``, ``tool_calls``) plus ``workflow_calls`` (tool call id ->
child run), the results collected so far, ``child_runs`` and the ``attempt`` (a retry of
the node starts over: the previous attempt's resume stays stored).
"""

from __future__ import annotations

import json
from typing import Any

from agno.run.requirement import RunRequirement
from agno.tools import Toolkit, tool

from orchestrator.host.children import CHILD_RUNS, ChildResult, ChildSpec, report_child_usage
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import SuspendRequested
from orchestrator.kernel.protocol import EventType, FlowContext

CALLS = "workflow_calls"  # the suspend payload's key: tool call id -> child run
RESULTS = "workflow_results"  # tool call id -> the tool result collected so far
SUCCEEDED = "succeeded"


class WorkflowTool(Toolkit):
    """One stored graph as one tool the model may call with ``input`` (an object)."""

    def __init__(self, *, tool_name: str, description: str, graph_id: str, version: int | None) -> None:
        self.graph_id = graph_id
        self.version = version
        self.tool_name = tool_name

        def run_workflow(input: dict[str, Any]) -> str:
            """Never called here: the Agent node runs the graph as a child run (external execution)."""
            raise RuntimeError("a workflow tool runs as a child run, not in process")

        function = tool(name=tool_name, description=description, external_execution=True)(run_workflow)
        super().__init__(name=f"workflow_{tool_name}", tools=[function])


def _tool_of(requirement: dict[str, Any]) -> dict[str, Any]:
    execution = requirement.get("tool_execution")
    return execution if isinstance(execution, dict) else {}


def _call_id(requirement: dict[str, Any], index: int) -> str:
    return str(_tool_of(requirement).get("tool_call_id") or f"call{index}")


def workflow_calls(runner: Any, requirements: list[dict[str, Any]]) -> list[tuple[str, WorkflowTool, Any]] | None:
    """(tool call id, its tool, its input) of each paused call when every one is a workflow
    tool's; None when the pause is something else (an approval)."""
    tools = {t.tool_name: t for t in getattr(runner, "tools", None) or [] if isinstance(t, WorkflowTool)}
    calls: list[tuple[str, WorkflowTool, Any]] = []
    for index, requirement in enumerate(requirements):
        execution = _tool_of(requirement)
        found = tools.get(str(execution.get("tool_name")))
        if found is None or not execution.get("external_execution_required"):
            return None
        args = execution.get("tool_args") or {}
        calls.append((_call_id(requirement, index), found, args.get("input", args) if isinstance(args, dict) else args))
    return calls or None


def is_workflow_pause(ctx: FlowContext) -> bool:
    """Was this execution resumed from a workflow-tool pause of the same attempt?"""
    payload = (ctx.resume or {}).get("payload") or {}
    return CALLS in payload and payload.get("attempt") == ctx.attempt


def is_stale_pause(ctx: FlowContext) -> bool:
    """Is the resume a workflow-tool pause of an earlier attempt (this execution is a
    retry, which starts over)?"""
    payload = (ctx.resume or {}).get("payload") or {}
    return CALLS in payload and payload.get("attempt") != ctx.attempt


async def start_calls(ctx: FlowContext, calls: list[tuple[str, WorkflowTool, Any]],
                      paused: dict[str, Any]) -> SuspendRequested:
    """Start each call's child run; the suspension that waits for them (``paused``: the
    approval-shaped payload of the pause)."""
    host = node_host(ctx)
    started: dict[str, str] = {}
    for call_id, found, run_input in calls:
        started[call_id] = await host.start_child(ChildSpec(
            parent_run=ctx.run_id, parent_node=ctx.node_id, graph_id=found.graph_id, version=found.version,
            run_input=run_input, attempt=ctx.attempt, key=f"tool:{call_id}",
            label=f"{ctx.node_name} > {found.tool_name}"))
        await ctx.emit(EventType.AGENT_EVENT, {"event": "workflow_tool_started", "tool": found.tool_name,
                                               "graph_id": found.graph_id, "child_run": started[call_id]})
    payload = {**paused, CALLS: started, RESULTS: {}, CHILD_RUNS: list(started.values()), "attempt": ctx.attempt}
    return SuspendRequested(f"waiting for workflow tools {', '.join(sorted(started))}", payload=payload)


def tool_result(result: ChildResult) -> str:
    """What the model reads: the child's output as JSON, or its error."""
    if result.status == SUCCEEDED:
        return json.dumps(result.output, default=str)
    return f"error ({result.status}): {(result.error or {}).get('message') or 'no error was recorded'}"


async def resolved(ctx: FlowContext) -> list[RunRequirement]:
    """The paused requirements with every child's result, once all have ended; until then
    ``SuspendRequested`` again (several calls of one pause run at once)."""
    payload = dict((ctx.resume or {}).get("payload") or {})
    calls: dict[str, str] = dict(payload.get(CALLS) or {})
    results: dict[str, str] = dict(payload.get(RESULTS) or {})
    waiting = {child: call for call, child in calls.items() if call not in results}
    for child, result in (await node_host(ctx).collect_children(list(waiting))).items():
        results[waiting.pop(child)] = tool_result(result)
        await report_child_usage(ctx, result)  # the agent's usage (and its run's budget) counts the graph's
        await ctx.emit(EventType.AGENT_EVENT, {"event": "workflow_tool_completed", "child_run": child,
                                               "status": result.status})
    if waiting:
        raise SuspendRequested("waiting for workflow tools", payload={
            **payload, RESULTS: results, CHILD_RUNS: list(waiting)})
    requirements = [RunRequirement.from_dict(d) for d in payload.get("requirements", [])]
    for index, (requirement, wire) in enumerate(zip(requirements, payload.get("requirements", []), strict=True)):
        call_id = _call_id(wire, index)
        if requirement.needs_external_execution and call_id in results:
            requirement.set_external_execution_result(results[call_id])
    return requirements
