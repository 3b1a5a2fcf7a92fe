"""Child runs as a node sees them: what it asks for and what it gets back.

A node that runs a stored graph as a child run (``nodes/flow/execute_workflow``) asks its
host (:meth:`orchestrator.host.node_host.NodeHost.start_child`) with a :class:`ChildSpec`
and then suspends (``SuspendRequested`` with :func:`waiting_payload`): it holds no slot
and no worker while the child runs. When the child ends, the run service resumes the
node with :class:`ChildResult`'s JSON as the resume input.

The starting itself is the run service's (``orchestrator/service/children.py``): this
module only declares the door (:class:`ChildRuns`) so that the host layer, which sits
below the service, can hold one the worker hands it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.kernel.errors import UsageBudgetError
from orchestrator.kernel.protocol import FlowContext, NodeEvent

CHILD_RUN = "child_run"  # the suspend payload's key naming the child run a node waits for
CHILD_RUNS = "child_runs"  # ... or the child runs (a list), any of which ending resumes it


@dataclass(frozen=True, kw_only=True)
class ChildSpec:
    """One child run to start: stored graph ``graph_id`` at ``version`` (None: latest) of
    the parent's workspace, or the inline ``graph`` (a loop's body: not stored, not checked
    for recursion), with ``run_input``; ``key`` tells apart several children of one node
    execution (a loop's iterations, a tool called twice); ``label`` names it in events and
    the run view (``For each[3]``). The same spec twice starts one run."""

    parent_run: str
    parent_node: str
    graph_id: str
    run_input: Any
    version: int | None = None
    graph: dict[str, Any] | None = None
    attempt: int = 1
    key: str = ""
    label: str = ""


@dataclass(frozen=True)
class ChildResult:
    """How a child run ended: ``status`` (a terminal run status), its ``output`` (the run's
    result, as ``GET /runs/{id}`` gives it) and its ``error`` when it did not succeed."""

    run_id: str
    status: str
    output: Any = None
    error: dict[str, Any] | None = None
    # The main output of each node that ran with no successor that ran (in graph order),
    # as a nested graph's ``SubgraphResult.sink_outputs``: what a loop iteration yields.
    sinks: list[Any] = field(default_factory=list)
    # The model usage the child's events carry, by "provider:model" (as a node's ``data.usage``):
    # the waiting node reports it as its own, so the parent's budget and usage count it.
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status, "output": self.output, "error": self.error,
                "sinks": self.sinks, "usage": self.usage}

    @classmethod
    def from_json(cls, raw: Any) -> ChildResult | None:
        if not isinstance(raw, dict) or not raw.get("run_id") or not raw.get("status"):
            return None
        error, sinks, usage = raw.get("error"), raw.get("sinks"), raw.get("usage")
        return cls(str(raw["run_id"]), str(raw["status"]), raw.get("output"),
                   error if isinstance(error, dict) else None, sinks if isinstance(sinks, list) else [],
                   usage if isinstance(usage, dict) else {})


async def report_child_usage(ctx: FlowContext, result: ChildResult) -> None:
    """Report what the child's models used as the waiting node's own usage (its budget is
    checked then: ``UsageBudgetError`` when the parent is over it)."""
    for key, numbers in result.usage.items():
        if isinstance(numbers, dict):
            await ctx.report_usage(str(key), numbers)


def budget_error(result: ChildResult) -> UsageBudgetError | None:
    """A child that failed on the budget it spends from (its parent's): the same error for
    the parent node, which fails the parent run too (``UsageBudgetError.stops_run``)."""
    error = result.error or {}
    if error.get("code") != UsageBudgetError.code:
        return None
    return UsageBudgetError(str(error.get("message") or "run budget exceeded"), budget=str(error.get("budget")),
                            run_id=error.get("run_id"))


def waited_children(payload: dict[str, Any] | None) -> list[str]:
    """The child runs a suspend payload waits for (:data:`CHILD_RUN` or :data:`CHILD_RUNS`)."""
    payload = payload or {}
    many = payload.get(CHILD_RUNS)
    found = [str(c) for c in many] if isinstance(many, list) else []
    return [str(payload[CHILD_RUN]), *found] if payload.get(CHILD_RUN) else found


def waiting_payload(child_run: str, graph_id: str, attempt: int) -> dict[str, Any]:
    """The suspend payload of a node's ``attempt`` waiting for ``child_run`` (the run view links it)."""
    return {CHILD_RUN: child_run, "graph_id": graph_id, "attempt": attempt}


def resumed_result(resume: dict[str, Any] | None, attempt: int) -> ChildResult | None:
    """The child's result a node's ``attempt`` was resumed with; None for a first execution
    (a retry's too: the previous attempt's resume stays stored)."""
    if not resume or (resume.get("payload") or {}).get("attempt") != attempt:
        return None
    return ChildResult.from_json(resume.get("input"))


class ChildRuns(Protocol):
    """Starts child runs for the nodes of a host (the worker's: the run service's children)."""

    async def start(self, spec: ChildSpec) -> str:
        """Start (or find, for the same spec) the child run; its id. Refusals (depth,
        fan-out, recursion, an unknown graph) raise errors naming the parameter."""
        ...

    async def collect(self, run_ids: list[str]) -> dict[str, ChildResult]:
        """How each of ``run_ids`` that has ended ended (the active ones are left out); an
        ended child is settled: its end no longer resumes the node."""
        ...

    async def node_events(self, run_id: str) -> list[NodeEvent]:
        """The node events of child run ``run_id`` (bounded by the run's event log cap)."""
        ...

    async def cancel(self, run_ids: list[str], reason: str) -> None:
        """Cancel the children still active (and their own children)."""
        ...
