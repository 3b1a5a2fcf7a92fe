"""Watching running nodes: their leases, their run's cancellation, their timeout.

One :class:`Supervisor` per store and event loop watches every node step running on that
loop, whatever their number: a single task wakes every ``poll_s``, reads the status of
each run that has nodes here (``RunStore.run_status``, which a store may share between
callers) and ends the nodes of a run that ended; and it renews, in one call per run
(``RunStore.renew_leases``, under each claim's fencing token), the leases that are a
third of their length old; a node whose token a later claim superseded is stopped. A node
step costs a registration, not a task and a timer of its own: hundreds of nodes awaiting
a model or the network wake the loop a few times a second in all, not hundreds.

The heartbeat stops when the node releases its watch, so only a dead process loses a
lease; a failed renewal is tried again a second later (the lease outlives two misses).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from .errors import NodeSuperseded, NodeTimeoutError, RunCancelled
from .graph import Node
from .protocol import ExecutionResult
from .store import RunStatus, RunStore

log = logging.getLogger("orchestrator.step")

RENEW_RETRY_S = 1.0  # after a failed renewal, the next try


@dataclass(eq=False)
class Watch:
    """One running node under a :class:`Supervisor`; ``ended`` resolves when its run ends,
    ``superseded`` when a later claim of the node took over."""

    run_id: str
    node_id: str
    token: int  # the fencing token of the claim this execution runs under
    lease_s: float
    renew_at: float  # monotonic time of the next renewal
    ended: asyncio.Future[None]
    superseded: asyncio.Future[None]
    _supervisor: Supervisor | None = field(default=None, repr=False)

    def release(self) -> None:
        """Stop watching (the node completed, failed or was suspended)."""
        if self._supervisor is not None:
            self._supervisor._release(self)
            self._supervisor = None


class Supervisor:
    """Leases and cancellation for every node step of one store on one event loop."""

    def __init__(self, store: RunStore, loop: asyncio.AbstractEventLoop) -> None:
        # Weak: the registry below is keyed weakly by the store, and a strong reference
        # from its value would keep every store (a nested run's MemoryStore) for ever.
        self._store = weakref.ref(store)
        self.loop = loop
        self._failing: set[str] = set()  # what fails now ("status", "renewal"), logged once
        self.poll_s = float("inf")  # the shortest poll period asked for by a watch
        self._runs: dict[str, set[Watch]] = {}
        self._ended: dict[str, asyncio.Future[None]] = {}
        self._task: asyncio.Task[None] | None = None

    def hold(self, run_id: str, node_id: str, *, token: int, lease_s: float,
             poll_s: float) -> Watch:
        """Watch a node from its claim (fencing ``token``) on: renew its lease, end it with
        its run, stop it when a later claim supersedes it."""
        ended = self._ended.get(run_id)
        if ended is None:
            ended = self._ended[run_id] = self.loop.create_future()
        watch = Watch(run_id, node_id, token, lease_s, time.monotonic() + lease_s / 3, ended,
                      self.loop.create_future(), self)
        self._runs.setdefault(run_id, set()).add(watch)
        self.poll_s = max(0.01, min(self.poll_s, poll_s))
        if self._task is None or self._task.done():
            self._task = self.loop.create_task(self._watch_all(), name="orchestrator-supervisor")
        return watch

    def _release(self, watch: Watch) -> None:
        watches = self._runs.get(watch.run_id)
        if watches is None:
            return
        watches.discard(watch)
        if not watches:
            del self._runs[watch.run_id]
            self._ended.pop(watch.run_id, None)

    async def _watch_all(self) -> None:
        while self._runs:
            await asyncio.sleep(self.poll_s)
            store = self._store()
            if store is None:  # nothing can run on a store that is gone
                return
            runs = list(self._runs)
            await asyncio.gather(*(self._check(store, run_id) for run_id in runs))

    def _trouble(self, what: str, run_id: str) -> None:
        """Log a failing store call once until it works again (not once per run per poll)."""
        if what not in self._failing:
            self._failing.add(what)
            log.warning("lease supervisor: %s failed (run %s); retrying, logged once until it works",
                        what, run_id, exc_info=True)

    def _fine(self, what: str) -> None:
        if what in self._failing:
            self._failing.discard(what)
            log.warning("lease supervisor: %s works again", what)

    async def _check(self, store: RunStore, run_id: str) -> None:
        try:
            status = await store.run_status(run_id)
            self._fine("status read")
        except Exception:  # a store hiccup: the next poll tries again
            self._trouble("status read", run_id)
            status = ""
        ended = self._ended.get(run_id)
        if status in RunStatus.TERMINAL and ended is not None and not ended.done():
            ended.set_result(None)
        now = time.monotonic()
        due = [w for w in self._runs.get(run_id, ()) if w.renew_at <= now]
        by_length: dict[float, list[Watch]] = {}
        for watch in due:
            by_length.setdefault(watch.lease_s, []).append(watch)
        for lease_s, watches in by_length.items():
            try:
                lost = set(await store.renew_leases(run_id, {w.node_id: w.token for w in watches},
                                                    lease_s=lease_s))
                self._fine("lease renewal")
                next_at = time.monotonic() + lease_s / 3
            except Exception:  # retried soon; the lease outlives two misses
                self._trouble("lease renewal", run_id)
                lost, next_at = set(), time.monotonic() + RENEW_RETRY_S
            for watch in watches:
                watch.renew_at = next_at
                if watch.node_id in lost and not watch.superseded.done():
                    log.warning("run %s node %s: a later claim took the node over (token %d "
                                "superseded); stopping this execution", run_id, watch.node_id, watch.token)
                    watch.superseded.set_result(None)


_SUPERVISORS: weakref.WeakKeyDictionary[RunStore, Supervisor] = weakref.WeakKeyDictionary()


def supervisor_for(store: RunStore) -> Supervisor:
    """The supervisor of ``store`` on the running loop (made on first use)."""
    loop = asyncio.get_running_loop()
    current = _SUPERVISORS.get(store)
    if current is None or current.loop is not loop:
        current = _SUPERVISORS[store] = Supervisor(store, loop)
    return current


async def supervise(watch: Watch, work: asyncio.Task[ExecutionResult]) -> ExecutionResult:
    """Await ``work``; cancel it and raise :class:`RunCancelled` if its run ends first, or
    :class:`NodeSuperseded` if a later claim of the node took it over. (The run's end and
    the takeover cancel ``work`` from a callback: an ``asyncio.wait`` on the three, its
    waiter and callbacks, cost each node step about as much again as ``work``'s task.)"""

    stopped = False

    def stop(_: asyncio.Future[None]) -> None:
        nonlocal stopped
        stopped = work.cancel()  # False: the work had ended first, and its result stands

    watch.ended.add_done_callback(stop)
    watch.superseded.add_done_callback(stop)
    try:
        result = await work
    except asyncio.CancelledError:
        this = asyncio.current_task()
        if not stopped or (this is not None and this.cancelling()):  # not ours to translate
            raise
    finally:
        watch.ended.remove_done_callback(stop)
        watch.superseded.remove_done_callback(stop)
    if not stopped:
        return result
    # Stopped (a work that swallowed its cancellation and returned is refused all the same).
    if watch.superseded.done():
        raise NodeSuperseded("a later claim of the node took it over", run_id=watch.run_id,
                             node_id=watch.node_id)
    raise RunCancelled("the run ended while the node was running", run_id=watch.run_id,
                       node_id=watch.node_id)


async def timed(node: Node, work: Awaitable[Any]) -> ExecutionResult:
    timeout_s = node.settings.timeout_s
    if timeout_s is None:
        result: ExecutionResult = await work
        return result
    try:
        async with asyncio.timeout(timeout_s):
            result = await work
            return result
    except TimeoutError:
        raise NodeTimeoutError(f"node ran longer than its {timeout_s}s timeout",
                               node_id=node.id, node_name=node.name) from None
