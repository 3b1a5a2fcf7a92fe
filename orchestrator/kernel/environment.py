"""What the process that runs steps lends each step, as one typed object.

A worker process builds one :class:`StepEnvironment` (its store, registry, worker id, step
options, artifact cache, the factory of each run's host object, and the runner of nested
graphs); a ``LocalRunner`` builds its own. ``run_step`` and the runtime executors see
(``GraphRuntime``) read everything from it, so adding a process-wide service touches this
file, not the signature of every function between the worker and the executor.

``host_for(run_id, workspace)`` gives the object the kernel passes to executors as
``FlowContext.host`` and never looks inside (this product's is ``orchestrator.host.NodeHost``).
``subgraphs`` runs a nested graph in this process (container nodes such as loops); it is
injected so that the runtime does not import the local runner that imports the step.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .expression_limits import DEFAULT_LIMITS, ExpressionLimits
from .limits import Ceiling, Limiter
from .observer import StepObserver
from .output_limits import DEFAULT_MAX_DEPTH
from .protocol import NodeEvent, SubgraphResult
from .registry import Registry
from .store import RunStore
from .usage import UsageCheck
from .validation import DEFAULT_GRAPH_LIMITS, GraphLimits

HostFor = Callable[[str, str | None], object]  # (run id, the run's workspace) -> FlowContext.host
EventSink = Callable[[NodeEvent], Awaitable[None]]


@dataclass
class StepOptions:
    lease_s: float = 60.0
    cancel_poll_s: float = 0.2
    max_output_bytes: int = 8 * 1024 * 1024
    max_output_depth: int = DEFAULT_MAX_DEPTH  # lists/objects nesting of one output value
    expression_limits: ExpressionLimits = DEFAULT_LIMITS  # budgets of every parameter expression
    graph_limits: GraphLimits = DEFAULT_GRAPH_LIMITS  # what nested graphs are validated against
    observer: StepObserver | None = None  # the host watching executions (observer.py)
    usage_check: UsageCheck | None = None  # awaited after each usage report (usage.py)
    fuse_max_nodes: int = 0  # pure links a step may run after its node (fusion.py); 0: none
    fuse_max_s: float = 0.02  # no new link once a step's chain has run this long


class ArtifactCache:
    """Process-local, per-run cache of materialized artifacts and executor key/values.

    Artifacts cannot be pickled (they hold clients, locks, loops), so each worker process
    keeps its own; the least recently used runs are evicted past ``max_runs``.
    """

    def __init__(self, max_runs: int = 64) -> None:
        self._runs: OrderedDict[str, dict[tuple[str, str, str], Any]] = OrderedDict()
        self.max_runs = max_runs

    def for_run(self, run_id: str) -> dict[tuple[str, str, str], Any]:
        entry = self._runs.get(run_id)
        if entry is None:
            entry = self._runs[run_id] = {}
            while len(self._runs) > self.max_runs:
                self._runs.popitem(last=False)
        else:
            self._runs.move_to_end(run_id)
        return entry

    def drop(self, run_id: str) -> None:
        self._runs.pop(run_id, None)


@dataclass(frozen=True, kw_only=True)
class Nested:
    """One nested graph run that a container node asks for."""

    graph: dict[str, Any]
    run_input: Any
    run_id: str
    session_id: str | None
    host: object
    on_event: EventSink


class SubgraphRunner(Protocol):
    """Runs a nested graph to its end in this process (``kernel.local.run_nested``)."""

    def __call__(self, env: StepEnvironment, nested: Nested, /) -> Awaitable[SubgraphResult]: ...


@dataclass(frozen=True, kw_only=True)
class StepEnvironment:
    """What every step of this process runs with (see the module docstring)."""

    store: RunStore
    registry: Registry
    worker_id: str = "local"
    options: StepOptions = field(default_factory=StepOptions)
    artifacts: ArtifactCache = field(default_factory=ArtifactCache)
    host_for: HostFor | None = None
    subgraphs: SubgraphRunner | None = None
    limiter: Limiter | None = None  # enforces nodes' settings.limits (none: not enforced)
    ceiling: Ceiling | None = None  # nodes in flight per workspace (none: no ceiling)

    def host(self, run_id: str, workspace: str | None) -> object:
        """The host object of run ``run_id`` (None when the process passes none)."""
        return None if self.host_for is None else self.host_for(run_id, workspace)
