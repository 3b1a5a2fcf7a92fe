"""The node protocol: the one contract between the kernel and every node type.

A node type is a definition (see ``definition.py``) plus an ``executor`` object with one
or both capabilities:

``execute(data, inputs, ctx)``
    Flow behaviour. ``data`` holds the node's resolved parameters (wire > expression >
    inline, coerced to the declared types), ``inputs`` the values that arrived on its
    flow input ports. Returns an :class:`ExecutionResult`, or is an async generator that
    yields :class:`NodeEvent` s and ends by yielding one :class:`ExecutionResult`.
    Output ports missing from ``ExecutionResult.outputs`` are dead branches.

``materialize(data, output_handle, ctx)``
    Link behaviour. Returns any artifact (an object, a callable, a config) for a node that
    asked for it with ``ctx.runtime.resolve_links(node_id, handle)``. Artifacts are
    process-local and cached per run; the kernel never looks inside them.

The kernel detects capabilities with ``hasattr``; an executor needs neither a base class
nor registration beyond living in a discovered folder.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .expression_limits import DEFAULT_LIMITS, ExpressionLimits, Spending
from .usage import Usage, UsageCheck

# ---------------------------------------------------------------------------------------
# Values


@dataclass(frozen=True)
class BinaryRef:
    """A pointer to a large payload stored outside the run state (never the bytes)."""

    ref: str
    mime: str = "application/octet-stream"
    size: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"$binary": {"ref": self.ref, "mime": self.mime, "size": self.size}}


@dataclass
class DataValue:
    """A typed value on a port. ``type`` is a socket type id (see ``sockets.py``)."""

    type: str
    value: Any

    def to_json(self) -> dict[str, Any]:
        value = self.value.to_json() if isinstance(self.value, BinaryRef) else self.value
        return {"type": self.type, "value": value}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> DataValue:
        value = raw.get("value")
        # One key, "$binary": checked without building a set of every object's keys.
        if isinstance(value, dict) and len(value) == 1 and "$binary" in value:
            b = value["$binary"]
            value = BinaryRef(ref=b["ref"], mime=b.get("mime", ""), size=int(b.get("size", 0)))
        return cls(type=str(raw["type"]), value=value)


# ---------------------------------------------------------------------------------------
# Events


class EventType:
    """Event type names. Node-level first, then run-level (``node_id`` is empty)."""

    STARTED = "started"
    PROGRESS = "progress"
    COMPLETED = "completed"
    ERROR = "error"
    RETRY = "retry"
    THROTTLED = "throttled"  # the node waits for a limit (data: delay_s and what it waits for)
    SKIPPED = "skipped"
    NOT_RUN = "not_run"  # the run ended before this node ran
    CANCELLED = "cancelled"  # the run ended while this node ran (data.reason: the run's status)
    # Nodes may emit their own domain events under this one generic type; the kernel
    # forwards them untouched. (The name comes from the seeds' event protocol.)
    AGENT_EVENT = "agent_event"
    # run level
    RUN_STARTED = "run_started"
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"
    RUN_TIMED_OUT = "run_timed_out"
    RUN_WAITING = "run_waiting"
    RUN_RESUMED = "run_resumed"

    TERMINAL = frozenset({RUN_COMPLETED, RUN_FAILED, RUN_CANCELLED, RUN_TIMED_OUT})


@dataclass
class NodeEvent:
    """Something that happened in a run. ``node_id`` is "" for run-level events."""

    run_id: str
    node_id: str
    node_type: str
    event_type: str
    data: dict[str, Any] | None = None
    timestamp: float = field(default_factory=time.time)
    node_name: str | None = None
    attempt: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "node_id": self.node_id,
            "node_type": self.node_type,
            "node_name": self.node_name,
            "event_type": self.event_type,
            "data": self.data,
            "timestamp": self.timestamp,
            "attempt": self.attempt,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> NodeEvent:
        return cls(
            run_id=raw["run_id"],
            node_id=raw.get("node_id", ""),
            node_type=raw.get("node_type", ""),
            event_type=raw["event_type"],
            data=raw.get("data"),
            timestamp=float(raw.get("timestamp", 0.0)),
            node_name=raw.get("node_name"),
            attempt=int(raw.get("attempt", 1)),
        )


@dataclass
class ExecutionResult:
    """Values on output ports (a missing port is a dead branch) and extra events."""

    outputs: dict[str, DataValue] = field(default_factory=dict)
    events: list[NodeEvent] = field(default_factory=list)


# ---------------------------------------------------------------------------------------
# The runtime API a node sees (seed 003 §5.1)


@dataclass(frozen=True)
class EdgeView:
    """A read-only edge as executors see it."""

    id: str
    source: str
    source_handle: str
    target: str
    target_handle: str
    channel: str


@dataclass(frozen=True)
class NodeView:
    """A read-only node as executors see it (``data`` is the raw, unresolved parameters)."""

    id: str
    type: str
    name: str
    data: dict[str, Any]


@dataclass
class SubgraphResult:
    """What :meth:`RuntimeApi.run_subgraph` returns: final status and every node's outputs."""

    status: str  # "succeeded" | "failed"
    outputs: dict[str, dict[str, DataValue]]  # node_id -> port -> value
    sink_outputs: list[DataValue]  # main output of each node that ran and has no flow successor
    error: dict[str, Any] | None = None


