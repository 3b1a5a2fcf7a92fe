"""Child runs: a node starts a run of a stored graph and waits for it, holding nothing.

One mechanism, on the existing suspend/resume path:

1. The node asks its host to start a child (:meth:`Children.start`, the worker's
   ``NodeHost.children``): the child is an ordinary run (``start_run``) of a stored graph
   of the parent's workspace, with its own id (derived from parent run, node, attempt and
   key, so a node re-run after a lost worker finds the child it started instead of
   starting a second one), ``meta.parent_run`` / ``meta.parent_node``, and a deadline no
   later than the parent's. The link is stored before the child starts:
   ``{p}:children`` (child -> parent and node, while it is unsettled) and
   ``{p}:run:{parent}:children`` (every child of a run, for the run view and the fan-out
   bound).
2. The node raises ``SuspendRequested`` with the child's id in its payload: the node and
   the parent run are ``waiting``, no slot or worker is held.
3. When the child ends, :meth:`ChildLinks.settle` resumes the parent node
   (``RunStore.resume_node``, the approvals' path) with the child's
   :class:`~orchestrator.host.children.ChildResult` and dispatches it; the executor runs
   again and turns the result into its output or its error. Who calls it: the worker
   whose step ended the child run (no extra round trip for runs without a parent: the
   plan's ``parent_run`` label says it), the worker whose step suspended the parent node
   (a child that ended before its parent was marked waiting), the API after a cancel, and
   the sweeper's pass (:meth:`ChildLinks.reconcile`) for anything a crash lost.
4. A parent that ends (cancelled, timed out, failed) cancels its active children
   (:meth:`ChildLinks.after_finish`, recursively); an approval asked inside a child is
   answered through the parent's run (:func:`submit_approval_through`).

Bounds (``orchestrator/settings/worker.py``): ``ORCH_CHILD_MAX_DEPTH`` (a child of a child
... of a run), ``ORCH_CHILD_MAX_PER_RUN`` (children one run may start); a graph that would
run inside itself (directly or through its ancestors) is refused at run time, and a
sub-graph node naming its own graph at validation.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
from typing import Any

from orchestrator.errors import GraphNotFoundError
from orchestrator.host.children import ChildResult, ChildSpec, waited_children
from orchestrator.kernel.errors import ParameterError, RunNotFoundError
from orchestrator.kernel.graph import ERROR_PORT
from orchestrator.kernel.protocol import NodeEvent
from orchestrator.kernel.store import NodeStatus, RunRecord, RunStatus
from orchestrator.queue.dispatch import Dispatcher
from orchestrator.service.approvals import ApprovalError, Decision, submit_approval, waiting_nodes
from orchestrator.service.graph_store import DEFAULT_WORKSPACE
from orchestrator.service.runs import RunRequest, Starter, start_run
from orchestrator.settings import StoreSettings, WorkerSettings
from orchestrator.store.redis_store import RedisRunStore

log = logging.getLogger("orchestrator.service.children")

PARENT_LABEL = "parent_run"  # the plan label (and meta key) of a child run: its parent's id
EVENT_PAGE = 1000  # events read per round trip (RedisRunStore.read_events' count)
CASCADE_DEPTH = 32  # how deep a cancel or an approval follows child links (above any depth setting)


def child_run_id(spec: ChildSpec) -> str:
    """The child's run id: the same for the same parent run, node, attempt and key."""
    raw = f"{spec.parent_run}\x00{spec.parent_node}\x00{spec.attempt}\x00{spec.key}"
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def final_output(plan: Any, outputs: dict[str, dict[str, Any]]) -> Any:
    """A run's result: the first output value of each sink node that produced one. One
    sink gives its value as is; several give ``{node name: value}``."""
    sinks = [n for n in plan.order if not plan.nodes[n].out and outputs.get(n)]
    values = {plan.nodes[n].name: next(iter(outputs[n].values())).to_json()["value"] for n in sinks}
    if len(values) == 1:
        return next(iter(values.values()))
    return values or None


def sink_values(plan: Any, outputs: dict[str, dict[str, Any]], states: dict[str, str]) -> list[Any]:
    """The main output of each node that ran with no successor that ran, in plan order:
    what ``SubgraphResult.sink_outputs`` holds for a nested graph run in process."""
    ran = (NodeStatus.SUCCEEDED, NodeStatus.FAILED)
    values: list[Any] = []
    for node_id in plan.order:
        ports = outputs.get(node_id)
        if states.get(node_id) not in ran or not ports:
            continue
        if any(states.get(edge.target) in ran for edge in plan.nodes[node_id].out):
            continue
        port = "output" if "output" in ports else ERROR_PORT if ERROR_PORT in ports else next(iter(ports))
        values.append(ports[port].value)
    return values


