"""Execute Workflow: a stored graph of the workspace runs as a child run; its result is
this node's output.

First execution: the host starts the child (``NodeHost.start_child``; the run service
checks depth, fan-out and recursion, ``orchestrator/service/children.py``) and the node
suspends, holding no slot and no worker. When the child ends, the node is resumed with the
child's result: a succeeded child's output goes out on ``output``; a child that failed,
was cancelled or timed out fails this node with the child's error (the node's error mode
applies: stop the run, continue with the error as data, or route to the error port).
"""

from __future__ import annotations

from typing import Any

from nodes._shared.values import input_value, result
from orchestrator.host.children import (
    ChildResult,
    ChildSpec,
    budget_error,
    report_child_usage,
    resumed_result,
    waiting_payload,
)
from orchestrator.host.node_host import node_host
from orchestrator.kernel.errors import NodeExecutionError, ParameterError, SuspendRequested
from orchestrator.kernel.protocol import DataValue, ExecutionResult, FlowContext

SUCCEEDED = "succeeded"


async def child_outcome(ctx: FlowContext, child: ChildResult, graph_id: str) -> ExecutionResult:
    """This node's result from the child run's result it was resumed with (what the
    child's models used counts as this node's usage)."""
    await report_child_usage(ctx, child)
    over = budget_error(child)
    if over is not None:
        raise over
    if child.status != SUCCEEDED:
        reason = (child.error or {}).get("message") or "no error was recorded"
        raise NodeExecutionError(f"child run {child.run_id} of graph {graph_id!r} {child.status}: {reason}",
                                 run_id=ctx.run_id, node_id=ctx.node_id, node_name=ctx.node_name)
    return result({"output": child.output})


def version_of(data: dict[str, Any]) -> int | None:
    raw = data.get("version")
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise ParameterError(f"parameter 'version' must be a version number (1, 2, ...), not {raw!r}",
                             parameter="version")
    return raw


class ExecuteWorkflow:
    node_type = "execute_workflow"

    async def execute(self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext) -> ExecutionResult:
        graph_id = str(data.get("graph_id") or "").strip()
        if not graph_id:
            raise ParameterError("parameter 'graph_id': name the stored graph to run", parameter="graph_id")
        ended = resumed_result(ctx.resume, ctx.attempt)
        if ended is not None:
            return await child_outcome(ctx, ended, graph_id)
        given = data.get("input")
        run_input = input_value(inputs) if given is None or given == "" else given
        spec = ChildSpec(parent_run=ctx.run_id, parent_node=ctx.node_id, graph_id=graph_id, run_input=run_input,
                         version=version_of(data), attempt=ctx.attempt)
        child = await node_host(ctx).start_child(spec)
        raise SuspendRequested(f"waiting for child run {child}", payload=waiting_payload(child, graph_id, ctx.attempt))


executor = ExecuteWorkflow()
