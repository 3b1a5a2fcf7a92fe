"""The node tasks: thin drivers around the kernel's step function.

``orchestrator.node(run_id, node_id)`` runs :func:`orchestrator.kernel.step.run_step` on
the worker process's one event loop (``workers.process_state``: the pool thread that took
the message waits while the loop runs this step beside every other in-flight step) with
the Redis run store. Successors that become ready join the run's queue in Redis; the
completing node takes from its head one for its own slot, plus as many as it may have made
ready (at least ``Settings.drain_batch``) while this process has free slots, and runs them
here, concurrently (a chain continues in the same task; a fan-out fills the free slots).
``orchestrator.drain(run_id)`` messages, one per ``Settings.drain_batch`` nodes left
queued, let workers with free slots take the rest. At most ``ORCH_NODE_CONCURRENCY`` node
steps start from a process's free slots; a node message (a start node, a retry, a requeue)
always runs.

Redelivery is harmless: the store's claim tells the step function the node already
finished (or that a live lease holds it), and the step returns only the successors nobody
answers for (taken from the queue but never claimed), which run again. A node taken from
the queue is marked dispatched by its own claim, which for the nodes a completion hands
over (a chain's next link, a fan-out's branches, older queued nodes) is made by that
completion (same script call: ``RunStore.complete_node``'s ``take.claim_taken``), and for
a drain's by its take (``RunStore.take_claimed``); if this worker dies after completing
the previous node and before the taken node's claim, the sweeper sends the taken node
(ready, never dispatched) after its grace; if it dies after the claim (the node running,
or claimed with the completion), its lease expires and the sweeper requeues it, and the
new claim's fencing token makes anything the old execution still sends stale; nodes still
queued wait in Redis for the next completion or drain of their run (or, with no node of
the run running, the sweeper). A node message lost between the broker's pop and its
unacked record is sent again by the sweeper (its sent time is in Redis until the claim). A
retry that reaches a worker before it is due by Redis's clock is sent again with the time
left.

A Redis outage while the step runs is retried by Celery a few times (the message is not
lost); every other failure of a node is the step function's business and ends as node
state and events, never as a Celery failure.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import gc
import logging
import math
from collections.abc import Callable
from typing import Any

from celery import Task
from celery.signals import worker_init, worker_process_init, worker_process_shutdown, worker_shutdown
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from orchestrator.errors import StoreFullError
from orchestrator.kernel.lookahead import claim_taken
from orchestrator.kernel.step import StepOutcome, run_step
from orchestrator.kernel.store import Claim, NodeStatus, Ready
from orchestrator.queue.app import DRAIN_TASK, NODE_TASK, NOOP_TASK
from orchestrator.queue.dispatch import DRAIN_MAX_HOPS, send_drains, send_nodes
from orchestrator.service import admission
from orchestrator.service.child_links import PARENT_LABEL
from orchestrator.service.plugins import get_registry
from orchestrator.settings import load_settings
from orchestrator.telemetry import metrics, model_metrics, tracing
from orchestrator.telemetry.pricing import load_table
from workers.app import celery_app
from workers.process_state import Handover, process_state, reset, set_capacity

log = logging.getLogger("workers.tasks")

INFRA_RETRIES = 5
INFRA_RETRY_DELAY_S = 1.0
STORE_FULL_RETRY_DELAY_S = 30.0  # room comes back as runs expire, not within a second


async def _step(run_id: str, node_id: str, *, promised: bool, claimed: Claim | None = None) -> StepOutcome:
    """One node step; ``promised``: its slot was reserved by the step or drain that took it
    (else it is a node message's step and takes a slot now); ``claimed``: its claim, made
    by the completion that handed it over. Its successors that it takes get its own slot
    and the ones it reserves; the rest are freed."""
    state = process_state()
    if not promised:
        state.slots.enter()
    handover = Handover(state.slots, backlog=state.settings.drain_batch)  # older queued nodes: one drain's worth
    in_flight = metrics.child(metrics.NODES_IN_FLIGHT, state.worker_id)
    in_flight.inc()
    outcome: StepOutcome | None = None
    try:
        outcome = await run_step(state.env, run_id, node_id, take=handover.take, claimed=claimed)
    finally:
        handover.settle(len(outcome.ready) if outcome is not None else 0)
        in_flight.dec()
    # DEBUG, not INFO (the shipped worker's level): the run's events already say which
    # worker ran each node and how it ended, and a line per node step cost the loop ~7 us
    # of formatting and writing each; failures, retries and stale completions log a warning.
    log.debug("node step run=%s node=%s status=%s ran=%s ready=%s queued=%s",
              run_id, node_id, outcome.status, outcome.ran, outcome.ready, outcome.queued)
    if outcome.ran and outcome.status != "stale" and (outcome.status == NodeStatus.WAITING or not outcome.ready):
        await _settle_children(run_id, node_id, outcome)  # (else it has nothing to settle)
    if outcome.ran:
        # the node, then the pure nodes run after it in the same step (kernel/fusion.py)
        for node_type, status, duration_s in [(outcome.node_type, outcome.status, outcome.duration_s),
                                              *outcome.fused]:
            metrics.child(metrics.NODE_DURATION, node_type).observe(duration_s)
            metrics.child(metrics.NODE_RUNS, node_type, status).inc()
        if outcome.usage and outcome.status != "stale":
            await _count_usage(run_id, outcome.usage)
    return outcome


async def _settle_children(run_id: str, node_id: str, outcome: StepOutcome) -> None:
    """Child runs (``orchestrator/service/children.py``): a node that suspended for a
    child that already ended is resumed; a child's node that asks for an approval is
    announced to its parent; a child run that this step ended resumes its parent's node.
    Runs without a parent cost nothing (the plan's label, cached, read only when a step
    waits or readies nothing: not at a chain's or a fan-out's every step)."""
    state = process_state()

    async def child() -> bool:
        return bool((await state.store.load_plan(run_id)).labels.get(PARENT_LABEL))

    if outcome.status == NodeStatus.WAITING:
        await state.children.settle_waiting(run_id, node_id)
        if await child():  # a question it asks is shown (and answered) through its parent
            await state.children.announce_waiting(run_id, node_id)
    elif not outcome.ready and (outcome.status == NodeStatus.FAILED or await child()):
        # A child's end resumes its parent; a run that failed cancels its children at once.
        if await state.children.ended([run_id]):  # a fresh read (run_status may answer from its cache)
            await state.children.after_finish(run_id)


async def _count_usage(run_id: str, usage: dict[str, dict[str, float]]) -> None:
    """The model usage counters (``telemetry/model_metrics.py``) for one node execution."""
    state = process_state()
    plan = await state.store.load_plan(run_id)  # cached in process
    model_metrics.record(usage, graph=str(plan.graph.get("id") or ""),
                         workspace=plan.labels.get("workspace") or "default",
                         prices=load_table(state.settings.price_table_path))


async def _publish(send: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Run a synchronous kombu publish in the loop's executor, never on the loop (with
    traces on, inside the run's trace context: ``args[0]`` is the run id)."""
    call = functools.partial(send, celery_app, *args, **kwargs)
    if tracing.enabled():
        labels = (await process_state().store.load_plan(str(args[0]))).labels
        with tracing.run_context(labels):
            call = functools.partial(contextvars.copy_context().run, call)
    await asyncio.get_running_loop().run_in_executor(None, call)


async def run_here(run_id: str, node_id: str, *, promised: bool = False, plan: str = "",
                   claimed: Claim | None = None) -> StepOutcome:
    """Run one node step on this process's loop, then, concurrently, the successors it
    takes from the run's queue. A node whose retry was scheduled is sent again with the
    retry's delay (its slot is free meanwhile).

    At its completion a node hands its own slot on and takes more queued nodes into this
    process's free slots, as many as it may have made ready (at least a drain's worth,
    ``Settings.drain_batch``; ``Handover``): a chain continues in this task with no broker
    hop, and a fan-out fills the free slots. What stays queued gets drain messages (one per
    ``Settings.drain_batch`` nodes) so that workers with free slots, this one included,
    take it: no node message per successor.

    Crash safety: a node taken from the queue is undispatched until its claim; if this
    process dies in between, the redelivered message of the node that took it (or the
    sweeper) sends it again; if it dies while the node runs, the lease expires and the
    sweeper requeues it. Queued nodes stay in Redis, whatever dies.

    ``plan``: the run's plan reference, when the node message carried one (a start of a
    stored graph): a run of a plan this process holds reads no plan from Redis
    (``orchestrator/store/plan_refs.py``). ``claimed``: the node's claim, made by the
    completion that handed it over (a fan-out's branch)."""
    if plan:
        await process_state().store.load_plan(run_id, plan)  # the step finds it in the process's cache
    branches: list[asyncio.Task[StepOutcome]] = []
    current: str | None = node_id
    while current is not None:  # a loop, not a recursion: a chain may be any length
        outcome = await _step(run_id, current, promised=promised, claimed=claimed)
        if outcome.retry_in_s is not None:
            await _publish(send_nodes, run_id, [current], countdown_s=outcome.retry_in_s,
                           plan=process_state().store.plan_ref(run_id))
        if outcome.queued > len(outcome.ready):
            await _wake(run_id, outcome.queued - len(outcome.ready))
        current = outcome.ready[0] if outcome.ready else None
        # The completion claimed the nodes it handed over when it could: no claim call for those.
        claimed = outcome.claims.get(current) if current is not None else None
        promised = True  # the taken nodes run on the slots their step handed over
        branches += [asyncio.ensure_future(run_here(run_id, n, promised=True, claimed=outcome.claims.get(n)))
                     for n in outcome.ready[1:]]
    if branches:
        await asyncio.gather(*branches)
    await _release_if_ended(run_id)
    return outcome


async def _release_if_ended(run_id: str) -> None:
    """A run under a concurrency key that ended frees its place: the next waiting runs of
    its key start (``orchestrator/service/admission.py``). Graphs without one cost nothing."""
    store = process_state().store
    plan = await store.load_plan(run_id)  # cached in process
    if not (plan.graph.get("settings") or {}).get("concurrency"):
        return

    async def dispatch(next_run: str, nodes: list[str]) -> None:
        await _publish(send_nodes, next_run, nodes)

    await admission.release_if_ended(store, run_id, dispatch)


async def _wake(run_id: str, waiting: int) -> None:
    """Drain messages for ``waiting`` newly queued nodes of ``run_id``."""
    state = process_state()
    batch = max(1, state.settings.drain_batch)
    await _publish(send_drains, run_id, math.ceil(waiting / batch), plan=state.store.plan_ref(run_id))


async def drain(run_id: str, hops: int = 0, plan: str = "") -> None:
    """Take queued nodes of ``run_id`` into this process's free slots and run them (their
    completions take more). With no slot free it returns at once rather than hold its pool
    thread waiting for one: drains queued behind a flood would otherwise take every pool
    thread of the process, and another workspace's node message (which always runs) would
    wait for the flood to end (measured: a 3-node run 15 s behind 5,000 queued nodes,
    bench/flow_control.py ``fairness``). The run's queue is still served: each completion of
    its nodes takes from it and sends drains for what stays queued, and the sweeper sends a
    node of a run whose queue waits with none of its nodes running. A drain this process has
    no slot for is published again (at most ``DRAIN_MAX_HOPS`` times), so that another
    worker with free slots takes the nodes instead of waiting for this one's completions.
    ``plan``: the run's plan reference, as in :func:`run_here`."""
    state = process_state()
    if not await state.store.queue_length(run_id):
        return
    free = state.slots.reserve_free()  # reserved: a concurrent drain sees them taken
    if not free:
        if hops < DRAIN_MAX_HOPS:
            await _publish(send_drains, run_id, 1, hops + 1, plan=plan)
        return
    taken = Ready()
    try:  # each node taken is claimed in the same call when it can be
        taken = await state.store.take_claimed(run_id, free, claim_taken(state.env))
    finally:
        state.slots.release(free - len(taken.nodes))
    if taken.nodes:
        if plan:
            await state.store.load_plan(run_id, plan)  # the steps find it in the process's cache
        await asyncio.gather(*(run_here(run_id, n, promised=True, claimed=taken.claims.get(n)) for n in taken.nodes))


def step_and_dispatch(run_id: str, node_id: str, plan: str = "") -> StepOutcome:
    """:func:`run_here` on the process's loop; blocks the calling pool thread only."""
    return process_state().run(run_here(run_id, node_id, plan=plan))


def _infra_retry(task: Task[Any, Any], work: Callable[[], Any], what: str) -> None:
    """Run ``work``; a Redis outage, or a Redis full to its maxmemory (nothing of the step
    can be stored, not even its failure), is retried by Celery a few times (the message
    is kept), then fails the task with the error naming it."""
    try:
        work()
    except (RedisConnectionError, RedisTimeoutError) as exc:
        log.warning("redis unavailable (%s): %s; retrying", what, exc)
        raise task.retry(exc=exc, countdown=INFRA_RETRY_DELAY_S, max_retries=INFRA_RETRIES) from exc
    except StoreFullError as exc:
        log.error("%s (%s); retrying in %s s", exc.message, what, STORE_FULL_RETRY_DELAY_S)
        raise task.retry(exc=exc, countdown=STORE_FULL_RETRY_DELAY_S, max_retries=INFRA_RETRIES) from exc


@celery_app.task(name=NODE_TASK, bind=True, ignore_result=True, acks_late=True,
                 reject_on_worker_lost=True)
def node_task(self: Task[Any, Any], run_id: str, node_id: str, plan: str = "") -> None:
    """One node message; ``plan``: the run's plan reference (a start of a stored graph;
    every other sender, and messages from before references, go without)."""
    log.debug("node task received run=%s node=%s", run_id, node_id)
    _infra_retry(self, lambda: step_and_dispatch(run_id, node_id, str(plan or "")), f"run={run_id} node={node_id}")


@celery_app.task(name=DRAIN_TASK, bind=True, ignore_result=True, acks_late=True,
                 reject_on_worker_lost=True)
def drain_task(self: Task[Any, Any], run_id: str, hops: int = 0, plan: str = "") -> None:
    log.debug("drain task received run=%s hops=%s", run_id, hops)
    _infra_retry(self, lambda: process_state().run(drain(run_id, int(hops), str(plan or ""))), f"run={run_id} drain")


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
    get_registry(load_settings())
    _tracing()
    # Everything loaded so far lives as long as the process: keep it out of the garbage
    # collector's scans (hundreds of in-flight steps allocate fast; measured: 1,000
    # concurrent awaiting nodes 0.70-0.75 efficiency with it, 0.5-0.6 without), and out of
    # copy-on-write faults in prefork children.
    gc.collect()
    gc.freeze()
    if sender is not None:
        prefork = "prefork" in str(getattr(sender, "pool_cls", ""))
        set_capacity(1 if prefork else int(getattr(sender, "concurrency", 1) or 1))


@worker_process_init.connect
def _tracing(**_: Any) -> None:
    """Traces on (the standard OTEL_* variables set): the SDK and Celery's and httpx's
    instrumentation, in the worker and again in each prefork child."""
    if tracing.configure("orchestrator-worker"):
        tracing.instrument_celery()
        tracing.instrument_httpx()


@worker_process_shutdown.connect
def _close_child_state(**_: Any) -> None:
    tracing.flush()
    reset()  # a prefork child


@worker_shutdown.connect
def _close_process_state(**_: Any) -> None:
    tracing.flush()
    reset()  # the worker process itself (threads or solo pool)
