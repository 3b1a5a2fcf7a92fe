"""Admission: back-pressure on new runs, and concurrency keys of a graph's runs.

**Back-pressure**: new runs are refused while queued work is above a bound.

Every way a run starts from outside goes through ``runs.admit_and_start``, which calls
:func:`check` first: the API's manual starts, webhooks, chat messages and reruns, and
schedules (``workers/beat.py:start_scheduled`` skips an overloaded fire, logged and
counted, rather than queuing it; see there). ``runs.start_run`` itself does not check: it
is also the primitive of local runs and tests, where there is no queue.

Queued work is the node tasks waiting for a worker (the Celery queue's length: the first
nodes of runs not yet started included) plus the nodes waiting on runs' queues for a free
slot (``{p}:runs:queued``, kept by the Lua scripts and corrected by the sweeper), read in
one round trip; on a RabbitMQ broker (``ORCH_BROKER_URL=amqp://...``) the node queue's
count comes from the broker instead, sampled at most every half second
(``orchestrator/queue/depth.py``). A reading far below the bound (under half of it,
counting one node for each start admitted on it) stands for ``SAMPLE_S`` (50 ms): at
thousands of starts per second a process reads the depth about 20 times a second
instead of at every start, which saves a warm start one of its two Redis round trips;
near the bound every start reads it. The bound was already a soft one (API processes
admit concurrently, and the broker's count is sampled). :func:`check` raises
:class:`~orchestrator.errors.OverloadedError` when that is at or above
``Settings.max_queued_nodes``; the API answers 429 with ``Retry-After:
Settings.overload_retry_after_s`` and a JSON error naming the limit. Nothing is stored
for a refused request, and an accepted run is never dropped: the bound only gates
admission. ``max_queued_nodes = 0`` turns the check off.

**Concurrency keys** (a graph's ``settings.concurrency``): ``{"key": "<text or expression
over the run input>", "max_runs": n, "strategy": ...}``; how many runs of one key are in
progress at once, and what happens to one more, by ``strategy``:

=====================  ===================================================================
``queue`` (default)    it waits, status ``queued``, FIFO within its key; ``GET /runs/{id}``
                       shows ``queue_position`` (1: next)
``round_robin``        ``max_runs`` counts the runs of every key together; waiting runs are
                       taken one per key in turn (the key that queued first goes first, then
                       the next key with waiting runs, ...), FIFO within a key
``cancel_in_progress`` it starts and the oldest runs of its key in progress are cancelled
``cancel_newest``      it is cancelled at once (the ones in progress go on)
=====================  ===================================================================

The hook in the start path (``runs.py``) is :func:`admit` in place of the dispatch; a run
that ends (the worker that ran its last step, the API's cancel) calls :func:`release`, which
starts the next waiting runs. State: ``store/lua/concurrency.lua`` (one script call each).
A held run's start nodes are not marked ready or sent, so nothing sends them until it starts.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from redis.asyncio import Redis

from orchestrator.errors import OverloadedError
from orchestrator.kernel.errors import EvaluationError, ExpressionError, GraphSchemaError, ParameterError
from orchestrator.kernel.expressions import Scope, check_syntax, render, stringify
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.kernel.store import RunStatus
from orchestrator.queue import depth
from orchestrator.queue.dispatch import carries_plan
from orchestrator.queue.lanes import lane_queues
from orchestrator.settings import Settings
from orchestrator.store import fanin
from orchestrator.store.keys import Keys
from orchestrator.telemetry import metrics

log = logging.getLogger("orchestrator.admission")

RUN_QUEUES = "runs"  # the metric's label for the nodes on runs' queues (as metrics.refresh_from_redis)
LIMIT = "ORCH_MAX_QUEUED_NODES"


SAMPLE_S = 0.05  # how long a reading far below the bound stands (module docstring)


@dataclass
class _Reading:
    """The last depth a process read on one Redis client, when, and the starts admitted on it since."""

    at: float
    queued: int
    admitted: int = 0


_readings: weakref.WeakKeyDictionary[Redis, _Reading] = weakref.WeakKeyDictionary()


async def check(redis: Redis, settings: Settings) -> None:
    """Raise ``OverloadedError`` if the node queues (every lane) and the runs' queues hold
    ``max_queued_nodes`` or more tasks together (a recent reading far below the bound
    stands for ``SAMPLE_S``: module docstring)."""
    bound = settings.max_queued_nodes
    if bound <= 0:
        return
    now = time.monotonic()
    last = _readings.get(redis)
    if last is not None and now - last.at < SAMPLE_S and last.queued + last.admitted < bound // 2:
        last.admitted += 1
        return
    keys = Keys.of(settings)
    lanes = lane_queues(settings.lanes)
    if not settings.broker_url and keys.buckets <= 1:  # the lanes are lists on this Redis: one round trip
        async with redis.pipeline(transaction=False) as pipe:
            for lane in lanes:
                pipe.llen(lane)
            pipe.get(keys.queued_nodes())
            *lengths, waiting = await pipe.execute()
        tasks = dict(zip(lanes, (int(n) for n in lengths), strict=True))
    else:  # the broker is elsewhere (ORCH_BROKER_URL; required on a cluster): its lanes read there
        tasks = await depth.lane_depths(settings.broker_url, redis, lanes)
        waiting = await fanin.queued_nodes(redis, keys)
    for lane, count in tasks.items():
        metrics.QUEUE_DEPTH.labels(queue=lane).set(count)
    metrics.QUEUE_DEPTH.labels(queue=RUN_QUEUES).set(int(waiting or 0))
    queued = sum(tasks.values()) + int(waiting or 0)
    _readings[redis] = _Reading(now, queued, admitted=1)
    if queued >= bound:
        metrics.ADMISSION_REJECTED.labels(limit=LIMIT).inc()
        raise OverloadedError(
            f"busy: {queued} nodes are queued, at or above the limit of {bound} ({LIMIT}); "
            f"retry after {settings.overload_retry_after_s} s",
            limit=LIMIT, queued=queued, bound=bound, retry_after_s=settings.overload_retry_after_s,
        )


# --- concurrency keys ---------------------------------------------------------------------

_SCRIPT = (Path(__file__).parents[1] / "store" / "lua" / "concurrency.lua").read_text()
MAX_KEY_CHARS = 200
CANCELLED_BY = {"type": "RunCancelled", "code": "cancelled"}


class Concurrency(BaseModel):
    """A graph's ``settings.concurrency`` (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")
    key: str = Field(default="all", min_length=1, max_length=MAX_KEY_CHARS)
    max_runs: int = Field(default=1, ge=1, le=100_000)
    strategy: Literal["queue", "round_robin", "cancel_in_progress", "cancel_newest"] = "queue"


