"""Starting a run: validate, compile, store, dispatch the start nodes.

A run of a stored graph (manual starts, webhooks, chat messages, schedules) starts with
:func:`start_stored`, from the version's cached, compiled plan (no validation, no
compilation; ``plan_cache.py``). The CLI, reruns, test steps and tests call
:func:`start_run` with a graph and a :class:`RunRequest` (the run's input and options),
which validates and compiles once per graph content (``compiled``: the runs of one graph
share its plan, and their node messages carry its reference, as a stored graph's do).
From then on workers drive the run through the store's barrier. The caller provides
``dispatch(run_id, node_ids)`` (for the Celery deployment
``orchestrator.queue.dispatch.make_dispatch(app)``, or ``make_async_dispatch`` on an
event loop), sync or async.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections import OrderedDict
from dataclasses import KW_ONLY, dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

from orchestrator.errors import StorageBudgetError
from orchestrator.kernel.environment import StepOptions
from orchestrator.kernel.protocol import DataValue
from orchestrator.kernel.registry import Registry
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.kernel.start import Starting, StartInput, resolve_at_start
from orchestrator.kernel.store import NodeStatus, RunRecord, RunStatus, RunStore, StartedNode
from orchestrator.kernel.validation import DEFAULT_GRAPH_LIMITS, GraphLimits, ValidatedGraph, validate_graph
from orchestrator.queue.dispatch import Dispatcher
from orchestrator.queue.lanes import run_id_with_tag
from orchestrator.service import admission
from orchestrator.service.graph_store import DEFAULT_WORKSPACE
from orchestrator.service.plan_cache import StoredPlan, compile_template, start_key
from orchestrator.settings import Settings, WorkerSettings
from orchestrator.store.creation import StaleGraphError, StartGuard
from orchestrator.store.keys import Keys
from orchestrator.store.lanes import WorkspaceLanes
from orchestrator.store.plan_refs import plan_ref
from orchestrator.store.redis_store import RedisRunStore
from orchestrator.telemetry import metrics, tracing

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from orchestrator.service.graph_store import GraphStore

VALIDATED_CACHE_SIZE = 128  # graphs (by content) whose validation this process remembers
TEMPLATES_PER_GRAPH = 8  # start choices of one graph whose compiled plans it remembers


@dataclass
class _Known:
    """A graph's content validated with ``registry`` and ``limits``, and the plans compiled
    from it so far (by start choice, ``plan_cache.start_key``): run id "", each run's is
    :meth:`RunPlan.for_run`, so the runs of one graph share what a plan keeps for its
    runs (``plan.memo``: fixed parameters, the shared plan data, the content reference)."""

    registry: Registry
    vg: ValidatedGraph
    limits: GraphLimits
    templates: dict[str, tuple[RunPlan, float | None]]


_validated: OrderedDict[str, _Known] = OrderedDict()
_lanes: WeakKeyDictionary[RunStore, WorkspaceLanes] = WeakKeyDictionary()


def workspace_lanes(store: RunStore) -> WorkspaceLanes:
    """The lanes new runs stored in ``store`` take (``orchestrator/store/lanes.py``): the
    assignment in the store's Redis, else in memory; one cache per store (per process)."""
    table = _lanes.get(store)
    if table is None:
        if isinstance(store, RedisRunStore):
            settings = store.settings if isinstance(store.settings, WorkerSettings) \
                else WorkerSettings.model_construct()  # a store built without the worker settings: the defaults
            table = WorkspaceLanes.build(store.redis, store.keys, settings)
        else:
            table = WorkspaceLanes.build(None, Keys(), WorkerSettings.model_construct())
        _lanes[store] = table
    return table


async def new_run_id(store: RunStore, workspace: str) -> str:
    """A fresh run id in one of ``workspace``'s lanes; its first start in this process pays
    one round trip, later ones none (``WorkspaceLanes``)."""
    return run_id_with_tag(await workspace_lanes(store).tag(workspace))


def _known(graph: dict[str, Any], registry: Registry, limits: GraphLimits) -> _Known:
    """``graph`` validated with ``registry`` and ``limits``, remembered per content (the
    last ``VALIDATED_CACHE_SIZE``); a graph that fails is never remembered."""
    key = hashlib.sha256(json.dumps(graph, sort_keys=True, default=str).encode()).hexdigest()
    hit = _validated.get(key)
    if hit is not None and hit.registry is registry and hit.limits == limits:
        _validated.move_to_end(key)
        return hit
    known = _validated[key] = _Known(registry, validate_graph(graph, registry, limits), limits, {})
    while len(_validated) > VALIDATED_CACHE_SIZE:
        _validated.popitem(last=False)
    return known


