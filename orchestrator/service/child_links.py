"""Parent/child links of child runs: settling, cancelling, reconciling, routing approvals.

The other half of ``orchestrator/service/children.py`` (which starts child runs and says
how the whole works): :class:`ChildLinks` resumes the node that waits for a child when the
child ends (:meth:`ChildLinks.settle`), cancels the children of a run that ended
(:meth:`ChildLinks.after_finish`), repairs what a crash lost (:meth:`ChildLinks.reconcile`,
each sweeper pass), collects the children a node waits for (:meth:`ChildLinks.collect`)
and routes an approval addressed to a parent to the child that asks
(:func:`submit_approval_through`). Keys: ``{p}:children`` (child -> the waiting parent
node, until settled) and ``{p}:run:{id}:children`` (every child of a run).
"""

from __future__ import annotations

import inspect
import json
import logging
from typing import Any

from orchestrator.host.children import ChildResult, waited_children
from orchestrator.kernel.errors import RunNotFoundError
from orchestrator.kernel.graph import ERROR_PORT
from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.kernel.store import NodeStatus, RunStatus
from orchestrator.queue.dispatch import Dispatcher
from orchestrator.service.approvals import Approval, ApprovalError, submit_approval
from orchestrator.settings import StoreSettings
from orchestrator.store.redis_store import RedisRunStore
from orchestrator.telemetry.budgets import spent

log = logging.getLogger("orchestrator.service.child_links")