def concurrency_of(graph: dict[str, Any]) -> Concurrency | None:
    """The graph's ``settings.concurrency``, or None; a GraphSchemaError naming the field."""
    raw = (graph.get("settings") or {}).get("concurrency")
    if raw is None:
        return None
    try:
        return Concurrency.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise GraphSchemaError(f"settings.concurrency.{where}: {first['msg']}",
                               graph_id=str(graph.get("id") or "")) from None


def check_concurrency(graph: dict[str, Any]) -> None:
    """At save: ``settings.concurrency`` well formed and its key expression parses (a
    GraphSchemaError / ParameterError naming the field), so a stored graph cannot fail every
    start for it."""
    rule = concurrency_of(graph)
    if rule is None:
        return
    try:
        check_syntax(rule.key)
    except ExpressionError as exc:
        raise ParameterError(f"settings.concurrency.key: {exc.message}", graph_id=str(graph.get("id") or ""),
                             parameter="settings.concurrency.key") from None


def key_of(rule: Concurrency, run_input: Any, graph_id: str) -> str:
    """The run's key: ``rule.key`` evaluated over the run input (``{{ $run.input.user }}``)."""
    scope = Scope(input=run_input, run={"input": run_input})
    try:
        key = stringify(render(rule.key, scope))
    except (EvaluationError, ExpressionError) as exc:
        raise ParameterError(f"settings.concurrency.key: {exc.message}", graph_id=graph_id,
                             parameter="settings.concurrency.key") from None
    if not key or len(key) > MAX_KEY_CHARS:
        raise ParameterError(f"settings.concurrency.key evaluated to {len(key)} characters; it must have 1 to "
                             f"{MAX_KEY_CHARS}", graph_id=graph_id, parameter="settings.concurrency.key")
    return key


