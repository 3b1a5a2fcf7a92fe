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
   shown on the parent's waiting node (:meth:`ChildLinks.announce_waiting`) and answered
   through the parent's run (:func:`submit_approval_through`).

Users: the Execute Workflow node (``nodes/flow/execute_workflow``), a Loop's iterations on
workers (``nodes/_shared/loop_children.py``: an inline body, ``ChildSpec.graph``) and an
agent's workflow tools (``nodes/_ai/workflow_tools.py``). The links half (settle, cancel,
reconcile, collect, approvals) is ``orchestrator/service/child_links.py``.

Bounds (``orchestrator/settings/worker.py``): ``ORCH_CHILD_MAX_DEPTH`` (a child of a child
... of a run), ``ORCH_CHILD_MAX_PER_RUN`` (children one run may start); a graph that would
run inside itself (directly or through its ancestors) is refused at run time, and a
sub-graph node naming its own graph at validation.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from orchestrator.errors import GraphNotFoundError
from orchestrator.host.children import ChildSpec
from orchestrator.kernel.errors import ParameterError, RunNotFoundError
from orchestrator.kernel.store import RunRecord
from orchestrator.queue.lanes import tagged
from orchestrator.service.child_links import PARENT_LABEL, ChildLinks
from orchestrator.service.graph_store import DEFAULT_WORKSPACE
from orchestrator.service.runs import RunRequest, Starter, start_run
from orchestrator.settings import WorkerSettings
from orchestrator.store.redis_store import RedisRunStore

log = logging.getLogger("orchestrator.service.children")


def child_run_id(spec: ChildSpec) -> str:
    """The child's run id: the same for the same parent run, node, attempt and key, in the
    parent's lane (``orchestrator/queue/lanes.py``)."""
    raw = f"{spec.parent_run}\x00{spec.parent_node}\x00{spec.attempt}\x00{spec.key}"
    return tagged(spec.parent_run, hashlib.sha256(raw.encode()).hexdigest()[:32])


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
                             deadline_s=await self._deadline_s(spec.parent_run, graph),
                             limits=self.services.settings.graph_limits())
        await self.link(spec.parent_run, spec.parent_node, child_id)
        try:
            await start_run(self.store, self.services.registry, graph, request, dispatch=self.dispatch)
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
        score = await self.redis.zscore(self.keys.active_runs(self.keys.bucket(parent_run)), parent_run)
        if score is None:
            return own
        seconds, micros = await self.redis.time()
        left = float(score) - (int(seconds) + int(micros) / 1e6)
        return max(0.001, min(own, left))

    @staticmethod
    def _refusal(spec: ChildSpec, message: str) -> ParameterError:
        return ParameterError(message, run_id=spec.parent_run, node_id=spec.parent_node, graph_id=spec.graph_id,
                              parameter="graph_id")
