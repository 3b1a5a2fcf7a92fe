"""The node task: a thin driver around the kernel's step function.

``orchestrator.node(run_id, node_id)`` runs :func:`orchestrator.kernel.step.run_step` on
the worker process's one event loop (``workers.process_state``: the pool thread that took
the message waits while the loop runs this step beside every other in-flight step) with
the Redis run store, sends a task for every node that
became ready, and records them as dispatched. Redelivery is harmless: the store's claim
tells the step function the node already finished, and the step returns only the
successors not yet marked dispatched, which are sent again (a crash between completing and
dispatching loses nothing).

Fusion (continuation): while the task has run for less than ``Settings.fuse_budget_s``
(``ORCH_FUSE_BUDGET_S``), the first ready successor runs in this same task instead of
taking a Celery round trip; the others are dispatched at once, so parallel branches still
spread over the workers. A fused node is marked dispatched by its own claim. If this
worker dies after completing the previous node and before that claim, the redelivered
message of the previous node finds it done and sends the fused node (still undispatched);
if it dies while the fused node runs, its lease expires and the sweeper requeues it.

A Redis outage while the step runs is retried by Celery a few times (the message is not
lost); every other failure of a node is the step function's business and ends as node
state and events, never as a Celery failure.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

from celery import Task
from celery.signals import worker_init, worker_process_shutdown, worker_shutdown
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator import metrics
from orchestrator.kernel.step import StepOutcome, run_step
from orchestrator.plugins import get_registry

from . import metrics_server  # noqa: F401 - connects the worker's metrics signals
from .app import NODE_TASK, NOOP_TASK, celery_app
from .dispatch import send_nodes
from .process_state import process_state, reset, set_capacity

log = logging.getLogger("workers.tasks")

INFRA_RETRIES = 5
INFRA_RETRY_DELAY_S = 1.0


async def _step(run_id: str, node_id: str) -> StepOutcome:
    state = process_state()
    state.in_flight += 1  # only ever touched on the loop thread
    in_flight = metrics.NODES_IN_FLIGHT.labels(worker=state.worker_id)
    in_flight.inc()
    try:
        outcome = await run_step(
            state.store, state.registry, run_id, node_id, worker_id=state.worker_id,
            services=state.services, artifacts=state.artifacts, options=state.options,
        )
    finally:
        state.in_flight -= 1
        in_flight.dec()
    log.info("node step run=%s node=%s status=%s ran=%s ready=%s",
             run_id, node_id, outcome.status, outcome.ran, outcome.ready)
    if outcome.ran:
        metrics.NODE_DURATION.labels(node_type=outcome.node_type).observe(outcome.duration_s)
        metrics.NODE_RUNS.labels(node_type=outcome.node_type, status=outcome.status).inc()
    return outcome


def _split(ready: list[str], began: float, fuse_budget_s: float) -> tuple[list[str], list[str]]:
    """(run here, send as tasks) for successors that just became ready.

    Here: the first one while the task is within its fusion budget (a linear chain saves
    a broker hop), plus as many more as this process has free slots (a fan-out of
    I/O-bound nodes needs no broker round trip per branch); the rest go to the queue, so
    other workers share them."""
    state = process_state()
    free = max(0, state.capacity - state.in_flight)
    first = 1 if time.monotonic() - began < fuse_budget_s else 0
    take = min(len(ready), max(first, free))
    return ready[:take], ready[take:]


async def _send(run_id: str, node_ids: list[str], countdown_s: float | None = None) -> None:
    """Publish node tasks off the loop (kombu is synchronous), then record them sent."""
    state = process_state()
    await asyncio.get_running_loop().run_in_executor(
        None, functools.partial(send_nodes, celery_app, run_id, node_ids, countdown_s=countdown_s))
    if countdown_s is None:
        await state.store.mark_dispatched(run_id, node_ids)


async def run_here(run_id: str, node_id: str, *, began: float | None = None,
                   fuse_budget_s: float | None = None) -> StepOutcome:
    """Run one node step on this process's loop, then its ready successors: some here,
    concurrently (see :func:`_split`), the rest as node tasks. A node whose retry was
    scheduled is sent again with the retry's delay (the slot is free meanwhile).

    Crash safety is the fused node's: a successor run here is marked dispatched by its own
    claim; if this process dies before that claim, the redelivered task of the node that
    readied it sends it (still undispatched); if it dies while it runs, its lease expires
    and the sweeper requeues it."""
    state = process_state()
    if fuse_budget_s is None:
        fuse_budget_s = state.settings.fuse_budget_s
    if began is None:
        began = time.monotonic()
    outcome = await _step(run_id, node_id)
    if outcome.retry_in_s is not None:
        await _send(run_id, [node_id], countdown_s=outcome.retry_in_s)
        return outcome
    if not outcome.ready:
        return outcome
    here, send = _split(outcome.ready, began, fuse_budget_s)
    if send:
        await _send(run_id, send)
    if len(here) == 1:
        return await run_here(run_id, here[0], began=began, fuse_budget_s=fuse_budget_s)
    outcomes = await asyncio.gather(
        *(run_here(run_id, n, began=began, fuse_budget_s=fuse_budget_s) for n in here))
    return outcomes[-1] if outcomes else outcome


def step_and_dispatch(run_id: str, node_id: str, *,
                      fuse_budget_s: float | None = None) -> StepOutcome:
    """:func:`run_here` on the process's loop; blocks the calling pool thread only."""
    return process_state().run(run_here(run_id, node_id, fuse_budget_s=fuse_budget_s))


@celery_app.task(name=NODE_TASK, bind=True, ignore_result=True, acks_late=True,
                 reject_on_worker_lost=True)
def node_task(self: Task[Any, Any], run_id: str, node_id: str) -> None:
    log.debug("node task received run=%s node=%s", run_id, node_id)
    try:
        step_and_dispatch(run_id, node_id)
    except (RedisConnectionError, RedisTimeoutError) as exc:
        log.warning("redis unavailable run=%s node=%s: %s; retrying", run_id, node_id, exc)
        raise self.retry(exc=exc, countdown=INFRA_RETRY_DELAY_S, max_retries=INFRA_RETRIES) from exc


@celery_app.task(name=NOOP_TASK, ignore_result=True)
def noop_task(done_key: str | None = None) -> None:
    """Does nothing; the last link of a bench chain pushes to ``done_key``."""
    if done_key:
        state = process_state()
        state.run(state.redis.lpush(done_key, "1"))


@worker_init.connect
def _preload_nodes(sender: Any = None, **_: Any) -> None:
    """Import every node pack in the worker's main process, before the pool forks: each
    child inherits the loaded registry instead of paying the imports on its first task.
    Also note how many node steps this process may hold: the pool size for a threads
    pool, 1 for a prefork child (each child inherits the value)."""
    get_registry()
    if sender is not None:
        prefork = "prefork" in str(getattr(sender, "pool_cls", ""))
        set_capacity(1 if prefork else int(getattr(sender, "concurrency", 1) or 1))


@worker_process_shutdown.connect
def _close_child_state(**_: Any) -> None:
    reset()  # a prefork child


@worker_shutdown.connect
def _close_process_state(**_: Any) -> None:
    reset()  # the worker process itself (threads or solo pool)