class RuntimeApi(Protocol):
    """Generic graph navigation for executors. Knows no node type or handle name."""

    def get_node(self, node_id: str) -> NodeView: ...

    def incoming_edges(
        self, node_id: str, *, channel: str | None = None, target_handle: str | None = None
    ) -> list[EdgeView]: ...

    def outgoing_edges(
        self, node_id: str, *, channel: str | None = None, source_handle: str | None = None
    ) -> list[EdgeView]: ...

    async def resolve_links(self, node_id: str, target_handle: str) -> list[Any]:
        """Materialize every link edge into ``node_id``'s ``target_handle``, in edge order.

        Cached per run and process; raises ``LinkCycleError`` with the path on recursion
        and ``LinkResolutionError`` when a source has no ``materialize``.
        """
        ...

    def cache_get(self, namespace: str, key: str) -> Any | None: ...

    def cache_set(self, namespace: str, key: str, value: Any) -> None: ...

    async def run_subgraph(
        self, graph: dict[str, Any], run_input: Any, *, label: str | None = None
    ) -> SubgraphResult:
        """Run a nested graph in this process through the same step function.

        Its events are forwarded into the current run's stream with ``data.subgraph``
        set to ``label``. Used by container nodes (loops).
        """
        ...


EmitFn = Callable[[str, dict[str, Any] | None], Awaitable[None]]


@dataclass
class FlowContext:
    """Everything an executor may use besides its parameters and inputs."""

    run_id: str
    node_id: str
    node_type: str
    node_name: str
    runtime: RuntimeApi
    emit: EmitFn  # await ctx.emit(event_type, data): append an event to the run's stream now
    run_input: Any = None  # the trigger payload of this run
    session_id: str | None = None  # a caller-chosen key grouping runs (e.g. a conversation)
    attempt: int = 1
    # What the host process lends the node (this product: ``orchestrator.host.NodeHost``,
    # read with ``orchestrator.host.node_host(ctx)``); the kernel never looks inside.
    host: object = None
    input_sources: dict[str, list[str]] = field(default_factory=dict)  # port -> source node names
    settings: dict[str, Any] = field(default_factory=dict)  # the node's settings block
    # Set when a suspended node is resumed: {"payload": <what it suspended with>, "input": <resume input>}
    resume: dict[str, Any] | None = None
    # Budgets for expressions the executor evaluates itself (per-item conditions, templates):
    # the host's limits, and the tally shared with every expression of this node execution.
    expression_limits: ExpressionLimits = DEFAULT_LIMITS
    expression_spending: Spending = field(default_factory=Spending)
    # What this execution reported with ``report_usage`` (see ``usage.py``), and the
    # host's check awaited after each report (a budget; None: no check).
    usage: Usage = field(default_factory=Usage)
    usage_check: UsageCheck | None = None

    async def report_usage(self, key: str, numbers: dict[str, Any]) -> None:
        """Add ``numbers`` (by name) under ``key`` to this execution's usage; it rides on
        the node's ``completed`` event as ``data.usage``. Then the host's check runs:
        it raises ``UsageBudgetError`` when the run is over a budget."""
        self.usage.add(key, numbers)
        if self.usage_check is not None:
            await self.usage_check(self)

    @property
    def execution_key(self) -> str:
        """``"{run_id}:{node_id}:{attempt}"``: the same for every execution of this attempt.

        Execution is at least once: a worker that dies (or is cut off) mid-node has the
        node run again elsewhere under the same attempt, so the same key. Send it with an
        external side effect (e.g. an ``Idempotency-Key`` header) so that the receiver can
        apply it once. A scheduled retry is a new attempt and gets a new key."""
        return f"{self.run_id}:{self.node_id}:{self.attempt}"

    def event(self, event_type: str, data: dict[str, Any] | None = None) -> NodeEvent:
        """Build a NodeEvent for this node (to ``yield`` from a streaming execute)."""
        return NodeEvent(
            run_id=self.run_id,
            node_id=self.node_id,
            node_type=self.node_type,
            node_name=self.node_name,
            event_type=event_type,
            data=data,
            attempt=self.attempt,
        )


# ---------------------------------------------------------------------------------------
# Executor capabilities

ExecuteReturn = ExecutionResult | AsyncIterator[NodeEvent | ExecutionResult]


@runtime_checkable
class FlowExecutor(Protocol):
    node_type: str

    def execute(
        self, data: dict[str, Any], inputs: dict[str, DataValue], ctx: FlowContext
    ) -> Awaitable[ExecutionResult] | AsyncIterator[NodeEvent | ExecutionResult]: ...


@runtime_checkable
class LinkMaterializer(Protocol):
    node_type: str

    async def materialize(self, data: dict[str, Any], output_handle: str, ctx: FlowContext) -> Any: ...


@runtime_checkable
class StartResolver(Protocol):
    """A node whose result at a run's start follows from its parameters, the run input and
    the run's session id alone (a trigger's output is the run input): the run's start computes it and stores
    it with the run, so no step (no broker message, no claim, no completion) is spent on
    it (``kernel/start.py``). ``at_start`` does no I/O, waits for nothing and is quick; it
    returns None (or raises) for any case it does not decide, and the node then runs as
    an ordinary step, which reports the error. ``execute`` must give the same result."""

    node_type: str

    def at_start(self, data: dict[str, Any], run_input: Any, session_id: str | None) -> ExecutionResult | None: ...


def can_execute(executor: object) -> bool:
    return callable(getattr(executor, "execute", None))


def can_resolve_at_start(executor: object) -> bool:
    return callable(getattr(executor, "at_start", None))


def can_materialize(executor: object) -> bool:
    return callable(getattr(executor, "materialize", None))
