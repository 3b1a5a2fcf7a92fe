"""Human approvals: resume a node that paused for a decision.

A node that needs a person's decision (an agent tool marked ``requires_approval``) raises
``SuspendRequested``: the node and the run become ``waiting`` and no worker is held.
:func:`submit_approval` validates a decision, stores it as the node's resume input
(``{"decision", "arguments", "note"}``) and dispatches the node again; its executor then
continues where it paused (see ``nodes/agents/agent``).

Errors (all ``RunError`` s, so the API maps them like other run errors):

``ApprovalError``       the run or node is not waiting, or the decision is malformed.
``RunNotFoundError``    unknown run id (from the store).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.kernel.errors import RunError
from orchestrator.kernel.store import NodeStatus, RunStatus, RunStore

Decision = Literal["approve", "reject"]
DispatchFn = Callable[[str, str], Awaitable[Any] | Any]


@dataclass(frozen=True)
class Approval:
    """A person's answer to a node waiting for a decision. ``arguments`` (only with
    ``approve``) replace the paused tool call's arguments key by key; ``note`` is passed
    on to the node."""

    decision: Decision
    arguments: dict[str, Any] | None = None
    note: str | None = None


class ApprovalError(RunError):
    """An approval that cannot apply: nothing waits, or the decision is malformed."""

    code = "approval"


async def waiting_nodes(store: RunStore, run_id: str) -> list[str]:
    """Ids of the run's waiting nodes (needs a store that can list node states)."""
    states_fn = getattr(store, "node_states", None)
    if states_fn is None:
        return []
    states = states_fn(run_id)
    if inspect.isawaitable(states):
        states = await states
    return sorted(n for n, s in dict(states).items() if s == NodeStatus.WAITING)


async def submit_approval(store: RunStore, run_id: str, node_id: str | None, approval: Approval, *,
                          dispatch: DispatchFn) -> str:
    """Resume the waiting node with ``approval``; returns the node id that was resumed.

    ``node_id`` may be None when exactly one node of the run waits. ``dispatch(run_id,
    node_id)`` sends the node to a worker (sync or async).
    """
    decision, arguments, note = approval.decision, approval.arguments, approval.note
    if decision not in ("approve", "reject"):
        raise ApprovalError(f"decision must be 'approve' or 'reject', got {decision!r}",
                            run_id=run_id, node_id=node_id, parameter="decision")
    if arguments is not None and not isinstance(arguments, dict):
        raise ApprovalError("arguments must be an object of tool argument names to values",
                            run_id=run_id, node_id=node_id, parameter="arguments")
    if arguments and decision == "reject":
        raise ApprovalError("arguments only apply to an approval, not a rejection",
                            run_id=run_id, node_id=node_id, parameter="arguments")
    record = await store.get_run(run_id)
    if record.status != RunStatus.WAITING:
        raise ApprovalError(f"run is {record.status}, not waiting for an approval",
                            run_id=run_id, node_id=node_id)
    if node_id is None:
        waiting = await waiting_nodes(store, run_id)
        if len(waiting) != 1:
            detail = f"nodes {waiting} wait" if waiting else "no waiting node was found"
            raise ApprovalError(f"name the node to approve: {detail}", run_id=run_id)
        node_id = waiting[0]
    resume_input = {"decision": decision, "arguments": arguments or {}, "note": note}
    if not await store.resume_node(run_id, node_id, resume_input):
        raise ApprovalError("node is not waiting for an approval", run_id=run_id,
                            node_id=node_id)
    result = dispatch(run_id, node_id)
    if inspect.isawaitable(result):
        await result
    return node_id
