"""One error tree for the whole product.

::

    OrchestratorError                  root: every error we raise on purpose
    ├── GraphError                     found before a run: the graph is wrong
    │   ├── GraphSchemaError           malformed JSON / missing or wrong-typed field
    │   ├── UnknownNodeTypeError       node.type not in the registry
    │   ├── DuplicateError             duplicate node id, node name or edge id
    │   ├── ChannelError               edge.data.channel missing or not flow/link
    │   ├── HandleError                edge names a node or handle that does not exist
    │   ├── SocketTypeError            wire between incompatible socket types
    │   ├── CycleError                 cycle over flow edges (path named)
    │   ├── LinkCycleError             cycle over link edges (path named)
    │   ├── ParameterError             unknown parameter ("did you mean") or bad value
    │   └── ExpressionError            expression syntax error, or reference to a node
    │       └── UpstreamReferenceError   that is not upstream / does not exist
    ├── RunError                       found during a run
    │   ├── NodeExecutionError         an executor raised (after retries)
    │   ├── NodeTimeoutError           an executor ran past its timeout
    │   ├── EvaluationError            an expression failed at run time
    │   │   └── ExpressionLimitError     an expression went over a size or step budget
    │   ├── CoercionError              a wired value could not be coerced
    │   │   └── ParameterValueError        a resolved value breaks its definition (type, min/max, values)
    │   ├── LinkResolutionError        materialize failed or a source cannot materialize
    │   ├── EgressDeniedError          an outbound connection refused by the egress policy
    │   ├── UsageBudgetError           a run's reported usage passed its budget (the run fails)
    │   ├── RunNotFoundError           unknown run id
    │   └── RunStateError              the run's state does not allow the request (e.g. resume a running run)
    ├── (RequestError and its subtree: the service layer's, in orchestrator/errors.py)
    ├── ConfigurationError             a setting is unusable (e.g. a placeholder API key)
    └── ControlSignal                  not failures: they steer a run
        ├── RetryRequested             an executor asks to be retried (optionally after a delay)
        ├── WaitRequested              a node must wait for a limit: rescheduled after a delay,
                                       its slot freed, the attempt not counted
        ├── SuspendRequested           an executor pauses its node until the run is resumed
        ├── RunCancelled               the run was cancelled while the node ran
        └── NodeSuperseded             a later claim of the node took over (its lease had
                                       lapsed): this execution stops, its completion is refused

Each error carries its context as fields (``graph_id``, ``node_id``, ``node_name``,
``edge_id``, ``handle``, ``run_id``) so callers (the API, the CLI, logs) can render it
without parsing the message. ``to_dict`` gives the JSON form used by the API and events.
"""

from __future__ import annotations

import time
from typing import Any