@dataclass(frozen=True)
class Held:
    """Where one run stands under its graph's concurrency rule."""

    rule: Concurrency
    scope: str  # workspace:graph
    key: str


class Gate:
    """The concurrency script on one Redis (the store's client, ``decode_responses``)."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._script = redis.register_script(_SCRIPT)

    def _run_keys(self, run_id: str) -> list[str]:
        k = self.keys
        return [k.run(run_id), k.ready(run_id), k.dispatched(run_id), k.sent(run_id)]

    def _keys(self, run_id: str) -> list[str]:
        """The run's keys and the concurrency prefix; on a cluster (two slots) the prefix alone."""
        if self.keys.tagged:
            return [self.keys.concurrency()]
        return [*self._run_keys(run_id), self.keys.concurrency()]

    async def _call(self, run_id: str, args: dict[str, Any]) -> list[Any]:
        split = {"split": True} if self.keys.tagged else {}
        reply: list[Any] = await self._script(keys=self._keys(run_id),
                                              args=[json.dumps({**args, **split, "run": run_id})])
        return reply

    async def admit(self, held: Held, run_id: str, start: list[str]) -> list[Any]:
        """One script on one Redis. On a cluster the run's keys and the key's are two slots:
        the run is held first (queue, round_robin), then the key decides, then a run it
        starts is unheld. Held before it is queued, a run a release takes from the queue at
        once is found held (its unhold starts it); never queued while unheld."""
        args = {"op": "admit", "scope": held.scope, "key": held.key, "max": held.rule.max_runs,
                "strategy": held.rule.strategy, "start": start}
        if not self.keys.tagged:
            return await self._call(run_id, args)
        holds = held.rule.strategy in ("queue", "round_robin")
        await self._script(keys=self._run_keys(run_id), args=[json.dumps(
            {"op": "hold", "scope": held.scope, "key": held.key, "start": start, "hold": holds, "run": run_id})])
        reply = await self._call(run_id, args)
        if holds and str(reply[0]) == "start":
            await self.unhold(run_id, start)  # False: it ended meanwhile (its dispatch is refused)
        return reply

    async def release(self, held: Held, run_id: str) -> list[str]:
        return [str(r) for r in await self._call(run_id, {
            "op": "release", "scope": held.scope, "key": held.key, "max": held.rule.max_runs,
            "strategy": held.rule.strategy})]

    async def unhold(self, run_id: str, start: list[str]) -> bool:
        """Start a held run (False: it had ended meanwhile, e.g. cancelled while queued)."""
        keys = self._run_keys(run_id) if self.keys.tagged else self._keys(run_id)
        reply = await self._script(keys=keys, args=[json.dumps(
            {"op": "unhold", "scope": "", "key": "", "start": start, "run": run_id})])
        return bool(int(reply))

    async def position(self, held: Held, run_id: str) -> int:
        reply = await self._call(run_id, {"op": "position", "scope": held.scope, "key": held.key})
        return int(reply[0])


def _gate(store: Any) -> Gate | None:
    redis, keys = getattr(store, "redis", None), getattr(store, "keys", None)
    return Gate(redis, keys) if isinstance(keys, Keys) and redis is not None else None


async def send(dispatch: Any, run_id: str, nodes: list[str], plan: str = "") -> None:
    """Send ``nodes`` of ``run_id`` through ``dispatch`` (sync or async), with the plan
    reference ``plan`` when it takes one."""
    if not nodes:
        return
    sent = dispatch(run_id, nodes, plan=plan) if plan and carries_plan(dispatch) else dispatch(run_id, nodes)
    if inspect.isawaitable(sent):
        await sent