class ChildLinks:
    """The parent/child links of one Redis store: settling, cancelling, reconciling."""

    def __init__(self, store: RedisRunStore, dispatch: Dispatcher, settings: StoreSettings) -> None:
        self.store = store
        self.redis = store.redis
        self.keys = store.keys
        self.dispatch = dispatch
        self.settings = settings

    async def link(self, parent_run: str, parent_node: str, child_run: str) -> None:
        """Record the link before the child starts (its end must find it)."""
        children = self.keys.run_children(parent_run)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.children(), child_run, json.dumps({"run": parent_run, "node": parent_node}))
            pipe.sadd(children, child_run)
            pipe.expire(children, int(self.settings.active_ttl_s + self.settings.retention_s))
            await pipe.execute()

    async def unlink(self, parent_run: str, child_run: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(self.keys.children(), child_run)
            pipe.srem(self.keys.run_children(parent_run), child_run)
            await pipe.execute()

    async def children_of(self, run_id: str) -> list[str]:
        """Every child run ``run_id`` started (sorted)."""
        return sorted(str(c) for c in await self.redis.smembers(self.keys.run_children(run_id)))

    async def count(self, run_id: str) -> int:
        return int(await self.redis.scard(self.keys.run_children(run_id)))

    async def result_of(self, child_run: str) -> ChildResult | None:
        """How the child ended; None while it is active."""
        record = await self.store.get_run(child_run)
        if record.status not in RunStatus.TERMINAL:
            return None
        output: Any = None
        sinks: list[Any] = []
        if record.status == RunStatus.SUCCEEDED:
            plan = await self.store.load_plan(child_run)
            outputs = await self.store.read_outputs(child_run, list(plan.order))
            output = final_output(plan, outputs)
            sinks = sink_values(plan, outputs, await self.store.node_states(child_run))
        return ChildResult(child_run, record.status, output, record.error, sinks)

    async def collect(self, run_ids: list[str]) -> dict[str, ChildResult]:
        """Results of the ended ones among ``run_ids``; their links are dropped (settled)."""
        ended: dict[str, ChildResult] = {}
        for child in await self.ended(run_ids):
            result = await self.result_of(child)
            if result is not None:
                ended[child] = result
        if ended:
            await self.redis.hdel(self.keys.children(), *ended)
        return ended

    async def node_events(self, run_id: str) -> list[NodeEvent]:
        events: list[NodeEvent] = []
        after = "0-0"
        while True:
            batch = await self.store.read_events(run_id, after=after)
            events.extend(e for _, e in batch if e.node_id)
            if len(batch) < EVENT_PAGE:
                return events
            after = batch[-1][0]

    async def settle(self, child_run: str) -> bool:
        """If ``child_run`` ended, resume the parent node waiting for it (True); if its
        parent ended first, cancel it. The link is dropped once nothing more can come of it."""
        raw = await self.redis.hget(self.keys.children(), child_run)
        if raw is None:
            return False
        link = json.loads(raw)
        parent, node = str(link["run"]), str(link["node"])
        try:
            parent_status = await self.store.run_status(parent)
        except RunNotFoundError:  # the parent expired: nothing waits any more
            await self.unlink(parent, child_run)
            return False
        try:
            result = await self.result_of(child_run)
        except RunNotFoundError:  # linked but not stored (yet: the link comes first, or its start failed)
            if parent_status in RunStatus.TERMINAL:
                await self.unlink(parent, child_run)
            return False
        if result is None:
            if parent_status in RunStatus.TERMINAL:
                await self.cancel_one(child_run, f"its parent run {parent} is {parent_status}")
                return await self.settle(child_run)
            return False
        if await self.store.resume_node(parent, node, result.to_json()):
            await self._send(parent, node)
            await self.redis.hdel(self.keys.children(), child_run)
            log.info("run %s node %s resumed: child run %s %s", parent, node, child_run, result.status)
            return True
        state = (await self.store.node_states(parent)).get(node)
        if parent_status in RunStatus.TERMINAL or state in NodeStatus.FINISHED:
            await self.redis.hdel(self.keys.children(), child_run)
        # else the parent node has not been marked waiting yet: whoever suspends it settles
        return False

    async def settle_waiting(self, parent_run: str, node_id: str) -> bool:
        """After ``node_id`` of ``parent_run`` suspended: settle the child it waits for (it
        may have ended before the node was marked waiting)."""
        waited = waited_children(await self.store.suspended_payload(parent_run, node_id))
        for child in await self.ended(waited):
            if await self.settle(child):
                return True
        return False

    async def statuses(self, run_ids: list[str]) -> dict[str, str | None]:
        """Each run's status (None: unknown or expired), in one round trip."""
        if not run_ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hget(self.keys.run(run_id), "status")
            found = await pipe.execute()
        return dict(zip(run_ids, found, strict=True))

    async def ended(self, run_ids: list[str]) -> list[str]:
        """Those of ``run_ids`` whose record says they ended (one round trip)."""
        return [r for r, status in (await self.statuses(run_ids)).items() if status in RunStatus.TERMINAL]

    async def cancel_one(self, run_id: str, reason: str) -> bool:
        error = {"type": "RunCancelled", "code": "cancelled", "run_id": run_id, "message": f"cancelled: {reason}"}
        return bool(await self.store.finish_run(run_id, RunStatus.CANCELLED, error))

    async def cancel(self, run_ids: list[str], reason: str) -> None:
        """Cancel the active ones among ``run_ids`` and their children; unlink them all."""
        for child in run_ids:
            try:
                await self.cancel_one(child, reason)
            except RunNotFoundError:
                continue
            await self.after_finish(child)
        if run_ids:
            await self.redis.hdel(self.keys.children(), *run_ids)

    async def after_finish(self, run_id: str, depth: int = 0) -> None:
        """``run_id`` ended: resume its parent's node (if it is a child) and cancel its own
        active children, and theirs."""
        await self.settle(run_id)
        if depth >= CASCADE_DEPTH:
            return
        for child in await self.children_of(run_id):
            try:
                if await self.cancel_one(child, f"its parent run {run_id} ended"):
                    log.info("child run %s cancelled with its parent %s", child, run_id)
            except RunNotFoundError:
                continue
            await self.after_finish(child, depth + 1)

    async def reconcile(self) -> int:
        """The sweeper's pass over every unsettled link: how many parent nodes it resumed.
        Statuses are read in two pipelined round trips (children, then their parents); only
        an ended child, or a child of an ended parent, costs more."""
        links = {str(c): json.loads(raw) for c, raw in (await self.redis.hgetall(self.keys.children())).items()}
        children = await self.statuses(list(links))
        over = {c for c, status in children.items() if status in RunStatus.TERMINAL}
        parents = await self.statuses(sorted({str(link["run"]) for c, link in links.items() if c not in over}))
        orphaned = {p for p, status in parents.items() if status is None or status in RunStatus.TERMINAL}
        resumed = 0
        for child, link in links.items():
            if child in over or str(link["run"]) in orphaned:  # settle resumes, cancels or drops the link
                resumed += await self.settle(child)
        return resumed

    async def approval_target(self, run_id: str, node_id: str | None) -> tuple[str, str | None]:
        """Where an approval addressed to ``run_id`` (and ``node_id``, optional) goes: down
        through every waiting node that waits for a child run, to the run that asks."""
        current = run_id
        for _ in range(CASCADE_DEPTH):
            waiting = await waiting_nodes(self.store, current)
            candidates = [node_id] if node_id in waiting else waiting
            if len(candidates) != 1:
                break
            node = str(candidates[0])
            waited = waited_children(await self.store.suspended_payload(current, node))
            if not waited:  # the run that asks (the caller's own: as addressed)
                return (run_id, node_id) if current == run_id else (current, node)
            asking = [c for c in waited if await self.store.run_status(c) == RunStatus.WAITING]
            if len(asking) != 1:
                count = "none of them asks" if not asking else f"{len(asking)} of them ask ({', '.join(asking)})"
                raise ApprovalError(f"node {node} waits for child runs {', '.join(waited)}: {count} for an "
                                    "approval; answer a child run itself", run_id=current, node_id=node)
            current = asking[0]
        return current, node_id

    async def _send(self, run_id: str, node_id: str) -> None:
        sent = self.dispatch(run_id, [node_id])
        if inspect.isawaitable(sent):
            await sent


async def submit_approval_through(links: ChildLinks, run_id: str, node_id: str | None, decision: Decision,
                                  answer: tuple[dict[str, Any] | None, str | None] = (None, None)) -> tuple[str, str]:
    """``submit_approval`` on the run that asks: ``run_id`` itself, or the child (of a
    child ...) its waiting node waits for. ``answer`` is (arguments, note). Returns (the
    run, the node) that was resumed."""
    target_run, target_node = await links.approval_target(run_id, node_id)
    arguments, note = answer
    resumed = await submit_approval(links.store, target_run, target_node, decision, arguments, note,
                                    dispatch=lambda rid, nid: links.dispatch(rid, [nid]))
    return target_run, resumed


class Children(ChildLinks):
    """Starts child runs for the nodes of a worker (the host's ``ChildRuns``)."""

    def __init__(self, services: Starter, store: RedisRunStore) -> None:
        super().__init__(store, services.dispatch, services.settings)
        self.services = services
        self.limits: WorkerSettings = services.settings

    async def start(self, spec: ChildSpec) -> str:
        child_id = child_run_id(spec)
        parent = await self.store.get_run(spec.parent_run)
        try:
            await self.store.get_run(child_id)
            return child_id  # started by an earlier execution of this attempt (a lost worker)
        except RunNotFoundError:
            pass
        meta = self._child_meta(spec, parent)
        if await self.count(spec.parent_run) >= self.limits.child_max_per_run:
            raise self._refusal(spec, f"run {spec.parent_run} already started {self.limits.child_max_per_run} "
                                      "child runs (ORCH_CHILD_MAX_PER_RUN)")
        graph = spec.graph if spec.graph is not None else await self._stored(spec, meta)
        meta["graph_version"] = graph.get("version")
        request = RunRequest(spec.run_input, run_id=child_id, meta=meta,
                             deadline_s=await self._deadline_s(spec.parent_run, graph))
        await self.link(spec.parent_run, spec.parent_node, child_id)
        try:
            await start_run(self.store, self.services.registry, graph, request, dispatch=self.dispatch,
                            limits=self.services.settings.graph_limits())
        except BaseException:
            await self.unlink(spec.parent_run, child_id)
            raise
        if spec.graph is None:
            await self.services.graphs.add_run(spec.graph_id, child_id)
        log.info("run %s node %s started child run %s of graph %s", spec.parent_run, spec.parent_node,
                 child_id, spec.graph_id)
        return child_id

    async def _stored(self, spec: ChildSpec, meta: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self.services.graphs.get(spec.graph_id, spec.version, workspace=meta["workspace"])
        except GraphNotFoundError as exc:
            raise self._refusal(spec, f"no stored graph {spec.graph_id!r} in workspace {meta['workspace']!r}"
                                      + (f" at version {spec.version}" if spec.version is not None else "")
                                      + f" ({exc.message})") from None

    def _child_meta(self, spec: ChildSpec, parent: RunRecord) -> dict[str, Any]:
        """The child's record meta; refuses too deep a nesting and a graph in its own lineage."""
        pmeta = parent.meta or {}
        depth = int(pmeta.get("child_depth") or 0) + 1
        if depth > self.limits.child_max_depth:
            raise self._refusal(spec, f"a child run would be {depth} levels deep; ORCH_CHILD_MAX_DEPTH is "
                                      f"{self.limits.child_max_depth}")
        # The stored graphs around the child (an inline body is none: it cannot name itself).
        lineage = [str(g) for g in pmeta.get("graph_lineage") or []]
        if not pmeta.get("inline"):
            lineage.append(parent.graph_id)
        if spec.graph is None and spec.graph_id in lineage:
            path = " > ".join([*lineage, spec.graph_id])
            raise self._refusal(spec, f"graph {spec.graph_id!r} would run inside itself ({path})")
        meta = {"workspace": str(pmeta.get("workspace") or DEFAULT_WORKSPACE), "trigger": "parent",
                PARENT_LABEL: spec.parent_run, "parent_node": spec.parent_node, "child_depth": depth,
                "graph_lineage": lineage}
        if spec.graph is not None:
            meta["inline"] = True
        if spec.label:
            meta["label"] = spec.label
        return meta

    async def _deadline_s(self, parent_run: str, graph: dict[str, Any]) -> float | None:
        """No later than the parent's deadline (its score among the active runs)."""
        own_raw = (graph.get("settings") or {}).get("deadline_s")
        own = float(own_raw) if isinstance(own_raw, int | float) else self.services.settings.run_deadline_s
        score = await self.redis.zscore(self.keys.active_runs(), parent_run)
        if score is None:
            return own
        seconds, micros = await self.redis.time()
        left = float(score) - (int(seconds) + int(micros) / 1e6)
        return max(0.001, min(own, left))

    @staticmethod
    def _refusal(spec: ChildSpec, message: str) -> ParameterError:
        return ParameterError(message, run_id=spec.parent_run, node_id=spec.parent_node, graph_id=spec.graph_id,
                              parameter="graph_id")