def compiled(graph: dict[str, Any], registry: Registry, limits: GraphLimits,
             start: list[str] | None) -> tuple[ValidatedGraph, RunPlan, float | None]:
    """``graph`` validated (``validate_graph``) and compiled from ``start``
    (``plan_cache.compile_template``), both remembered per graph content: the plan
    template (run id "") and the graph's deadline. A graph fault raises before anything
    is remembered of the compilation."""
    known = _known(graph, registry, limits)
    choice = start_key(start)
    template = known.templates.get(choice)
    if template is None:
        template = compile_template(known.vg, start)
        if len(known.templates) >= TEMPLATES_PER_GRAPH:
            known.templates.clear()
        known.templates[choice] = template
    return known.vg, template[0], template[1]


INPUT_COUNTED_FROM = 64 * 1024  # a run input this large counts toward the workspace's storage budget
_SIZED = json.JSONEncoder(default=str)  # built once: json.dumps builds an encoder per call with a default


@dataclass(frozen=True)
class RunRequest:
    """What a new run starts with, besides its graph: the run input and the options of
    :func:`start_run`.

    ``start`` names the start nodes (default: the graph's single trigger node);
    ``run_id`` defaults to a uuid4 hex (in the workspace's lane); ``deadline_s`` to the graph's
    ``settings.deadline_s``, then ``Settings.run_deadline_s``; ``seed_outputs`` (a rerun)
    are stored as outputs of nodes that will not run, so expressions can read them.
    ``limits``: the graph bounds of the caller's settings (``Settings.graph_limits()``).
    ``starting`` (``starting_for``): the start node is completed by the start itself when
    its type can tell its result from its parameters and the run input
    (``kernel/start.py``); None: it takes a step.
    """

    run_input: Any
    _: KW_ONLY
    start: list[str] | None = None
    session_id: str | None = None
    run_id: str | None = None
    meta: dict[str, Any] | None = None
    deadline_s: float | None = None
    seed_outputs: dict[str, dict[str, DataValue]] | None = None
    limits: GraphLimits = DEFAULT_GRAPH_LIMITS
    starting: Starting | None = None


# A start node's outputs larger than this take its step (a worker's CPU, not the starting
# process's), checked against the settings' own limit there.
START_OUTPUT_BYTES = 64 * 1024
STARTINGS_KEPT = 16
_starting: dict[tuple[int, int], tuple[Registry, Settings, Starting]] = {}


def starting_for(registry: Registry, settings: Settings) -> Starting:
    """How this process resolves start nodes at a run's start (``kernel/start.py``), with
    the tracing a worker's step of theirs would have and its output limits, tighter in
    size (``START_OUTPUT_BYTES``: the start's work stays small); one per registry and
    settings."""
    known = _starting.get((id(registry), id(settings)))
    if known is not None:
        return known[2]
    options = StepOptions(max_output_bytes=min(settings.max_output_bytes, START_OUTPUT_BYTES),
                          max_output_depth=settings.max_output_depth,
                          expression_limits=settings.expression_limits(),
                          observer=tracing.NodeSpans() if tracing.enabled() else None)
    # the process a start node resolved at start ran in (read now: a forked server's own pid)
    starting = Starting(registry, f"{socket.gethostname()}:{os.getpid()}", options)
    if len(_starting) >= STARTINGS_KEPT:  # a process has one; tests and reloads make more
        _starting.clear()
    _starting[(id(registry), id(settings))] = (registry, settings, starting)
    return starting


async def start_run(store: RunStore, registry: Registry, graph: dict[str, Any], request: RunRequest, *,
                    dispatch: Dispatcher) -> str:
    """Validate ``graph``, compile the run ``request`` asks for, store it, dispatch its
    start nodes.

    Returns the run id (``request.run_id``, else a uuid4 hex tagged with the workspace's lane). Graph faults raise
    ``GraphError`` subclasses before anything is stored. ``request.deadline_s`` defaults
    to the graph's ``settings.deadline_s``, then ``Settings.run_deadline_s``; the graph is
    checked against ``request.limits``.
    ``request.seed_outputs`` (a rerun) are stored as outputs of nodes that will not run,
    so expressions can read them. Calling it twice with the same ``run_id`` stores once
    and dispatches again, which the store's claim makes harmless.
    """
    vg, template, graph_deadline = compiled(graph, registry, request.limits, request.start)
    meta = dict(request.meta or {})
    run_id = request.run_id or await new_run_id(store, str(meta.get("workspace") or DEFAULT_WORKSPACE))
    plan = template.for_run(run_id)
    with tracing.run_span(run_id, vg.graph.id, trigger=str(meta.get("trigger") or ""),
                          rerun_of=str(meta.get("rerun_of") or "")) as trace_labels:
        plan.labels.update(trace_labels, workspace=str(meta.get("workspace") or DEFAULT_WORKSPACE))
        if meta.get("parent_run"):  # a child run: its end resumes the parent (service/children.py)
            plan.labels["parent_run"] = str(meta["parent_run"])
        deadline_s = request.deadline_s if request.deadline_s is not None else graph_deadline
        return await _store_and_dispatch(store, _Start(plan, vg.graph.id, vg.graph.version, deadline_s,
                                                       starting=request.starting),
                                         replace(request, meta=meta), dispatch)