def held_by(graph: dict[str, Any], run_input: Any, workspace: str) -> Held | None:
    """The rule and key a new run of ``graph`` (``{id, settings}``) is admitted under (None:
    no rule); a graph error naming the setting when it is malformed."""
    rule = concurrency_of(graph)
    if rule is None:
        return None
    graph_id = str(graph.get("id") or "")
    return Held(rule, f"{workspace}:{graph_id}", key_of(rule, run_input, graph_id))


async def admit(store: Any, held: Held | None, plan: RunPlan, dispatch: Any, *, ref: str = "") -> None:
    """Dispatch the new run's start nodes now, or hold, cancel it or others by its rule.
    ``ref``: the run's plan reference, which the start messages carry (a held run started
    later goes without: its worker reads the plan)."""
    run_id, start = plan.run_id, list(plan.start)
    gate = _gate(store) if held is not None else None
    if held is None or gate is None:  # no rule, or a store without Redis (a local run)
        await send(dispatch, run_id, start, ref)
        return
    reply = await gate.admit(held, run_id, start)
    verdict = str(reply[0])
    if verdict == "queued":
        log.info("run %s queued under concurrency key %r (position %s)", run_id, held.key, reply[1])
        return
    if verdict == "refused":
        await store.finish_run(run_id, RunStatus.CANCELLED, {
            **CANCELLED_BY, "message": f"concurrency key {held.key!r} has {held.rule.max_runs} run(s) in progress "
                                       "(strategy cancel_newest)"})
        return
    await send(dispatch, run_id, start, ref)
    for old in (str(r) for r in reply[1:]):
        await store.finish_run(old, RunStatus.CANCELLED, {
            **CANCELLED_BY, "message": f"a newer run ({run_id}) of concurrency key {held.key!r} started "
                                       "(strategy cancel_in_progress)"})


async def _held_of(store: Any, run_id: str) -> tuple[Held, dict[str, Any]] | None:
    """The rule and key run ``run_id`` was admitted under, and its plan's graph (None: none)."""
    raw = await store.redis.hget(store.keys.run(run_id), "concurrency")
    if not raw:
        return None
    where = json.loads(raw)
    plan = await store.load_plan(run_id)
    rule = concurrency_of(plan.graph)
    if rule is None:
        return None
    return Held(rule, str(where["scope"]), str(where["key"])), plan.graph


async def release(store: Any, run_id: str, dispatch: Any) -> list[str]:
    """Run ``run_id`` ended (or was cancelled while queued): free its place and start the
    runs waiting for it (their ids). Safe to call more than once, and for any run."""
    gate = _gate(store)
    if gate is None:
        return []
    found = await _held_of(store, run_id)
    if found is None:
        return []
    held, _ = found
    started: list[str] = []
    ended = [run_id]
    while ended:  # a run taken from the queue that had ended meanwhile frees its place again
        freed = ended.pop()
        for next_run in await gate.release(held, freed):
            plan = await store.load_plan(next_run)
            if not await gate.unhold(next_run, list(plan.start)):
                ended.append(next_run)
                continue
            await send(dispatch, next_run, list(plan.start))
            started.append(next_run)
            log.info("run %s started: concurrency key %r has a free place (run %s ended)", next_run, held.key, freed)
    return started


async def release_if_ended(store: Any, run_id: str, dispatch: Any) -> list[str]:
    """:func:`release` when the run has a concurrency rule and has ended (a worker asks after
    a step of such a run)."""
    record = await store.get_run(run_id)
    if record.status not in RunStatus.TERMINAL:
        return []
    return await release(store, run_id, dispatch)


async def queue_position(store: Any, run_id: str) -> int | None:
    """1-based place of a queued run in its key's queue; None when it is not waiting."""
    gate = _gate(store)
    found = await _held_of(store, run_id) if gate is not None else None
    if gate is None or found is None:
        return None
    position = await gate.position(found[0], run_id)
    return position or None