class OrchestratorError(Exception):
    """Root of every error raised on purpose by this product."""

    code = "error"

    def __init__(
        self,
        message: str,
        *,
        graph_id: str | None = None,
        node_id: str | None = None,
        node_name: str | None = None,
        edge_id: str | None = None,
        handle: str | None = None,
        run_id: str | None = None,
        parameter: str | None = None,
        path: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.graph_id = graph_id
        self.node_id = node_id
        self.node_name = node_name
        self.edge_id = edge_id
        self.handle = handle
        self.run_id = run_id
        self.parameter = parameter
        self.path = path

    def where(self) -> str:
        """A short 'graph g1, node n2 ("Name"), edge e3, handle h' locator."""
        parts: list[str] = []
        if self.run_id:
            parts.append(f"run {self.run_id}")
        if self.graph_id:
            parts.append(f"graph {self.graph_id}")
        if self.node_id:
            parts.append(
                f'node {self.node_id} ("{self.node_name}")' if self.node_name else f"node {self.node_id}"
            )
        if self.edge_id:
            parts.append(f"edge {self.edge_id}")
        if self.handle:
            parts.append(f"handle {self.handle}")
        if self.parameter:
            parts.append(f"parameter {self.parameter}")
        return ", ".join(parts)

    def __str__(self) -> str:
        where = self.where()
        return f"{self.message} [{where}]" if where else self.message

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": type(self).__name__, "code": self.code, "message": self.message}
        for key in ("graph_id", "node_id", "node_name", "edge_id", "handle", "run_id", "parameter", "path"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


# --- graph errors: found before a run ------------------------------------------------


class GraphError(OrchestratorError):
    code = "graph_invalid"


class GraphSchemaError(GraphError):
    code = "graph_schema"


class UnknownNodeTypeError(GraphError):
    code = "unknown_node_type"


class DuplicateError(GraphError):
    code = "duplicate"


class ChannelError(GraphError):
    code = "edge_channel"


class HandleError(GraphError):
    code = "dangling_handle"


class SocketTypeError(GraphError):
    code = "socket_type"


class CycleError(GraphError):
    code = "flow_cycle"


class LinkCycleError(GraphError):
    code = "link_cycle"


class ParameterError(GraphError):
    code = "parameter"


class ExpressionError(GraphError):
    code = "expression"


class UpstreamReferenceError(ExpressionError):
    code = "not_upstream"


# --- run errors: found during a run --------------------------------------------------


class RunError(OrchestratorError):
    code = "run_error"


class NodeExecutionError(RunError):
    code = "node_failed"


class NodeTimeoutError(RunError):
    code = "node_timeout"


class EvaluationError(RunError):
    code = "evaluation"


class ExpressionLimitError(EvaluationError):
    """An expression went over one of its evaluation budgets (the message names it)."""

    code = "expression_limit"


class CoercionError(RunError):
    code = "coercion"


class ParameterValueError(CoercionError):
    """A parameter's value, once its expression, wire or default resolved, breaks what its
    definition declares (type, minimum, maximum, allowed values); the message names both."""

    code = "parameter_value"


class LinkResolutionError(RunError):
    code = "link_resolution"


class EgressDeniedError(RunError):
    """A node's outbound connection was refused by the operator's egress policy."""

    code = "egress_denied"


class UsageBudgetError(RunError):
    """The usage a run reported passed one of its budgets; ``budget`` names it. Never
    retried, and it fails the run whatever the node's error mode."""

    code = "usage_budget_exceeded"
    stops_run = True  # the step's error mode is "stop" for it, whatever the node's setting

    def __init__(self, message: str, *, budget: str, **context: Any) -> None:
        super().__init__(message, **context)
        self.budget = budget

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["budget"] = self.budget
        return out


class RunNotFoundError(RunError):
    code = "run_not_found"


class RunStateError(RunError):
    """The run is in a state that does not allow the request."""

    code = "run_state"


# --- control signals: not failures ---------------------------------------------------


class ConfigurationError(OrchestratorError):
    """A setting cannot be used as given (raised at start, naming the setting)."""

    code = "configuration"


class ControlSignal(OrchestratorError):
    code = "signal"


class RetryRequested(ControlSignal):
    """Raised by an executor to ask for another attempt (counts against the retry policy)."""

    code = "retry"

    def __init__(self, message: str = "retry requested", *, delay_s: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.delay_s = delay_s


class WaitRequested(ControlSignal):
    """A node must wait (a rate limit, a provider's 429) before it can run: the step frees
    its slot and schedules the same attempt again after ``delay_s`` (the retry schedule,
    counting no attempt). ``reason`` (JSON) says for what, e.g. ``{"limit": key}``; it rides
    on the node's ``throttled`` event."""

    code = "throttled"

    def __init__(self, message: str = "waiting for a limit", *, delay_s: float,
                 reason: dict[str, Any] | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.delay_s = max(0.0, delay_s)
        self.reason = reason or {}
        self.raised_at = time.monotonic()  # the wait counts from here, not from when the step stores it

    def remaining_s(self) -> float:
        """What is left of the wait now (the node comes back at the granted time, however
        long the step took to wind down after the refusal)."""
        return max(0.0, self.delay_s - (time.monotonic() - self.raised_at))


class SuspendRequested(ControlSignal):
    """Raised by an executor to pause its node (run status ``waiting``; no worker held).

    ``payload`` (JSON) is stored and appended as the data of a ``run_waiting`` event.
    When a host resumes the node (``RunStore.resume_node``) the executor runs again with
    ``ctx.resume`` set to ``{"payload": <this payload>, "input": <the resume input>}``.
    """

    code = "suspended"

    def __init__(self, message: str = "waiting", *, payload: dict[str, Any] | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.payload = payload or {}


class RunCancelled(ControlSignal):
    code = "cancelled"


class NodeSuperseded(ControlSignal):
    """This execution of a node lost it: its lease lapsed (the worker was cut off or stalled)
    and a later claim runs the node now. Whatever it would complete is refused (fenced)."""

    code = "superseded"