@dataclass(frozen=True)
class _Start:
    """A compiled run about to be stored: its plan, its graph's id and version, its
    deadline, (a stored graph's run on the Redis store) the guard create.lua checks, and
    how its start node may be resolved at start (``RunRequest.starting``)."""

    plan: RunPlan
    graph_id: str
    graph_version: int | None
    deadline_s: float | None
    guard: StartGuard | None = None
    starting: Starting | None = None


def _started(start: _Start, request: RunRequest, held: object) -> StartedNode | None:
    """The start node completed now (``kernel/start.py``), or None when it takes a step:
    always for a run its concurrency rule may hold (it starts later, or never), a rerun
    (its start nodes read seeded outputs) and a child run (its end resumes its parent,
    which only a worker's step does)."""
    if start.starting is None or held is not None or request.seed_outputs or start.plan.labels.get("parent_run"):
        return None
    return resolve_at_start(start.plan, StartInput(request.run_input, request.session_id), start.starting)


async def _store_and_dispatch(store: RunStore, start: _Start, request: RunRequest, dispatch: Dispatcher) -> str:
    plan = start.plan
    run_id, meta = plan.run_id, dict(request.meta or {})
    held = admission.held_by({"id": start.graph_id, "settings": plan.graph.get("settings") or {}},
                             request.run_input, str(meta.get("workspace") or DEFAULT_WORKSPACE))
    version = meta.get("graph_version", start.graph_version)
    record = RunRecord(
        run_id=run_id,
        status=RunStatus.QUEUED,
        graph_id=start.graph_id,
        graph_version=int(version) if version is not None else None,
        created_at=time.time(),
        run_input=request.run_input,
        session_id=request.session_id,
        meta=meta,
    )
    budget = getattr(store, "budget", None)  # a Redis store's StorageBudget: the record keeps the input
    size = len(_SIZED.encode(request.run_input).encode()) if budget is not None else 0
    if budget is not None and size >= INPUT_COUNTED_FROM:  # smaller: no round trip (bounded like the record)
        await budget.reserve(size, workspace=str(meta.get("workspace") or "default"))
    started = _started(start, request, held)
    if start.guard is not None and isinstance(store, RedisRunStore):
        nodes = await store.create_run(plan, record, deadline_s=start.deadline_s, guard=start.guard, started=started)
    else:
        nodes = await store.create_run(plan, record, deadline_s=start.deadline_s, started=started)
    if request.seed_outputs:
        try:
            await store.seed_outputs(run_id, request.seed_outputs)
        except StorageBudgetError as exc:  # nothing was dispatched: the run ends at once
            await store.finish_run(run_id, RunStatus.FAILED, exc.to_dict())
            raise
    # create_run marked the start nodes sent (Redis's clock): a message lost on the way,
    # or a send that fails, is sent again by the sweeper after its grace. A graph with
    # settings.concurrency may hold the run instead (admission.py). The start messages name
    # the plan's content (store/plan_refs.py): a worker that holds it reads none.
    # With the start node completed at start (``started``), its ready successors go instead
    # (none when the run ended with it); it counts among the node runs as a step would.
    if started is not None and started.node_id not in nodes:
        metrics.child(metrics.NODE_RUNS, plan.nodes[started.node_id].node_type, NodeStatus.SUCCEEDED).inc()
    ref = plan_ref(plan) if isinstance(store, RedisRunStore) else ""
    if held is None:  # nothing its rule decides: what the creation said to send
        await admission.send(dispatch, run_id, nodes, ref)
    else:
        await admission.admit(store, held, plan, dispatch, ref=ref)
    return run_id


