"""MemoryStore: the in-process RunStore (unit tests, local runs, nested sub-graphs).

It applies the same transition function as the Redis barrier (``scheduling.complete``)
and passes the same conformance suite (tests/conformance/): the same fencing tokens, lease
rules and node states. Its one clock is this process's.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import RunNotFoundError
from .lookahead import taken_claim
from .protocol import DataValue, EventType, NodeEvent
from .scheduling import BarrierState, RunPlan, complete
from .store import (
    Claim,
    ClaimRequest,
    NodeCompletion,
    NodeStatus,
    Ready,
    RunRecord,
    RunStatus,
    RunStore,
    StartedNode,
    Take,
    TakenClaims,
)

EventCallback = Callable[[NodeEvent], Awaitable[None] | None]
_UNSTARTED = frozenset({NodeStatus.PENDING, NodeStatus.RETRYING, NodeStatus.WAITING})


def _event_order(event_id: str) -> tuple[int, int]:
    """Event ids are ``"<ms>-<seq>"`` as in a Redis stream; they sort as number pairs."""
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass
class _Run:
    plan: RunPlan
    record: RunRecord
    state: BarrierState
    outputs: dict[str, dict[str, DataValue]] = field(default_factory=dict)
    events: list[tuple[str, NodeEvent]] = field(default_factory=list)
    claims: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)  # node -> fencing token of its latest claim
    leases: dict[str, tuple[int, float]] = field(default_factory=dict)  # node -> (token, monotonic expiry)
    retry_at: dict[str, float] = field(default_factory=dict)  # node -> when its scheduled retry is due
    stale: int = 0  # completions, renewals and appends refused for a superseded token
    suspended: dict[str, dict[str, Any]] = field(default_factory=dict)
    resumes: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)  # node -> attempt its next claim runs
    queue: deque[str] = field(default_factory=deque)  # ready nodes waiting for a free slot


class MemoryStore(RunStore):
    def __init__(self, on_event: EventCallback | None = None) -> None:
        self._runs: dict[str, _Run] = {}
        self._seq = 0
        self._on_event = on_event
        self._listeners: dict[str, EventCallback] = {}
        self.changed = asyncio.Event()  # set on every append (for waiters in tests)

    # -- helpers ------------------------------------------------------------------------

    def _run(self, run_id: str) -> _Run:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFoundError(f"unknown run {run_id!r}", run_id=run_id) from None

    async def _append(self, run: _Run, event: NodeEvent) -> str:
        self._seq += 1
        event_id = f"{int(time.time() * 1000)}-{self._seq}"
        run.events.append((event_id, event))
        self.changed.set()
        for callback in (self._on_event, self._listeners.get(run.record.run_id)):
            if callback is not None:
                maybe = callback(event)
                if maybe is not None:
                    await maybe
        return event_id

    def subscribe(self, run_id: str, callback: EventCallback) -> None:
        """Call ``callback`` for every event of ``run_id`` (besides the store-wide one)."""
        self._listeners[run_id] = callback

    def _run_event(self, run: _Run, event_type: str, data: dict[str, Any] | None = None) -> NodeEvent:
        return NodeEvent(run_id=run.record.run_id, node_id="", node_type="", event_type=event_type, data=data)

    def _node_event(self, run: _Run, node_id: str, event_type: str, data: dict[str, Any] | None = None) -> NodeEvent:
        pn = run.plan.nodes[node_id]
        return NodeEvent(run_id=run.record.run_id, node_id=node_id, node_type=pn.node_type,
                         node_name=pn.name, event_type=event_type, data=data)

    async def _close_open(self, run: _Run, status: str) -> None:
        """In a run that ends now with ``status``, nodes that never started become
        ``not_run`` and nodes running become ``cancelled``, each with its event."""
        for node_id in run.plan.order:
            if run.state.status[node_id] in _UNSTARTED:
                run.state.status[node_id] = NodeStatus.NOT_RUN
                await self._append(run, self._node_event(run, node_id, EventType.NOT_RUN))
            elif run.state.status[node_id] == NodeStatus.RUNNING:
                run.state.status[node_id] = NodeStatus.CANCELLED
                await self._append(run, self._node_event(run, node_id, EventType.CANCELLED, {"reason": status}))

    async def _finish(self, run: _Run, status: str, error: dict[str, Any] | None) -> None:
        if status != RunStatus.SUCCEEDED:
            await self._close_open(run, status)
        run.queue.clear()  # nothing queued runs any more
        run.record.status = status
        run.record.finished_at = time.time()
        run.record.error = error
        kind = {
            RunStatus.SUCCEEDED: EventType.RUN_COMPLETED, RunStatus.FAILED: EventType.RUN_FAILED,
            RunStatus.CANCELLED: EventType.RUN_CANCELLED, RunStatus.TIMED_OUT: EventType.RUN_TIMED_OUT,
        }[status]
        await self._append(run, self._run_event(run, kind, {"status": status, "error": error}))

    # -- RunStore -----------------------------------------------------------------------

    async def create_run(self, plan: RunPlan, record: RunRecord, *, deadline_s: float | None = None,
                         started: StartedNode | None = None) -> list[str]:
        if plan.run_id in self._runs:
            return list(plan.start)
        record = copy.copy(record)
        record.status = RunStatus.RUNNING
        record.created_at = record.created_at or time.time()
        run = _Run(plan=plan, record=record, state=BarrierState.initial(plan))
        self._runs[plan.run_id] = run
        await self._append(run, self._run_event(run, EventType.RUN_STARTED, {
            "graph_id": record.graph_id, "start": plan.start}))
        if started is None or started.node_id not in plan.start:
            run.state.dispatched.update(plan.start)  # the caller sends them next
            return list(plan.start)
        # One loop step, as atomic as create.lua: the start node's completion, its ready successors sent next.
        ready = (await self._complete(plan.run_id, started.node_id, started.completion, None, None)).nodes
        run.state.dispatched.update(ready)
        return ready

    async def seed_outputs(self, run_id: str, outputs: dict[str, dict[str, DataValue]]) -> None:
        run = self._run(run_id)
        for node_id, ports in outputs.items():
            if node_id not in run.plan.nodes or node_id in run.plan.start:
                run.outputs.setdefault(node_id, dict(ports))

    async def load_plan(self, run_id: str) -> RunPlan:
        return self._run(run_id).plan

    async def get_run(self, run_id: str) -> RunRecord:
        return self._run(run_id).record

    async def claim_node(self, run_id: str, request: ClaimRequest, *, worker_id: str) -> Claim:
        return await self._claim(run_id, request)

    async def _claim(self, run_id: str, request: ClaimRequest) -> Claim:
        node_id, lease_s, started, read = request.node_id, request.lease_s, request.started, request.read
        run = self._run(run_id)
        if run.record.status not in RunStatus.ACTIVE or node_id not in run.plan.nodes:
            return Claim(kind="closed")
        status = run.state.status[node_id]
        if status in NodeStatus.FINISHED:
            return Claim(kind="done", claims=run.claims.get(node_id, 0),
                         pending_dispatch=self._undispatched(run))
        if status == NodeStatus.WAITING:
            return Claim(kind="busy", claims=run.claims.get(node_id, 0))  # resumed only by resume_node
        lease = run.leases.get(node_id)
        now = time.monotonic()
        if lease is not None and lease[1] > now:
            return Claim(kind="busy", claims=run.claims.get(node_id, 0))
        if status == NodeStatus.RETRYING:
            left_s = run.retry_at.get(node_id, 0.0) - time.time()
            if left_s > 0:
                return Claim(kind="early", claims=run.claims.get(node_id, 0), retry_in_s=left_s)
        token = run.tokens[node_id] = run.tokens.get(node_id, 0) + 1
        run.leases[node_id] = (token, now + lease_s)
        run.state.dispatched.add(node_id)
        run.claims[node_id] = run.claims.get(node_id, 0) + 1
        attempt = run.attempts.get(node_id, 1)
        started = copy.copy(started)
        started.attempt = attempt
        if status != NodeStatus.RETRYING and run.claims[node_id] > 1:
            started.data = {**(started.data or {}),
                            ("resumed" if node_id in run.resumes else "reclaimed"): True}
        run.state.status[node_id] = NodeStatus.RUNNING
        await self._append(run, started)
        return Claim(kind="run", claims=run.claims[node_id], run_input=run.record.run_input,
                     session_id=run.record.session_id, workspace=run.record.meta.get("workspace") or None,
                     resume=run.resumes.get(node_id),
                     outputs={n: run.outputs[n] for n in read if n in run.outputs}, attempt=attempt,
                     token=token)

    async def renew_leases(self, run_id: str, tokens: Mapping[str, int], *, lease_s: float) -> list[str]:
        run = self._run(run_id)
        superseded = []
        for node_id, token in tokens.items():
            if run.tokens.get(node_id) == token:
                run.leases[node_id] = (token, time.monotonic() + lease_s)
            else:
                run.stale += 1
                superseded.append(node_id)
        return superseded

    async def read_outputs(self, run_id: str, node_ids: list[str]) -> dict[str, dict[str, DataValue]]:
        run = self._run(run_id)
        return {n: run.outputs[n] for n in node_ids if n in run.outputs}

    async def node_states(self, run_id: str) -> dict[str, str]:
        return dict(self._run(run_id).state.status)

    async def read_events(
        self, run_id: str, after: str = "0-0", count: int = 1000, block_ms: int | None = None
    ) -> list[tuple[str, NodeEvent]]:
        run = self._run(run_id)
        deadline = time.monotonic() + (block_ms or 0) / 1000
        while True:
            out = [(eid, ev) for eid, ev in run.events if _event_order(eid) > _event_order(after)][:count]
            if out or block_ms is None or time.monotonic() >= deadline:
                return out
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                pass

    async def append_event(self, event: NodeEvent, *, token: int | None = None) -> str:
        run = self._run(event.run_id)
        if token is not None:
            if run.tokens.get(event.node_id) != token:
                run.stale += 1
                return ""
            if run.state.status.get(event.node_id) != NodeStatus.RUNNING:
                return ""  # the node is over (cancelled with its run): nothing more of it
        return await self._append(run, event)

    def _undispatched(self, run: _Run) -> list[str]:
        return sorted(run.state.ready - run.state.dispatched, key=run.plan.rank().__getitem__)

    async def complete_node(self, run_id: str, node_id: str, completion: NodeCompletion, *,
                            take: Take | None = None, token: int | None = None) -> Ready:
        again = self._run(run_id).state.status.get(node_id) in NodeStatus.FINISHED
        ready = await self._complete(run_id, node_id, completion, None if take is None else take.max_nodes, token)
        # As complete.lua: a redelivered completion hands over, claims nothing.
        if again or take is None or take.claim_taken is None:
            return ready
        await self._claim_nodes(run_id, ready, take.claim_taken)
        return ready

    async def _claim_nodes(self, run_id: str, ready: Ready, taken: TakenClaims) -> None:
        """Claim each of ``ready.nodes`` with the request ``taken`` describes; granted claims
        into ``ready.claims`` (the prelude's ``claim_nodes``)."""
        plan = self._run(run_id).plan
        for node in ready.nodes:  # one loop step, as atomic as one script
            claim = await self._claim(run_id, taken_claim(plan, node, taken))
            if claim.kind == "run":
                ready.claims[node] = claim

    async def _complete(self, run_id: str, node_id: str, completion: NodeCompletion, take: int | None,
                        token: int | None) -> Ready:
        run = self._run(run_id)
        if token is not None and run.tokens.get(node_id) != token:
            run.stale += 1
            return Ready(stale=True)
        status = run.state.status.get(node_id)
        if status in NodeStatus.FINISHED:
            return Ready([] if run.record.status in RunStatus.TERMINAL else self._undispatched(run))
        if status == NodeStatus.WAITING:
            return Ready()  # a repeated suspend changes nothing
        if completion.status == NodeStatus.RETRYING:
            if status != NodeStatus.RUNNING or run.record.status in RunStatus.TERMINAL:
                return Ready()  # a repeat, or the run ended meanwhile (the next claim is refused)
            run.leases.pop(node_id, None)
            run.state.status[node_id] = NodeStatus.RETRYING
            run.attempts[node_id] = completion.next_attempt
            run.retry_at[node_id] = time.time() + (completion.retry_delay_s or 0.0)
            run.claims[node_id] = max(0, run.claims.get(node_id, 1) - 1)  # claims count worker losses
            for ev in completion.events:
                await self._append(run, ev)
            return self._take(run, [], take)
        run.leases.pop(node_id, None)
        if completion.status == NodeStatus.WAITING:
            run.state.status[node_id] = NodeStatus.WAITING
            run.suspended[node_id] = completion.payload or {}
            for ev in completion.events:
                await self._append(run, ev)
            if run.record.status in RunStatus.ACTIVE:
                run.record.status = RunStatus.WAITING
            await self._append(run, self._run_event(run, EventType.RUN_WAITING, {
                "node_id": node_id, "payload": completion.payload or {}}))
            return self._take(run, [], take)
        run.outputs[node_id] = dict(completion.outputs)
        for ev in completion.events:
            await self._append(run, ev)
        if run.record.status in RunStatus.TERMINAL or completion.stop_run:
            # A run that is over (or ends now) propagates nothing: what did not run stays pending.
            run.state.status[node_id] = completion.status
            if completion.stop_run and run.record.status not in RunStatus.TERMINAL:
                await self._finish(run, RunStatus.FAILED, completion.error)  # the rest: not_run
            return Ready()
        transition = complete(run.plan, run.state, node_id, completion.status, set(completion.outputs))
        for skipped in transition.skipped:
            await self._append(run, self._node_event(run, skipped, EventType.SKIPPED))
        if transition.run_finished:
            await self._finish(run, RunStatus.SUCCEEDED, None)
            return Ready()
        return self._take(run, [n for n in transition.ready if n not in run.state.dispatched], take)

    def _take(self, run: _Run, ready: list[str], take: int | None) -> Ready:
        """``ready`` as they are (``take`` None), or queued and the oldest ``take`` taken."""
        if take is None:
            return Ready(ready)
        run.queue.extend(ready)
        run.state.dispatched.update(ready)  # the queue answers for them
        taken = self._pop(run, take)
        return Ready(taken, queued=len(ready), backlog=len(run.queue))

    def _pop(self, run: _Run, max_nodes: int) -> list[str]:
        taken = [run.queue.popleft() for _ in range(min(max_nodes, len(run.queue)))]
        run.state.dispatched.difference_update(taken)
        return taken

    async def take_queued(self, run_id: str, max_nodes: int) -> list[str]:
        run = self._run(run_id)
        if run.record.status in RunStatus.TERMINAL:
            return []
        return self._pop(run, max_nodes)

    async def take_claimed(self, run_id: str, max_nodes: int, claim_taken: TakenClaims) -> Ready:
        ready = Ready(await self.take_queued(run_id, max_nodes))
        await self._claim_nodes(run_id, ready, claim_taken)
        return ready

    async def queue_length(self, run_id: str) -> int:
        return len(self._run(run_id).queue)

    async def mark_dispatched(self, run_id: str, node_ids: list[str]) -> None:
        self._run(run_id).state.dispatched.update(node_ids)

    async def finish_run(self, run_id: str, status: str, error: dict[str, Any] | None = None) -> bool:
        run = self._run(run_id)
        if run.record.status in RunStatus.TERMINAL:
            return False
        await self._finish(run, status, error)
        return True

    async def resume_node(self, run_id: str, node_id: str, resume_input: Any) -> bool:
        run = self._run(run_id)
        if run.state.status.get(node_id) != NodeStatus.WAITING or run.record.status in RunStatus.TERMINAL:
            return False
        run.resumes[node_id] = {"payload": run.suspended.pop(node_id, {}), "input": resume_input}
        run.state.status[node_id] = NodeStatus.PENDING
        run.state.dispatched.discard(node_id)
        run.state.ready.add(node_id)
        run.record.status = RunStatus.RUNNING
        await self._append(run, self._run_event(run, EventType.RUN_RESUMED, {"node_id": node_id}))
        return True

    async def get_resume(self, run_id: str, node_id: str) -> dict[str, Any] | None:
        return self._run(run_id).resumes.get(node_id)

    # -- inspection (tests, local runner) -------------------------------------------------

    def events(self, run_id: str) -> list[NodeEvent]:
        return [e for _, e in self._run(run_id).events]

    def outputs(self, run_id: str) -> dict[str, dict[str, DataValue]]:
        return dict(self._run(run_id).outputs)

    def stale_refusals(self, run_id: str) -> int:
        """Completions, renewals and event appends refused for a superseded token."""
        return self._run(run_id).stale
