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

from dataclasses import dataclass
from typing import Any, Protocol

CHILD_RUN = "child_run"  # the suspend payload's key naming the child run a node waits for


@dataclass(frozen=True, kw_only=True)
class ChildSpec:
    """One child run to start: stored graph ``graph_id`` at ``version`` (None: latest) of
    the parent's workspace, with ``run_input``; ``key`` tells apart several children of one
    node execution (a tool called twice). The same spec twice starts one run."""

    parent_run: str
    parent_node: str
    graph_id: str
    run_input: Any
    version: int | None = None
    attempt: int = 1
    key: str = ""


@dataclass(frozen=True)
class ChildResult:
    """How a child run ended: ``status`` (a terminal run status), its ``output`` (the run's
    result, as ``GET /runs/{id}`` gives it) and its ``error`` when it did not succeed."""

    run_id: str
    status: str
    output: Any = None
    error: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status, "output": self.output, "error": self.error}

    @classmethod
    def from_json(cls, raw: Any) -> ChildResult | None:
        if not isinstance(raw, dict) or not raw.get("run_id") or not raw.get("status"):
            return None
        error = raw.get("error")
        return cls(str(raw["run_id"]), str(raw["status"]), raw.get("output"),
                   error if isinstance(error, dict) else None)


def waiting_payload(child_run: str, graph_id: str) -> dict[str, Any]:
    """The suspend payload of a node waiting for ``child_run`` (the run view links it)."""
    return {CHILD_RUN: child_run, "graph_id": graph_id}


class ChildRuns(Protocol):
    """Starts child runs for the nodes of a host (the worker's: the run service's children)."""

    async def start(self, spec: ChildSpec) -> str:
        """Start (or find, for the same spec) the child run; its id. Refusals (depth,
        fan-out, recursion, an unknown graph) raise errors naming the parameter."""
        ...
