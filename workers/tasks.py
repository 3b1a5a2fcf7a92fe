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
from .process_state import process_state, reset

log = logging.getLogger("workers.tasks")

INFRA_RETRIES = 5
INFRA_RETRY_DELAY_S = 1.0


async def _step(run_id: str, node_id: str) -> StepOutcome:
    state = process_state()
    outcome = await run_step(
        state.store, state.registry, run_id, node_id, worker_id=state.worker_id,
        services=state.services, artifacts=state.artifacts, options=state.options,
    )
    log.info("node step run=%s node=%s status=%s ran=%s ready=%s",
             run_id, node_id, outcome.status, outcome.ran, outcome.ready)
    if outcome.ran:
        metrics.NODE_DURATION.labels(node_type=outcome.node_type).observe(outcome.duration_s)
        metrics.NODE_RUNS.labels(node_type=outcome.node_type, status=outcome.status).inc()
    return outcome


def step_and_dispatch(run_id: str, node_id: str, *,
                      fuse_budget_s: float | None = None) -> StepOutcome:
    """Run one node step on the process's loop, then its ready successors: the first one
    here (within the fusion budget, default ``Settings.fuse_budget_s``), the rest as node
    tasks. Called from a pool thread: the steps run on the loop, the (synchronous) kombu
    publish runs in this thread, so it never stalls the other steps on the loop."""
    state = process_state()
    store = state.store
    if fuse_budget_s is None:
        fuse_budget_s = state.settings.fuse_budget_s
    began = time.monotonic()
    outcome = state.run(_step(run_id, node_id))
    while outcome.ready:
        keep = outcome.ready[0] if time.monotonic() - began < fuse_budget_s else None
        send = outcome.ready[1:] if keep is not None else outcome.ready
        if send:
            send_nodes(celery_app, run_id, send)
            state.run(store.mark_dispatched(run_id, send))
        if keep is None:
            break
        # Run it here: its claim marks it dispatched, so there is nothing to record; a
        # crash between the completion above and that claim leaves it ready and
        # undispatched, which the sweeper dispatches.
        outcome = state.run(_step(run_id, keep))
    return outcome


@celery_app.task(name=NODE_TASK, bind=True, ignore_result=True, acks_late=True,
                 reject_on_worker_lost=True)
def node_task(self: Task[Any, Any], run_id: str, node_id: str) -> None:
    state = process_state()
    log.debug("node task received run=%s node=%s", run_id, node_id)
    in_flight = metrics.NODES_IN_FLIGHT.labels(worker=state.worker_id)
    in_flight.inc()
    try:
        step_and_dispatch(run_id, node_id)
    except (RedisConnectionError, RedisTimeoutError) as exc:
        log.warning("redis unavailable run=%s node=%s: %s; retrying", run_id, node_id, exc)
        raise self.retry(exc=exc, countdown=INFRA_RETRY_DELAY_S, max_retries=INFRA_RETRIES) from exc
    finally:
        in_flight.dec()


@celery_app.task(name=NOOP_TASK, ignore_result=True)
def noop_task(done_key: str | None = None) -> None:
    """Does nothing; the last link of a bench chain pushes to ``done_key``."""
    if done_key:
        state = process_state()
        state.run(state.redis.lpush(done_key, "1"))


@worker_init.connect
def _preload_nodes(**_: Any) -> None:
    """Import every node pack in the worker's main process, before the pool forks: each
    child inherits the loaded registry instead of paying the imports on its first task."""
    get_registry()


@worker_process_shutdown.connect
def _close_child_state(**_: Any) -> None:
    reset()  # a prefork child


@worker_shutdown.connect
def _close_process_state(**_: Any) -> None:
    reset()  # the worker process itself (threads or solo pool)
