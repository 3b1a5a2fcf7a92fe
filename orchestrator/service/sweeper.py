"""The sweeper: every run reaches a terminal state, whatever dies.

One pass (:meth:`Sweeper.sweep_once`) reads Redis's clock once (``TIME``: the clock every
script stamps with, never this host's) and does these things for the runs in
``{p}:runs:active`` (scored by deadline):

* a run past its deadline is ended ``timed_out`` (``store.finish_run``: it appends
  ``run_timed_out`` and gives the run's keys the retention TTL), and frees its place under
  its graph's concurrency key (``admission.release``);
* a node marked ``running`` whose lease key is gone lost its worker (the heartbeat that
  renews the lease stopped): its task is sent again, and the next claim takes the free
  lease (under a new fencing token, which makes the lost worker's completion stale) and
  appends ``started`` with ``reclaimed: true``. A node claimed more than
  ``max_node_reclaims`` extra times fails (``worker_lost``) and stops the run, so a node
  that kills every worker it runs on cannot loop forever;
* a node ``retrying`` whose retry was due more than ``undispatched_grace_s`` ago is sent
  again: its delayed message died with the worker that held it;
* a node whose task was sent (``{p}:run:{id}:sent``, stamped before the send) and not
  claimed within ``undispatched_grace_s`` is sent again: its message was lost in transit
  (kombu's Redis transport pops a message with BRPOP and records it as unacked in a
  second round trip, so a worker that dies or loses the reply in between loses it). A
  message still waiting on the broker queue behind a backlog is not lost: the queue is
  FIFO, so only nodes sent before the oldest node message still queued count;
* a node in the run's ready set that was never marked dispatched (a crash between the
  barrier script and the dispatch) is dispatched once it has waited ``undispatched_grace_s``;
* a waiting node whose timer is due (a Wait node's duration, point in time or timeout,
  in ``{p}:waits:due`` on Redis's clock) is resumed and sent (``orchestrator/service/waits.py``);
* a run whose queue holds nodes while none of its nodes runs (the drain messages were
  lost with their worker) gets its oldest queued node sent after ``undispatched_grace_s``:
  that node's completion takes the next ones;
* a child run that ended resumes the parent node waiting for it, and a child whose parent
  ended is cancelled (``orchestrator/service/children.py``: the workers and the API do it
  at once; the pass catches what a crash lost).

Every re-send is stamped in ``sent`` first, so it is not repeated before a worker had
``undispatched_grace_s`` to claim it, whichever sweeper made it. This sweeper is the only
path that sends lost work again: kombu's visibility timeout is set far above any node
(``Settings.visibility_timeout_s``), and a copy it redelivers anyway is refused by the
claim (a live lease is busy, a finished node done).

Several sweepers may run at once (the API, ``orchestrator run``, ``orchestrator
sweeper``): each pass first takes a short ``SET NX PX`` lock, and a pass that does not get
it does nothing. Every action is idempotent anyway (finish_run and complete_node are
no-ops on a finished run or node; a duplicate dispatch is refused by the claim).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import math
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.kernel.store import NodeCompletion, NodeStatus, RunStatus
from orchestrator.queue import depth
from orchestrator.queue.dispatch import Dispatcher
from orchestrator.queue.lanes import lane_of, lane_queues
from orchestrator.service import admission
from orchestrator.service.child_links import ChildLinks
from orchestrator.settings import Settings
from orchestrator.store import redis_client
from orchestrator.store.keys import Keys
from orchestrator.store.redis_store import RedisRunStore

log = logging.getLogger("orchestrator.service.sweeper")


DEFAULT_PERIOD_S = 5.0
DEFAULT_MAX_NODE_RECLAIMS = 3
DEFAULT_UNDISPATCHED_GRACE_S = 10.0
LOCK_TTL_S = 30.0  # a pass that crashes holds the lock at most this long
PASS_TIMEOUT_S = 120.0  # a pass stuck longer (a Redis reply that never comes) is abandoned
BATCH = 500  # active runs read per ZRANGE
QUEUE_MARK = "\x00queue"  # stands for a run's queue among the node ids the sweeper tracks
NODE_TASK = "orchestrator.node"  # orchestrator.queue.app.NODE_TASK
WATERMARK_SCAN = 64  # oldest broker messages read per pass to find the oldest node message

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Correct the queued-nodes count by what a pass found minus what the count was when it
# began: the scripts' own changes during the pass are kept (a SET would erase them); as
# the scripts do, a count at or below zero is removed.
_CORRECT = """
local v = redis.call('INCRBY', KEYS[1], ARGV[1])
if v <= 0 then redis.call('DEL', KEYS[1]) else redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return v
"""


def lock_key(keys: Keys) -> str:
    """``{p}:sweeper:lock`` (string, PX ``LOCK_TTL_S``): held by the sweeper doing a pass."""
    return f"{keys.prefix}:sweeper:lock"


@dataclass
class SweepReport:
    """What one pass did; ``locked`` is False when another sweeper held the lock."""

    locked: bool = True
    timed_out: list[str] = field(default_factory=list)
    requeued: list[tuple[str, str]] = field(default_factory=list)  # (run, node) re-sent
    lost: list[tuple[str, str]] = field(default_factory=list)  # (run, node) failed: worker lost
    dispatched: list[tuple[str, str]] = field(default_factory=list)  # ready, never sent before
    resent: list[tuple[str, str]] = field(default_factory=list)  # sent, never claimed: sent again
    woken: list[tuple[str, str]] = field(default_factory=list)  # (run, node) a due timer resumed
    children_resumed: int = 0  # parent nodes resumed for child runs that ended (service/children.py)


@dataclass(frozen=True)
class SweepLimits:
    """When the sweeper fails a node whose workers keep dying (``max_node_reclaims``) and
    when it sends a ready node nobody sent again (``undispatched_grace_s``); None: the
    settings' value. ``pass_timeout_s``: how long :meth:`Sweeper.run_forever` lets one
    pass take before it abandons it and starts the next."""

    max_node_reclaims: int | None = None
    undispatched_grace_s: float | None = None
    pass_timeout_s: float = PASS_TIMEOUT_S


class Sweeper:
    """Deadlines, lost workers and lost dispatches of every active run in one store.

    ``dispatch(run_id, node_ids)`` sends node tasks (sync or async), as for
    ``orchestrator.service.runs.start_run``. Limits default to the settings (``sweep_period_s``,
    ``max_node_reclaims``, ``undispatched_grace_s``) and can be overridden per instance
    (``limits``).
    ``broker_queues`` are the Redis lists the node tasks travel on, one per lane (same Redis
    database; default: the settings' lanes, ``orchestrator/queue/lanes.py``).
    """

    def __init__(
        self,
        store: RedisRunStore,
        dispatch: Dispatcher,
        settings: Settings,
        *,
        limits: SweepLimits = SweepLimits(),
        broker_queues: list[str] | None = None,
    ) -> None:
        self.store = store
        self.redis = store.redis
        self.dispatch = dispatch
        self.settings = settings
        self.keys = Keys.of(self.settings)
        self.max_node_reclaims = _setting(self.settings, "max_node_reclaims", limits.max_node_reclaims,
                                          DEFAULT_MAX_NODE_RECLAIMS)
        self.undispatched_grace_s = _setting(self.settings, "undispatched_grace_s",
                                             limits.undispatched_grace_s, DEFAULT_UNDISPATCHED_GRACE_S)
        self.pass_timeout_s = limits.pass_timeout_s
        self.broker_queues = broker_queues or lane_queues(settings.lanes)
        self._release = self.redis.register_script(_RELEASE)
        self._correct = self.redis.register_script(_CORRECT)
        self._first_seen: dict[tuple[str, str], float] = {}  # undispatched ready node -> when seen
        self._watermarks = [math.inf] * len(self.broker_queues)  # of this pass, per lane: see _queue_watermark

    # -- one pass -----------------------------------------------------------------------

    async def sweep_once(self, now: float | None = None) -> SweepReport:
        """One pass over every active run; ``now`` (epoch s) defaults to Redis's clock, the
        one the scripts stamp deadlines, retry due times and sent times with."""
        now = await self.redis_now() if now is None else now
        token = uuid.uuid4().hex
        key = lock_key(self.keys)
        if not await self.redis.set(key, token, nx=True, px=int(LOCK_TTL_S * 1000)):
            return SweepReport(locked=False)
        report = SweepReport()
        try:
            await self._time_out(now, report)
            await self._check_nodes(now, report)
            await self._wake_waits(now, report)
            report.children_resumed = await ChildLinks(self.store, self.dispatch, self.settings).reconcile()
        finally:
            await self._release(keys=[key], args=[token])
        return report

    async def redis_now(self) -> float:
        """Redis's clock (``TIME``), epoch seconds."""
        seconds, micros = await self.redis.time()
        return int(seconds) + int(micros) / 1e6

    async def _per_bucket(self, command: str, *args: Any, **kwargs: Any) -> list[Any]:
        """``command`` on every bucket's key (the key is the first argument; one pipeline:
        on a cluster redis-py sends it as one batch per node)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for bucket in range(self.keys.buckets):
                getattr(pipe, command)(*(a(bucket) if callable(a) else a for a in args), **kwargs)
            return list(await pipe.execute())

    async def _time_out(self, now: float, report: SweepReport) -> None:
        per_bucket = await self._per_bucket("zrangebyscore", self.keys.active_runs, "-inf", now)
        for run_id in (run_id for expired in per_bucket for run_id in cast(list[str], expired)):
            error = {"type": "RunError", "code": "run_timed_out", "run_id": run_id,
                     "message": "the run passed its deadline while still active"}
            if await self.store.finish_run(run_id, RunStatus.TIMED_OUT, error):
                log.warning("run %s timed out (deadline passed)", run_id)
                report.timed_out.append(run_id)
                await admission.release(self.store, run_id, self.dispatch)  # its concurrency place

    async def _wake_waits(self, now: float, report: SweepReport) -> None:
        """Resume the waiting nodes whose timer is due (orchestrator/service/waits.py)."""
        from orchestrator.service.waits import wake_due

        report.woken += await wake_due(self.store, lambda run_id, node_id: self.dispatch(run_id, [node_id]),
                                       now)

    async def _check_nodes(self, now: float, report: SweepReport) -> None:
        """Every active run, bucket by bucket (one bucket on one Redis); each bucket's
        counted queued nodes are read together first (one pipeline)."""
        seen: set[tuple[str, str]] = set()
        counted_before = [int(n or 0) for n in await self._per_bucket("get", self.keys.queued_nodes)]
        self._watermarks = await self._lane_watermarks()
        for bucket, before in enumerate(counted_before):
            await self._check_bucket(bucket, before, now, report, seen)
        # forget runs and nodes that are no longer candidates
        self._first_seen = {k: v for k, v in self._first_seen.items() if k in seen}

    async def _check_bucket(self, bucket: int, counted_before: int, now: float, report: SweepReport,
                            seen: set[tuple[str, str]]) -> None:
        start = 0
        queued = 0
        while True:
            runs = await self.redis.zrangebyscore(self.keys.active_runs(bucket), f"({now}", "+inf",
                                                  start=start, num=BATCH)
            for run_id in cast(list[str], runs):
                queued += await self._check_run(run_id, now, report, seen)
            if len(runs) < BATCH:
                break
            start += BATCH
        # The scripts keep the count; a run whose keys expired while queued would leave it
        # high for good, so each pass corrects it by the difference it found.
        if queued != counted_before:
            await self._correct(keys=[self.keys.queued_nodes(bucket)],
                                args=[queued - counted_before, int(self.settings.active_ttl_s)])

    async def _lane_watermarks(self) -> list[float]:
        """Each lane's watermark (:meth:`_queue_watermark`), read where the lanes are: the
        state Redis, the broker's own Redis (``ORCH_BROKER_URL=redis://``), or RabbitMQ,
        whose queues cannot be read without taking their messages: there a lane with
        messages ready counts nothing as lost this pass (its oldest may be a backlog's) and
        an empty one everything past the grace (as on Redis)."""
        lanes = depth.BrokerLanes(self.settings.broker_url, self.redis, self.broker_queues)
        if lanes.lists is None:
            counts = await lanes.depths()
            return [math.inf if not counts.get(queue) else -math.inf for queue in self.broker_queues]
        return [await self._queue_watermark(lanes, queue) for queue in self.broker_queues]

    async def _queue_watermark(self, lanes: depth.BrokerLanes, queue: str) -> float:
        """When the oldest node message still on the broker queue (one lane) was sent (Redis clock).

        kombu's Redis queue is FIFO (LPUSH, BRPOP from the other end), so a node of this
        lane sent before that time has left the queue: if nobody claimed it, a worker holds
        it or it is lost. A node sent later may still be waiting behind a backlog and is not
        sent again. ``inf`` for an empty queue; ``-inf`` when none of the oldest messages
        names a node with a sent time (then nothing of the lane counts as lost in transit
        this pass)."""
        raw = await lanes.oldest(queue, WATERMARK_SCAN)
        if not raw:
            return math.inf
        for message in reversed(raw):  # the oldest is at the end
            named = _node_of(message)
            if named is None:
                continue
            sent_at = await self.redis.hget(self.keys.sent(named[0]), named[1])
            if sent_at is not None:
                return float(sent_at)
        return -math.inf

    def _lost_in_transit(self, run_id: str, sent_at: float, now: float) -> bool:
        """A node of ``run_id`` sent at ``sent_at`` and not claimed by ``now``: is its message
        lost? (Compared with the watermark of the run's lane, where its message waits.)"""
        watermark = self._watermarks[lane_of(run_id, len(self._watermarks))]
        return now - sent_at >= self.undispatched_grace_s and sent_at < watermark

    async def _check_run(self, run_id: str, now: float, report: SweepReport,
                         seen: set[tuple[str, str]]) -> int:
        """Check one run; returns how many nodes wait on its queue."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(k.run(run_id), "status")
            pipe.hgetall(k.nodes(run_id))
            pipe.execute_command("SDIFF", k.ready(run_id), k.dispatched(run_id))  # (a cluster pipeline blocks sdiff())
            pipe.llen(k.queue(run_id))
            pipe.hgetall(k.sent(run_id))
            status, states, undispatched, queued, sent_raw = await pipe.execute()
        if status not in RunStatus.ACTIVE:
            return 0
        states = cast(dict[str, str], states)
        sent = {n: float(t) for n, t in cast(dict[str, str], sent_raw).items()}
        running = [n for n, s in states.items() if s == NodeStatus.RUNNING]
        if running:
            # Lease and status read together (one MULTI): a node that completed between
            # the read above and this one has no lease because it is done, not lost.
            async with self.redis.pipeline(transaction=True) as pipe:
                for node_id in running:
                    pipe.exists(k.lease(run_id, node_id))
                pipe.hmget(k.claims(run_id), running)
                pipe.hmget(k.claims(run_id), [f"token:{n}" for n in running])
                pipe.hmget(k.nodes(run_id), running)
                *held, claims, tokens, now_states = await pipe.execute()
            for node_id, has_lease, claimed, token, state in zip(running, held, claims, tokens, now_states,
                                                                  strict=True):
                if not has_lease and state == NodeStatus.RUNNING:
                    await self._lost_lease(run_id, node_id, _Lost(int(claimed or 0), int(token or 0),
                                                                  sent.get(node_id)), now, report)
        retrying = [n for n, s in states.items() if s == NodeStatus.RETRYING]
        if retrying:
            await self._overdue_retries(run_id, retrying, sent, now, report)
        # A node without a status is pending (create.lua writes none); ':' is a placeholder.
        lost = [n for n, t in sent.items()
                if not n.startswith(":") and states.get(n, NodeStatus.PENDING) == NodeStatus.PENDING
                and self._lost_in_transit(run_id, t, now)]
        if lost:
            log.warning("run %s: nodes %s were sent and never claimed (message lost?); sending them again",
                        run_id, lost)
            await self._resend(run_id, lost)
            report.resent += [(run_id, n) for n in lost]
        late = [n for n in undispatched if states.get(n, NodeStatus.PENDING) == NodeStatus.PENDING]
        due: list[str] = []
        for node_id in late:
            seen.add((run_id, node_id))
            first = self._first_seen.setdefault((run_id, node_id), now)
            if now - first >= self.undispatched_grace_s:
                due.append(node_id)
        if queued and not any(s in (NodeStatus.RUNNING, NodeStatus.RETRYING) for s in states.values()):
            # Queued nodes are taken by the completions of the run's running nodes and by
            # drain messages; with no node running, a lost drain would leave them waiting.
            stalled = (run_id, QUEUE_MARK)
            seen.add(stalled)
            if now - self._first_seen.setdefault(stalled, now) >= self.undispatched_grace_s:
                due += await self.store.take_queued(run_id, 1)
                self._first_seen.pop(stalled, None)
        if due:
            log.warning("run %s: ready nodes %s were never dispatched; dispatching", run_id, due)
            await self._resend(run_id, due)
            report.dispatched += [(run_id, n) for n in due]
            for node_id in due:
                self._first_seen.pop((run_id, node_id), None)
        return int(queued)

    async def _overdue_retries(self, run_id: str, retrying: list[str], sent: dict[str, float], now: float,
                               report: SweepReport) -> None:
        """A retry's delayed message lives in the worker that holds it until it is due
        (by that worker's clock); if that worker died, or its clock is behind, the retry
        would wait. A retry still not claimed ``undispatched_grace_s`` after it was due
        (Redis's clock) is sent again, and again after each grace while nobody claims it
        (a second delivery is harmless: the claim runs the attempt once)."""
        due_at = await self.redis.hmget(self.keys.claims(run_id), [f"retry_at:{n}" for n in retrying])
        overdue = []
        for node_id, raw in zip(retrying, due_at, strict=True):
            if raw is None or now - float(raw) < self.undispatched_grace_s:
                continue
            sent_at = sent.get(node_id)
            if sent_at is not None and not self._lost_in_transit(run_id, sent_at, now):
                continue  # sent again already; a worker has not claimed it yet
            overdue.append(node_id)
        if overdue:
            log.warning("run %s: retries of %s are overdue (their worker died?); sending them again",
                        run_id, overdue)
            await self._resend(run_id, overdue)
            report.requeued += [(run_id, n) for n in overdue]

    async def _lost_lease(self, run_id: str, node_id: str, lost: _Lost, now: float, report: SweepReport) -> None:
        if lost.claims > self.max_node_reclaims:
            await self._fail_lost(run_id, node_id, lost)
            report.lost.append((run_id, node_id))
            return
        if lost.sent_at is not None and not self._lost_in_transit(run_id, lost.sent_at, now):
            return  # sent again already; a worker has not claimed it yet
        log.warning("run %s node %s lost its worker (lease expired, claim %d); requeueing",
                    run_id, node_id, lost.claims)
        await self._resend(run_id, [node_id])
        report.requeued.append((run_id, node_id))

    async def _fail_lost(self, run_id: str, node_id: str, lost: _Lost) -> None:
        claims = lost.claims
        plan = await self.store.load_plan(run_id)
        node = plan.nodes.get(node_id)
        name = node.name if node else node_id
        node_type = node.node_type if node else ""
        error = {
            "type": "NodeExecutionError", "code": "worker_lost", "run_id": run_id,
            "node_id": node_id, "node_name": name,
            "message": (f"node {name!r} ({node_id}): worker lost {claims} times while running it; "
                        f"gave up after {self.max_node_reclaims} reclaims"),
        }
        event = NodeEvent(run_id=run_id, node_id=node_id, node_type=node_type, node_name=name,
                          event_type=EventType.ERROR,
                          data={"error": error, "recoverable": False, "mode": "stop"},
                          attempt=claims)
        log.error("run %s node %s: %s", run_id, node_id, error["message"])
        # Under the token of the claim whose worker was lost: refused if a worker claimed
        # the node since (it is not lost any more).
        await self.store.complete_node(run_id, node_id, NodeCompletion(
            status=NodeStatus.FAILED, error=error, stop_run=True, events=[event]), token=lost.token)

    async def _resend(self, run_id: str, node_ids: list[str]) -> None:
        """Stamp the nodes sent (Redis's clock), then send them: a send that fails or is
        lost is sent again after the grace, whichever sweeper looks next."""
        await self.store.mark_dispatched(run_id, node_ids)
        await self._send(run_id, node_ids)

    async def _send(self, run_id: str, node_ids: list[str]) -> None:
        sent = self.dispatch(run_id, node_ids)
        if inspect.isawaitable(sent):
            await sent

    # -- forever ------------------------------------------------------------------------

    async def run_forever(self, period_s: float | None = None, *, stop: asyncio.Event | None = None) -> None:
        """Sweep every ``period_s`` until ``stop`` is set (or the task is cancelled). Prefer
        ``stop``: it ends between passes, never inside one, so no Redis command is cut off
        half-way (see :func:`stop_sweeper`).

        The sweeper is what ends every run whatever dies, so nothing but a stop ends it: a
        failed pass is logged and the next one follows; a pass stuck past
        ``pass_timeout_s`` (a reply that never comes: a connection wedged without a socket
        timeout) is abandoned (its lock lapses); a cancellation raised inside a pass that
        nobody asked of this task (a library's own) is logged as a failed pass."""
        period = period_s if period_s is not None else sweep_period_s(self.settings)
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                async with asyncio.timeout(self.pass_timeout_s):
                    report = await self.sweep_once()
                if report.timed_out or report.requeued or report.lost or report.dispatched:
                    log.info("sweep: %s", report)
            except asyncio.CancelledError:
                this = asyncio.current_task()
                if this is None or this.cancelling():
                    raise  # a stop by cancellation
                log.error("a sweep pass was cancelled from inside, not by a stop; retrying in %.1fs", period)
            except TimeoutError:
                log.error("a sweep pass took longer than %.0fs; abandoned, retrying in %.1fs",
                          self.pass_timeout_s, period)
            except Exception:  # Redis down, a broker hiccup: try again next period
                log.exception("sweep failed; retrying in %.1fs", period)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period)


@dataclass
class _Lost:
    """A running node found without a lease."""

    claims: int  # times claimed
    token: int  # the fencing token of its latest claim
    sent_at: float | None  # when it was sent again, if it was and nobody claimed it since


def _node_of(message: str) -> tuple[str, str] | None:
    """(run id, node id) of a node task message on the broker queue (kombu's JSON envelope,
    Celery's protocol 2 headers; task id ``"{run_id}:{node_id}"``), else None."""
    try:
        headers = json.loads(message).get("headers") or {}
    except (ValueError, AttributeError):
        return None
    if not isinstance(headers, dict) or headers.get("task") != NODE_TASK:
        return None
    run_id, sep, node_id = str(headers.get("id", "")).partition(":")
    return (run_id, node_id) if sep and run_id and node_id else None


@dataclass
class RunningSweeper:
    task: asyncio.Task[None]
    stop: asyncio.Event
    owned: Any = None  # a Redis client the sweeper opened for itself, closed at stop


def start_sweeper(sweeper: Sweeper, period_s: float | None = None) -> RunningSweeper:
    """Run ``sweeper`` in a task of the running loop until :func:`stop_sweeper`."""
    stop = asyncio.Event()
    task = asyncio.get_running_loop().create_task(sweeper.run_forever(period_s, stop=stop),
                                                  name="orchestrator-sweeper")
    return RunningSweeper(task, stop)


async def stop_sweeper(running: RunningSweeper, timeout_s: float = 10.0) -> None:
    """Let the current pass finish, then end; cancel only a pass stuck past ``timeout_s``."""
    running.stop.set()
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(running.task, timeout_s)
    if running.owned is not None:
        await running.owned.aclose()


def _setting(settings: Settings, name: str, override: Any, default: Any) -> Any:
    if override is not None:
        return override
    return getattr(settings, name, default)


def sweep_period_s(settings: Settings) -> float:
    return settings.sweep_period_s


# -- hosting -------------------------------------------------------------------------------


def start_background_sweeper(app_state: Any, period_s: float | None = None) -> RunningSweeper:
    """Start a sweeper task on the running loop for an API app (``app.state``).

    Uses ``app_state.services`` (dispatch and settings; a Redis client of its own on
    ``Settings.redis_url``, else the app's run store); kept on ``app_state.sweeper``. Stop
    it with :func:`stop_background_sweeper`, which closes that client.
    """
    services = app_state.services

    from orchestrator.store.redis_store import RedisRunStore

    store = cast("RedisRunStore", services.run_store)
    owned = None
    if services.settings.redis_url and isinstance(store, RedisRunStore):
        # Its own client, created on this (the serving) loop: the sweeper shares no
        # loop-bound connection or pool lock with request handlers, whichever loop those
        # run on (see docs/architecture.md, "One event loop per app").
        owned = redis_client.client(services.settings.redis_url, decode_responses=True)
        store = RedisRunStore(owned, services.settings)
    sweeper = Sweeper(store, services.dispatch, services.settings)
    running = start_sweeper(sweeper, period_s)
    running.owned = owned
    app_state.sweeper = running
    return running


async def stop_background_sweeper(app_state: Any) -> None:
    running: RunningSweeper | None = getattr(app_state, "sweeper", None)
    if running is None:
        return
    await stop_sweeper(running)
    app_state.sweeper = None
