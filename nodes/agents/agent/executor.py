"""Agent: builds an Agno Agent (or Team when sub-agents are linked) and runs it streaming.

``execute``: the user message (``prompt``, default the input's ``message``) goes to the
agent with ``session_id`` = the run's session (history lives in Agno's session storage in
the run's Redis), ``run_id`` = ``<run>:<node>``. Every Agno event is forwarded as an
``agent_event``. Output ``output``: ``{response, model, tokens_used, usage}`` (``usage``: token counts by
``provider:model``, as the ``completed`` event's ``data.usage``).

A stored graph offered as a tool (``nodes/tools/workflow_tool``) runs as a child run per
call while the node waits, holding no worker (``nodes/_ai/workflow_tools.py``).

A tool that needs approval pauses the node: an ``approval_requested`` agent_event, then
``SuspendRequested`` with the pending requirements. When resumed with ``{"decision":
"approve"|"reject", "arguments": {...}, "note": ...}`` a new Agent built the same way
continues the stored Agno run.

When the kernel cancels the node (the run ended, or the node timed out) the Agno run is
cancelled with it and its MCP connections close (see :class:`~nodes._ai.runner.AgnoStream`).

``materialize("agent")``: a :class:`~nodes._ai.builder.SubAgent` (a Team member).

Agno and ``nodes._ai`` are imported when the node first runs, not at node discovery: they
cost every worker and CLI process about a second otherwise.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from orchestrator.kernel.errors import ParameterError, SuspendRequested
from orchestrator.kernel.protocol import (
    DataValue,
    EventType,
    ExecutionResult,
    FlowContext,
    NodeEvent,
)

if TYPE_CHECKING:
    from agno.run.requirement import RunRequirement


def _session(ctx: FlowContext) -> str:
    return ctx.session_id or ctx.run_id


def _resolve_requirements(payload: dict[str, Any], decision_input: Any) -> list[RunRequirement]:
    from agno.run.requirement import RunRequirement

    decision_input = decision_input or {}
    decision = decision_input.get("decision")
    if decision not in ("approve", "reject"):
        raise ParameterError(f"approval decision must be 'approve' or 'reject', got {decision!r}",
                             parameter="decision")
    edited = decision_input.get("arguments") or {}
    note = decision_input.get("note")
    requirements = [RunRequirement.from_dict(d) for d in payload.get("requirements", [])]
    for req in requirements:
        if decision == "approve":
            if edited and req.tool_execution is not None:
                req.tool_execution.tool_args = {**(req.tool_execution.tool_args or {}), **edited}
            req.confirm()  # type: ignore[no-untyped-call]
        else:
            req.reject(note=note)
    return requirements


class AgentExecutor:
    node_type = "agent"

    async def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> AsyncIterator[NodeEvent | ExecutionResult]:
        from nodes._ai import workflow_tools
        from nodes._ai.builder import build_runner, model_label, user_message
        from nodes._ai.runner import AgnoStream, agno_run_id

        runner = await build_runner(data, ctx)
        name = str(runner.name)
        session_id = _session(ctx)
        if ctx.resume is not None and not workflow_tools.is_stale_pause(ctx):
            payload = ctx.resume.get("payload") or {}
            run_id = str(payload.get("agno_run_id") or agno_run_id(ctx))
            if workflow_tools.is_workflow_pause(ctx):  # workflow tools' child runs ended
                decided = await workflow_tools.resolved(ctx)
            else:
                decided = _resolve_requirements(payload, ctx.resume.get("input"))
            stream = runner.acontinue_run(
                run_id=run_id, session_id=str(payload.get("session_id") or session_id),
                requirements=decided, stream=True, stream_events=True)
        else:
            run_id = agno_run_id(ctx)
            stream = runner.arun(user_message(data, inputs), stream=True, stream_events=True,
                                 session_id=session_id, run_id=run_id)
        tracker = AgnoStream(ctx, name, run_id, runner=runner)
        async for event in tracker.events(stream):
            yield event
        if tracker.paused:
            requirements, tool_calls = tracker.requirements, tracker.tool_calls
            calls = workflow_tools.workflow_calls(runner, requirements)
            if calls is not None:  # stored graphs as tools: child runs, no approval
                raise await workflow_tools.start_calls(ctx, calls, {
                    "requirements": requirements, "agno_run_id": run_id, "session_id": session_id,
                    "tool_calls": tool_calls})
            yield ctx.event(EventType.AGENT_EVENT, {
                "event": "approval_requested", "agent": name,
                "requirements": requirements, "tool_calls": tool_calls})
            raise SuspendRequested(
                f"agent {name!r} waits for approval of "
                + ", ".join(str(t.get("tool_name")) for t in tool_calls),
                node_id=ctx.node_id, node_name=ctx.node_name, run_id=ctx.run_id,
                payload={"requirements": requirements, "agno_run_id": run_id,
                         "session_id": session_id, "tool_calls": tool_calls})
        if not tracker.completed:
            raise RuntimeError(f"agent {name!r} stream ended without completing")
        yield ExecutionResult(outputs={"output": DataValue("data", {
            "response": tracker.content,
            "model": model_label(data, runner),
            "tokens_used": tracker.tokens_used,
            "usage": ctx.usage.to_json(),  # by "provider:model" (also on the completed event)
        })})

    async def materialize(self, data: dict[str, Any], output_handle: str, ctx: FlowContext) -> Any:
        if output_handle != "agent":
            raise ParameterError(f"agent offers only the 'agent' link, not {output_handle!r}",
                                 node_id=ctx.node_id, node_name=ctx.node_name,
                                 handle=output_handle)
        from nodes._ai.builder import SubAgent, build_runner

        member = await build_runner(data, ctx, member=True)
        return SubAgent(node_id=ctx.node_id, name=str(member.name), member=member)


executor = AgentExecutor()
