"""Watching a running node: its lease heartbeat, the run's cancellation, its timeout."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .errors import NodeTimeoutError, RunCancelled
from .graph import Node
from .protocol import ExecutionResult
from .store import RunStatus, RunStore

log = logging.getLogger("orchestrator.step")


async def supervise(store: RunStore, run_id: str, node_id: str, cancel_poll_s: float,
                    work: asyncio.Task[ExecutionResult]) -> ExecutionResult:
    """Await ``work`` while watching for the run's cancellation (checked every poll)."""
    while True:
        done, _ = await asyncio.wait({work}, timeout=max(0.01, cancel_poll_s))
        if done:
            return work.result()
        if await store.run_status(run_id) in RunStatus.TERMINAL:
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            raise RunCancelled("the run ended while the node was running", run_id=run_id, node_id=node_id)


async def heartbeat(store: RunStore, run_id: str, node_id: str, worker_id: str, lease_s: float,
                     stop: asyncio.Event) -> None:
    """Renew the node's lease every third of it until ``stop`` is set (parameter
    resolution and execution), so only a dead worker loses it. Ends on ``stop`` even if a
    cancellation was swallowed inside a Redis call (asyncio timeouts on Python 3.11 can)."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), lease_s / 3)
            return
        except TimeoutError:
            pass
        try:
            await store.renew_lease(run_id, node_id, worker_id=worker_id, lease_s=lease_s)
        except Exception:  # a missed beat is retried next time; the lease outlives two misses
            log.warning("run %s node %s: lease renewal failed", run_id, node_id, exc_info=True)


async def timed(node: Node, work: Any) -> ExecutionResult:
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