class Starter(Protocol):
    """What starting a run of a stored graph needs: the API's ``Services`` and the
    scheduler's :class:`workers.beat.ScheduleServices` both are one."""

    @property
    def redis(self) -> Redis: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def registry(self) -> Registry: ...
    @property
    def graphs(self) -> GraphStore: ...
    @property
    def run_store(self) -> RunStore: ...
    @property
    def dispatch(self) -> Dispatcher: ...


async def admit_and_start(services: Starter, graph: dict[str, Any], request: RunRequest, *, trigger: str) -> str:
    """The one way a run of a stored graph starts (API triggers, reruns, schedules):
    ``OverloadedError`` (429 from the API; a skipped fire for the scheduler) before
    anything is stored while the queue is over its bound (``orchestrator/service/admission.py``),
    else the new run's id (queued, not finished), listed under its graph and counted.
    ``request.meta`` carries ``workspace`` and ``graph_version``; ``meta.trigger`` is
    ``trigger``."""
    from orchestrator.telemetry import metrics

    await admission.check(services.redis, services.settings)
    run_id = await start_run(services.run_store, services.registry, graph,
                             replace(request, meta={**(request.meta or {}), "trigger": trigger},
                                     limits=services.settings.graph_limits(),
                                     starting=starting_for(services.registry, services.settings)),
                             dispatch=services.dispatch)
    if graph.get("id"):
        await services.graphs.add_run(str(graph["id"]), run_id)
    metrics.RUNS_STARTED.labels(trigger=trigger).inc()
    return run_id


@dataclass(frozen=True)
class StoredGraph:
    """Which stored graph :func:`start_stored` runs: ``graph_id`` at ``version`` (default:
    the latest), looked up in ``workspace`` (the caller's; None: any workspace)."""

    graph_id: str
    _: KW_ONLY
    version: int | None = None
    workspace: str | None = None


async def start_stored(services: Starter, source: StoredGraph, request: RunRequest, *, trigger: str) -> str:
    """The one way a run of a stored graph starts (manual starts, webhooks, chat messages,
    schedules): admitted like :func:`admit_and_start`, then started from the version's
    cached, compiled plan (``orchestrator/service/plan_cache.py``): no validation, no
    compilation, and on a warm process two Redis round trips (admission; the create
    script, which also checks the graph is still that version and lists the run under it)
    before the start nodes are published.

    The run belongs to the graph's workspace (``meta.workspace``) and records the version
    it ran (``meta.graph_version``). With ``source.workspace`` a graph of another
    workspace is unknown (404). Raises ``OverloadedError`` before storing anything while
    the queue is over its bound."""
    from orchestrator.service import admission
    from orchestrator.telemetry import metrics

    await admission.check(services.redis, services.settings)
    stored = await services.graphs.compiled(source.graph_id, source.version, request.start,
                                            workspace=source.workspace)
    try:
        run_id = await _start_compiled(services, stored, source, request, trigger)
    except StaleGraphError:  # the graph changed since this process compiled it: read it again, once
        stored = await services.graphs.compiled(source.graph_id, source.version, request.start,
                                                workspace=source.workspace, fresh=True)
        run_id = await _start_compiled(services, stored, source, request, trigger)
    metrics.RUNS_STARTED.labels(trigger=trigger).inc()
    return run_id


async def _start_compiled(services: Starter, stored: StoredPlan, source: StoredGraph, request: RunRequest,
                          trigger: str) -> str:
    head, keys = stored.head, services.graphs.keys
    meta = {"graph_version": stored.version, **(request.meta or {}), "workspace": head.workspace,
            "trigger": trigger}
    run_id = request.run_id or await new_run_id(services.run_store, head.workspace)  # in its workspace's lane
    plan = stored.plan.for_run(run_id)
    guard = StartGuard(graph_key=keys.graph(head.graph_id), runs_key=keys.graph_runs(head.graph_id),
                       created_at=head.created_at, workspace=head.workspace, version=stored.version,
                       latest=source.version is None, keep_s=int(services.settings.retention_s))
    deadline_s = request.deadline_s if request.deadline_s is not None else stored.deadline_s
    start = _Start(plan, head.graph_id, stored.version, deadline_s, guard,
                   starting=starting_for(services.registry, services.settings))
    with tracing.run_span(run_id, head.graph_id, trigger=trigger,
                          rerun_of=str(meta.get("rerun_of") or "")) as trace_labels:
        plan.labels.update(trace_labels, workspace=head.workspace)
        run_id = await _store_and_dispatch(services.run_store, start, replace(request, meta=meta),
                                           services.dispatch)
    if not isinstance(services.run_store, RedisRunStore):  # create.lua lists the run under its graph
        await services.graphs.add_run(head.graph_id, run_id)
    return run_id