PARENT_LABEL = "parent_run"  # the plan label (and meta key) of a child run: its parent's id
EVENT_PAGE = 1000  # events read per round trip (RedisRunStore.read_events' count)
ANNOUNCE_SCAN = 50  # latest events of a child run searched for the question its waiting node asked
APPROVAL_REQUESTED = "approval_requested"  # the agent_event of a node that waits for a person's decision
CASCADE_DEPTH = 32  # how deep a cancel or an approval follows child links (above any depth setting)


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
        # one Redis: one MULTI; a cluster: the link (the child's bucket) and the parent's set
        # (its bucket) are two slots, written in this order in one pipeline
        async with self.redis.pipeline(transaction=not self.keys.tagged) as pipe:
            pipe.hset(self._links(child_run), child_run, json.dumps({"run": parent_run, "node": parent_node}))
            pipe.sadd(children, child_run)
            pipe.expire(children, int(self.settings.active_ttl_s + self.settings.retention_s))
            await pipe.execute()

    async def unlink(self, parent_run: str, child_run: str) -> None:
        async with self.redis.pipeline(transaction=not self.keys.tagged) as pipe:
            pipe.hdel(self._links(child_run), child_run)
            pipe.srem(self.keys.run_children(parent_run), child_run)
            await pipe.execute()

    def _links(self, child_run: str) -> str:
        """The links hash that holds ``child_run``'s (its bucket's; one Redis: one hash)."""
        return self.keys.children(self.keys.bucket(child_run))

    async def _drop_links(self, child_runs: list[str]) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            for child in child_runs:
                pipe.hdel(self._links(child), child)
            await pipe.execute()

    async def children_of(self, run_id: str) -> list[str]:
        """Every child run ``run_id`` started (sorted)."""
        return sorted(str(c) for c in await self.redis.smembers(self.keys.run_children(run_id)))

    async def viewable_children(self, run_id: str) -> list[str]:
        """The child runs of ``run_id`` that can be looked at (sorted): a child is linked
        before its run is created (the link must outlive a crash between the two), so one
        being started right now, or whose start failed before its unlink, is left out
        rather than shown as an id that answers 404 (one round trip more, with children)."""
        children = await self.children_of(run_id)
        return [c for c, status in (await self.statuses(children)).items() if status is not None]

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
        _, used = await spent(self.store, child_run)
        return ChildResult(child_run, record.status, output, record.error, sinks, used.to_json())

    async def collect(self, run_ids: list[str]) -> dict[str, ChildResult]:
        """Results of the ended ones among ``run_ids``; their links are dropped (settled)."""
        ended: dict[str, ChildResult] = {}
        for child in await self.ended(run_ids):
            result = await self.result_of(child)
            if result is not None:
                ended[child] = result
        if ended:
            await self._drop_links(list(ended))
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
        raw = await self.redis.hget(self._links(child_run), child_run)
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
            await self.redis.hdel(self._links(child_run), child_run)
            log.info("run %s node %s resumed: child run %s %s", parent, node, child_run, result.status)
            return True
        state = (await self.store.node_states(parent)).get(node)
        if parent_status in RunStatus.TERMINAL or state in NodeStatus.FINISHED:
            await self.redis.hdel(self._links(child_run), child_run)
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

    async def announce_waiting(self, run_id: str, node_id: str) -> int:
        """Node ``node_id`` of child run ``run_id`` suspended: when it asks for an approval,
        its ``approval_requested`` event is copied to the waiting node of each ancestor run
        (with ``child_run``), so whoever watches the parent (the console, a chat stream)
        sees the question and answers it through the parent. How many copies."""
        asked = None
        latest: Any = await self.redis.xrevrange(self.keys.events(run_id), count=ANNOUNCE_SCAN)
        for _, fields in latest or []:
            event = NodeEvent.from_json(json.loads(fields["e"]))
            if event.node_id == node_id and (event.data or {}).get("event") == APPROVAL_REQUESTED:
                asked = event
                break
        copied, current = 0, run_id
        while asked is not None and copied < CASCADE_DEPTH:
            raw = await self.redis.hget(self._links(current), current)
            if raw is None:
                break
            link = json.loads(raw)
            parent, waiting = str(link["run"]), str(link["node"])
            planned = (await self.store.load_plan(parent)).nodes.get(waiting)
            await self.store.append_event(NodeEvent(
                run_id=parent, node_id=waiting, node_type=planned.node_type if planned else "",
                node_name=planned.name if planned else waiting, event_type=EventType.AGENT_EVENT,
                data={**(asked.data or {}), "child_run": run_id, "child_node_id": node_id}))
            copied, current = copied + 1, parent
        return copied

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
            await self._drop_links(run_ids)

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
        async with self.redis.pipeline(transaction=False) as pipe:
            for bucket in range(self.keys.buckets):
                pipe.hgetall(self.keys.children(bucket))
            per_bucket = await pipe.execute()
        links = {str(c): json.loads(raw) for found in per_bucket for c, raw in found.items()}
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
        through the child runs that wait for a decision (of ``node_id``'s children when it
        is given), to the run that asks; ``run_id`` itself when none of its children asks.
        A run may be busy (a Loop collecting its other iterations) while a child asks."""
        current, node = run_id, node_id
        for _ in range(CASCADE_DEPTH):
            asking = await self._asking(current, node)
            if not asking:
                break
            if len(asking) > 1:
                raise ApprovalError(f"child runs {', '.join(asking)} each ask for an approval; answer a child run "
                                    "itself", run_id=current, node_id=node)
            current, node = asking[0], None
        return (run_id, node_id) if current == run_id else (current, node)

    async def _asking(self, run_id: str, node_id: str | None) -> list[str]:
        """The children of ``run_id`` (started by ``node_id``, if given) that wait for a decision."""
        waiting = [c for c, status in (await self.statuses(await self.children_of(run_id))).items()
                   if status == RunStatus.WAITING]
        if node_id is None or not waiting:
            return waiting
        async with self.redis.pipeline(transaction=False) as pipe:
            for child in waiting:
                pipe.hget(self._links(child), child)
            links = await pipe.execute()
        return [c for c, raw in zip(waiting, links, strict=True) if raw and json.loads(raw)["node"] == node_id]

    async def _send(self, run_id: str, node_id: str) -> None:
        sent = self.dispatch(run_id, [node_id])
        if inspect.isawaitable(sent):
            await sent


async def submit_approval_through(links: ChildLinks, run_id: str, node_id: str | None,
                                  approval: Approval) -> tuple[str, str]:
    """``submit_approval`` on the run that asks: ``run_id`` itself, or the child (of a
    child ...) its waiting node waits for. Returns (the run, the node) that was resumed."""
    target_run, target_node = await links.approval_target(run_id, node_id)
    resumed = await submit_approval(links.store, target_run, target_node, approval,
                                    dispatch=lambda rid, nid: links.dispatch(rid, [nid]))
    return target_run, resumed
