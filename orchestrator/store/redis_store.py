"""The Redis run store: the distributed barrier behind the kernel's ``RunStore``.

Every state change that must be atomic is one Lua script (``orchestrator/store/lua/``), so any
number of workers can complete nodes of the same run concurrently:

* ``claim.lua``    the node's lease and fencing token, its claim count and attempt, its
  ``started`` event (a retry not due yet is answered ``early``);
* ``complete.lua`` ``scheduling.complete`` in Lua (countdown, live ports, skip
  propagation, remaining counter) + outputs, events, and the run's terminal state; a
  completion under a superseded token is refused; the nodes it hands over (a chain's
  next link, a fan-out's branches, older nodes taken from the run's queue) are claimed
  in the same call (one round trip per node, the claim's logic shared with ``claim.lua``
  in the prelude). The completions of one run made in one loop iteration go as one call
  (a group commit, ``group_commit.py``), applied in order, each answered on its own;
* ``finish.lua``   a forced terminal status (cancel, timeout, sweeper), closing the nodes
  that had not started (``not_run``) or were running (``cancelled``);
* ``resume.lua``   a waiting (suspended) node back to pending.

A suspension whose payload holds a ``wake`` (a timer) gets its entry in the due set of
``orchestrator/store/waits.py`` just before ``complete.lua`` stores it.

Per-node adjacency is stored at ``create_run`` in a hash (node -> JSON ``{out, required,
in_ports, type, name, rank}``, then on a second line what a completion needs to claim the
node: its part of the ``started`` event and what its step reads; ``creation.adjacency_fields``)
so the scripts never parse the plan. Runs of a stored
graph's version share it: one hash per compiled plan and bucket (``Keys.plan_data``, with
the initial pending counts and the plan body) that their records name, instead of a copy
per run (most of a 52-node start's Redis time and memory); such a run's own pending hash
counts arrivals, and no run stores 'pending' node states (a node without one is pending).
Each event is one
stream entry with a single field ``e`` (the NodeEvent JSON); a script call that appended
events ends with one ``PUBLISH`` of the last one's id on the run's notify channel (a
wake-up hint only). Every key carries a TTL:
``active_ttl_s`` while the run is active, ``retention_s`` once it ended. ``create.lua``
creates every key the nodes fill (and empty) with a placeholder member ``:`` (no node id
begins with it), so the TTL it sets holds for the run's life; a completion renews it only
once half of it has passed (one ``TTL`` read), not an ``EXPIRE`` per key per node.

One clock: every time the scripts store or compare (deadlines, retry due times, sent
times, event timestamps, ``created_at``/``finished_at``) is Redis's ``TIME``, read inside
the script; a host's clock never enters the run state. Event JSON is written with its
``timestamp`` first, so a script restamps it without decoding the event.

Storage budgets (``orchestrator/store/storage_budget.py``): the bytes a completion stores (its
outputs and events) and the events a node appends are counted against the run's and its
workspace's budgets before they are stored (a completion's inside ``complete.lua``: one
round trip); a completion that would pass one is stored
as the node's failure naming the budget instead, and its run stops. Appended events are
counted in chunks of ``EVENT_COUNT_CHUNK_BYTES`` (one script call per chunk, not per
token); a refused chunk fails the node through its executor. A Redis that refuses writes
because it is full (``maxmemory``, noeviction) raises :class:`StoreFullError` naming it.

The client must be created with ``decode_responses=True``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from orchestrator.errors import StorageBudgetError, StoreNotReplicatedError
from orchestrator.kernel.errors import OrchestratorError, RunNotFoundError
from orchestrator.kernel.json_text import json_value, utf8_len
from orchestrator.kernel.protocol import DataValue, EventType, NodeEvent
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.kernel.store import (
    ChainLink,
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
from orchestrator.settings import StoreSettings
from orchestrator.store import redis_client
from orchestrator.store.batching import CommandBatcher
from orchestrator.store.creation import RUN_PLACEHOLDER as _RUN_PLACEHOLDER
from orchestrator.store.creation import RUN_TEMPLATES as _RUN_TEMPLATES
from orchestrator.store.creation import (
    START_COUNTED_FROM,
    Completing,
    CreateExtra,
    StaleGraphError,
    StartGuard,
    created_reply,
    effect_json,
)
from orchestrator.store.creation import completed_json as _completed_json
from orchestrator.store.creation import dumps as _dumps
from orchestrator.store.creation import encoded as _encoded
from orchestrator.store.creation import event_json as _event_json
from orchestrator.store.creation import shared_plan as _shared
from orchestrator.store.creation import started_json as _started_json
from orchestrator.store.creation import started_parts as _started_parts
from orchestrator.store.group_commit import GroupCommit
from orchestrator.store.keys import Keys
from orchestrator.store.plan_reads import PLAN_CACHE_SIZE, RunPlans
from orchestrator.store.scripts import (
    SCRIPTS,
    budget_json,
    budget_limits,
    claim_args,
    claim_from,
    claims_from,
    count_published,
    lua_source,
    over_budget,
    ready_from,
    stored_bytes,
    with_taken,
)
from orchestrator.store.storage_budget import StorageBudget, store_full_errors
from orchestrator.store.waits import WaitTimers
from orchestrator.telemetry import metrics

SHARED_KEYS_KNOWN = 1024  # plan data keys one process remembers having seen in Redis
STATUS_MAX_AGE_S = 0.1  # a run status read is shared this long by the nodes polling it
EVENT_COUNT_CHUNK_BYTES = 64 * 1024  # appended events are counted against budgets this much at a time
DEFAULT_WORKSPACE = "default"

# The run-level event each forced terminal status appends.
_FINISH_EVENTS = {
    RunStatus.CANCELLED: EventType.RUN_CANCELLED,
    RunStatus.TIMED_OUT: EventType.RUN_TIMED_OUT,
    RunStatus.FAILED: EventType.RUN_FAILED,
    RunStatus.SUCCEEDED: EventType.RUN_COMPLETED,
}


@dataclass(frozen=True)
class Completion:
    """One completion as complete.lua takes it: its named fields' JSON (with its counted
    bytes and event count), its ``taken`` JSON ('' for none: ``_taken_text``), its texts
    (``_completion_args``) and its node's lease key."""

    named: str
    taken: str
    texts: list[str]
    lease: str


class RedisRunStore(RunStore):
    """``RunStore`` on one Redis (``redis.asyncio`` client with ``decode_responses=True``)."""

    def __init__(self, redis: Redis, settings: StoreSettings) -> None:
        if not redis_client.decodes(redis):
            raise OrchestratorError("RedisRunStore needs a Redis client with decode_responses=True")
        self.redis = redis
        self.settings = settings
        self.keys = Keys.of(self.settings)
        if redis_client.is_cluster(redis) != self.keys.tagged:
            raise OrchestratorError("RedisRunStore: a cluster client needs a cluster REDIS_URL "
                                    "(redis+cluster://...) in its settings, and only then")
        # A cluster wakes subscribers with sharded pub/sub (the channel's shard only); one
        # Redis with classic PUBLISH (Redis 7's SPUBLISH is not needed there).
        self._publish = "SPUBLISH" if self.keys.tagged else "PUBLISH"
        self._scripts = {name: redis.register_script(lua_source(name)) for name in SCRIPTS}
        # Commands of concurrent node steps share round trips (orchestrator/store/batching.py).
        self._batch = CommandBatcher(redis)
        self.plans = RunPlans(self.keys, self._batch.execute)
        self._event_templates: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._statuses: OrderedDict[str, tuple[float, asyncio.Future[Any]]] = OrderedDict()
        self.budget = StorageBudget(redis, self.settings, call=self._batch.script)
        self.timers = WaitTimers(redis, self.keys, self.settings.active_ttl_s)
        self._workspaces: OrderedDict[str, str] = OrderedDict()  # run id -> workspace (never changes)
        self._event_bytes: OrderedDict[str, int] = OrderedDict()  # run id -> appended bytes not yet counted
        self._keys_of: OrderedDict[str, tuple[tuple[str, ...], str]] = OrderedDict()  # run id -> its script keys
        self._shared_seen: OrderedDict[str, None] = OrderedDict()  # plan data keys known to exist (Keys.plan_data)
        self._taken: OrderedDict[str, str] = OrderedDict()  # complete.lua's ``taken`` JSON, by run, lease and data
        # A run's completions made in one loop iteration go as one complete.lua call.
        self._completions: GroupCommit[tuple[str, str, tuple[str, ...]], Completion] = GroupCommit(
            self._send_completions, size=lambda c: sum(map(len, c.texts)))

    @classmethod
    def from_url(cls, url: str, settings: StoreSettings) -> RedisRunStore:
        return cls(redis_client.client(url, decode_responses=True), settings)

    async def close(self) -> None:
        await self._batch.aclose()
        await self.redis.aclose()

    # -- key layout shared by every script (see lua/prelude.lua) ----------------------

    def all_run_keys(self, run_id: str) -> list[str]:
        """Every per-run key except leases (which carry the lease TTL), in the order
        lua/prelude.lua expects."""
        return self.keys.run_keys(run_id)

    async def _call(self, script: str, run_id: str, args: list[Any], extra_keys: Sequence[str] = (), *,
                    replicated: bool = False) -> Any:
        """Run a prelude script on the run's keys, then ``extra_keys`` (first the lease of the
        node it acts on, when it acts on one). ``replicated``: with ``redis_wait_replicas``
        set, the write must reach that many replicas in time, else
        :class:`StoreNotReplicatedError`."""
        run_keys, notify = self._script_keys(run_id)
        keys = [*run_keys, *extra_keys]
        s = self.settings
        # ARGV[5] the publish command of the wake-up hint (PUBLISH, or SPUBLISH on a cluster)
        head: list[Any] = [s.events_maxlen, notify, s.active_ttl_s, s.retention_s, self._publish]
        wanted = self.settings.redis_wait_replicas
        with store_full_errors():
            if not (replicated and wanted > 0):
                return await self._batch.script(self._scripts[script], keys, head + args)
            reply, acked = await self._batch.script_acked(self._scripts[script], keys, head + args, wanted,
                                                          self.settings.redis_wait_timeout_ms)
        if acked < wanted:
            raise StoreNotReplicatedError(
                f"run {run_id}: its state reached {acked} of the {wanted} replicas ORCH_REDIS_WAIT_REPLICAS asks "
                f"for within ORCH_REDIS_WAIT_TIMEOUT_MS ({self.settings.redis_wait_timeout_ms} ms); nothing was "
                "dispatched, start it again", run_id=run_id)
        return reply

    def _script_keys(self, run_id: str) -> tuple[tuple[str, ...], str]:
        """The keys every prelude script of a run gets (its run keys, its bucket's active
        runs and queued nodes) and its wake-up channel. Built once per run: a node step
        calls two scripts, and building these 18 strings each time was ~6% of a fan-out
        node's worker CPU."""
        cached = self._keys_of.get(run_id)
        if cached is None:
            bucket = self.keys.bucket(run_id)
            cached = ((*self.all_run_keys(run_id), self.keys.active_runs(bucket), self.keys.queued_nodes(bucket)),
                      self.keys.notify(run_id))
            self._keys_of[run_id] = cached
            while len(self._keys_of) > PLAN_CACHE_SIZE:
                self._keys_of.popitem(last=False)
        return cached

    def _lease(self, run_id: str, node_id: str) -> str:
        """``keys.lease(run_id, node_id)``, from the run's key kept with its script keys (the
        first of ``Keys.run_keys``): a completion names its own lease and its claims'."""
        return f"{self._script_keys(run_id)[0][0]}:lease:{node_id}"

    async def _workspace(self, run_id: str) -> str:
        """The run's workspace (its record's ``workspace``, else ``meta.workspace``), read once."""
        known = self._workspaces.get(run_id)
        if known is None:
            field, meta = await self._batch.execute("HMGET", self.keys.run(run_id), "workspace", "meta")
            known = field or (json.loads(meta).get("workspace") if meta else None) or DEFAULT_WORKSPACE
            self._know_workspace(run_id, known)
        return known

    def _know_workspace(self, run_id: str, workspace: str) -> None:
        self._workspaces[run_id] = workspace
        self._workspaces.move_to_end(run_id)
        while len(self._workspaces) > PLAN_CACHE_SIZE:
            self._workspaces.popitem(last=False)

    async def count_bytes(self, run_id: str, nbytes: int) -> None:
        """Count ``nbytes`` the run is about to store against its budgets (see the module
        docstring); StorageBudgetError when they would pass one."""
        if self.budget.enabled and nbytes > 0:
            workspace = await self._workspace(run_id)
            with store_full_errors():
                await self.budget.reserve(nbytes, workspace=workspace, run_id=run_id)

    def _templates(self, run_id: str) -> tuple[str, str]:
        """(run_completed, node event) JSON templates of a run: the same for every
        completion (the scripts fill in the node and stamp the time), so built once per run."""
        cached = self._event_templates.get(run_id)
        if cached is None:
            # One run's differ from another's only by the run id (the time is the script's):
            # built once per process, the run id put in by a string replace.
            quoted = _dumps(run_id)
            completed, node = _RUN_TEMPLATES
            cached = (completed.replace(_RUN_PLACEHOLDER, quoted, 1), node.replace(_RUN_PLACEHOLDER, quoted, 1))
            self._event_templates[run_id] = cached
            while len(self._event_templates) > PLAN_CACHE_SIZE:
                self._event_templates.popitem(last=False)
        return cached

    def _run_event(self, run_id: str, event_type: str, data: dict[str, Any] | None = None) -> str:
        return _event_json(NodeEvent(run_id=run_id, node_id="", node_type="", event_type=event_type,
                                     data=data))

    # -- RunStore ---------------------------------------------------------------------

    async def create_run(
        self, plan: RunPlan, record: RunRecord, *, deadline_s: float | None = None,
        guard: StartGuard | None = None, started: StartedNode | None = None,
    ) -> list[str]:
        """Store plan and record, mark start nodes ready and sent, append ``run_started``.
        Idempotent.

        ``deadline_s`` (default ``Settings.run_deadline_s``) from now by Redis's clock is
        the run's score in ``runs:active``, which the sweeper compares with the same clock
        to time runs out. ``created_at`` is Redis's time too (``record.created_at`` is not
        used: the caller's clock may be off). With ``guard``, the run is created only while
        the stored graph is the one the plan was compiled from, in the same script (else
        :class:`StaleGraphError`, nothing stored), and joins the graph's run index.

        The plan's encoded parts are built once per compiled plan (``plan.memo``, shared by
        every run :meth:`RunPlan.for_run` makes of it): a run adds only its id and labels.
        A guarded run (a stored graph's version) stores none of them: it names the plan
        data its plan's runs share in its bucket (``Keys.plan_data``), which this process
        sends only while it has not seen that key (create.lua returns -2, nothing stored,
        when the key is gone: sent again then, with the data).

        ``started`` (``RunStore.create_run``): create.lua stores the start node's
        completion with the run and writes its effect on the fresh run
        (``scheduling.start_effect``, worked out once per plan: ``creation.effect_json``), its
        bytes (from ``START_COUNTED_FROM`` on) counted within the storage budgets in the
        same script; past a budget it is not applied, and the start nodes are returned
        as without it.
        """
        run_id = plan.run_id
        if deadline_s is None:
            deadline_s = self.settings.run_deadline_s
        shared = _shared(plan) if guard is not None else None
        shared_key = "" if shared is None else self.keys.plan_data(run_id, shared.digest)
        shared_args = None if shared is None else (shared_key, shared.data)
        fields = {
            "status": RunStatus.RUNNING,
            "graph_id": record.graph_id,
            "graph_version": "" if record.graph_version is None else str(record.graph_version),
            "run_input": _dumps(record.run_input),
            "session_id": record.session_id or "",
            "meta": _dumps(record.meta),
            "remaining": str(len(plan.order)),
            "workspace": str(record.meta.get("workspace") or DEFAULT_WORKSPACE),
        }
        body, pending, adj, start = _encoded(plan)
        head = f'{{"run_id":{_dumps(run_id)},"labels":{_dumps(plan.labels)},'
        if shared_key:
            fields["shared"] = shared_key
            plan_json, pending, adj = f'{head}"shared":{_dumps(shared_key)}}}', "[]", "[]"
        else:
            plan_json = f"{head}{body[1:]}"
        flat_fields = [x for item in fields.items() for x in item]  # create.lua's variadic HSET
        args = [_dumps(flat_fields), plan_json, pending, adj, start, repr(float(deadline_s)), run_id,
                _started_json(plan, record.graph_id)]
        completing = None if started is None or started.node_id not in plan.start else \
            await self._start_completion(plan, started, fields["workspace"])
        if guard is not None and self.keys.tagged:
            created, nodes = await self._create_guarded(run_id, args, guard, CreateExtra(shared_args, completing))
        else:
            created, nodes = await self._create(run_id, [*args, "" if guard is None else guard.to_json()],
                                                () if guard is None else (guard.graph_key, guard.runs_key),
                                                CreateExtra(shared_args, completing))
        if created < 0:
            raise StaleGraphError(f"graph {record.graph_id!r} changed while the run was starting; start it again",
                                  run_id=run_id, graph_id=record.graph_id)
        self.plans.remember(plan)
        self._know_workspace(run_id, fields["workspace"])
        if created == 2 and started is not None:  # the start node's completion applied
            count_published(started.completion.events)
            return nodes
        return list(plan.start)

    async def _start_completion(self, plan: RunPlan, started: StartedNode, workspace: str) -> Completing:
        """create.lua's arguments for a start node's completion (``Completing``): the
        texts complete.lua would get for it, and its bytes' reservation within the
        storage budgets, as a worker's completion reserves them, from
        ``START_COUNTED_FROM`` bytes on (smaller, like a run input under
        ``runs.INPUT_COUNTED_FROM``, it is stored without a budget check: the check was
        a third of the script's work for the start's usual few hundred bytes)."""
        run_id, completion = plan.run_id, started.completion
        run_completed, node_template = self._templates(run_id)
        outputs = _dumps({port: dv.to_json() for port, dv in completion.outputs.items()})
        events = [_event_json(e) for e in completion.events]
        budget, budget_keys = "", list[Any]()
        nbytes = utf8_len(outputs) + sum(utf8_len(e) for e in events)
        if self.budget.enabled and nbytes >= START_COUNTED_FROM:
            limits, budget_keys = await self._reservation(nbytes, workspace, run_id)
            budget = budget_json(nbytes, limits)
        effect = effect_json(plan, started.node_id, frozenset(completion.outputs))
        head = f'{effect},"budget_keys":{len(budget_keys)}}}'
        return Completing([head, budget, outputs, run_completed, node_template, *events], budget_keys)

    async def _reservation(self, nbytes: int, workspace: str,
                           run_id: str) -> tuple[tuple[int, int, int], list[Any]]:
        """The storage budgets a script counts ``nbytes`` within (where they are stored,
        complete.lua's and create.lua's ``charge_budget``): the limits (workspace, run,
        when today's counter expires) and the workspace's day counters (keys, today's
        first)."""
        if self.budget.sums_others:
            await self.budget.refresh_others(workspace)
        _, keys, (_, ws_max, run_max, expire_at) = self.budget.request(nbytes, workspace=workspace, run_id=run_id)
        return (int(ws_max), int(run_max), int(expire_at)), keys

    async def _create(self, run_id: str, args: list[Any], extra_keys: Sequence[str],
                      extra: CreateExtra) -> tuple[int, list[str]]:
        """create.lua (``args`` up to the guard): its verdict, and the nodes its start
        node's completion made ready when it applied one (verdict 2). A run of shared
        plan data names its key (the last key) and sends the data only when this process
        has not seen the key yet, or when the script found it gone (-2, nothing stored:
        sent again with it). A start node's completion (``extra.completing``) follows the
        shared data's arguments; its budget keys come before the shared key."""
        tail: list[Any] = [] if extra.completing is None else extra.completing.args
        keys = (*extra_keys, *(() if extra.completing is None else extra.completing.budget_keys))
        shared = extra.shared
        if shared is None:
            return created_reply(await self._call("create", run_id, [*args, "", "", *tail], extra_keys=keys,
                                             replicated=True))
        key, data = shared
        send = key not in self._shared_seen
        while True:
            created, nodes = created_reply(await self._call("create", run_id, [*args, "1", data if send else "", *tail],
                                                       extra_keys=(*keys, key), replicated=True))
            if created != -2 or send:
                break
            send = True
        if created >= 0:
            self._shared_seen[key] = None
            self._shared_seen.move_to_end(key)
            while len(self._shared_seen) > SHARED_KEYS_KNOWN:
                self._shared_seen.popitem(last=False)
        return created, nodes

    async def _create_guarded(self, run_id: str, args: list[Any], guard: StartGuard,
                              extra: CreateExtra) -> tuple[int, list[str]]:
        """create.lua's guarded start on a cluster, where the graph's keys and the run's
        bucket are different slots: three steps, each atomic on its slot.

        1. On the graph's slot: the guard's check, and the run joins the graph's run index
           (refused: -1, nothing stored).
        2. On the run's bucket: create.lua without the guard.
        3. On the graph's slot: the graph still exists as it was (same creation time and
           workspace, not below the version). If it was deleted (or deleted and created
           again) between 1 and 3, the run is ended ``cancelled`` at once and -1 returned.

        A new version saved between 1 and 2 is harmless: the run is the same as one started
        just before that save (its plan is a snapshot). A deletion between 1 and 2 (its
        cancellation of the graph's runs finds no record yet) is caught by step 3, so no
        run of a deleted graph goes on running; an index entry left by a refused start
        names a run that does not exist and is trimmed with the index."""
        check = self._scripts["start_guard"]
        guard_keys = [guard.graph_key, guard.runs_key]
        if int(await self._batch.script(check, guard_keys, [guard.to_json(), run_id, "1"])) < 0:
            return -1, []
        created, nodes = await self._create(run_id, [*args, ""], (), extra)
        if created > 0 and int(await self._batch.script(check, guard_keys, [guard.to_json(), run_id, "0"])) < 0:
            await self.finish_run(run_id, RunStatus.CANCELLED,
                                  {"type": "StaleGraph", "message": "the graph was deleted while the run started"})
            return -1, []
        return created, nodes

    async def load_plan(self, run_id: str, ref: str = "") -> RunPlan:
        """The run's plan, read once per run and process (``orchestrator/store/plan_reads.py``);
        ``ref``: its reference, which a start's node messages carry."""
        return await self.plans.load(run_id, ref)

    def plan_ref(self, run_id: str) -> str:
        """The reference of the run's plan when this process holds it by reference ("" if
        not): what the messages it sends for the run carry."""
        return self.plans.ref(run_id)

    async def run_status(self, run_id: str) -> str:
        """The run's status. Every node of a run polls it while running (cancellation), so
        in one process concurrent callers share one read, and a read younger than
        ``STATUS_MAX_AGE_S`` is reused: one HGET per run per period, not one per node."""
        now = time.monotonic()
        cached = self._statuses.get(run_id)
        if cached is None or (cached[1].done() and now - cached[0] > STATUS_MAX_AGE_S):
            cached = (now, asyncio.ensure_future(self._batch.execute("HGET", self.keys.run(run_id), "status")))
            self._statuses[run_id] = cached
            self._statuses.move_to_end(run_id)
            while len(self._statuses) > PLAN_CACHE_SIZE:
                self._statuses.popitem(last=False)
        status = await asyncio.shield(cached[1])
        if status is None:
            raise RunNotFoundError("no such run (unknown or expired)", run_id=run_id)
        return str(status)

    async def get_run(self, run_id: str) -> RunRecord:
        h = cast(dict[str, str], await self.redis.hgetall(self.keys.run(run_id)))
        if not h:
            raise RunNotFoundError("no such run (unknown or expired)", run_id=run_id)
        return RunRecord(
            run_id=run_id,
            status=h["status"],
            graph_id=h.get("graph_id", ""),
            graph_version=int(h["graph_version"]) if h.get("graph_version") else None,
            created_at=float(h.get("created_at", 0.0)),
            finished_at=float(h["finished_at"]) if h.get("finished_at") else None,
            error=json.loads(h["error"]) if h.get("error") else None,
            run_input=json.loads(h["run_input"]) if "run_input" in h else None,
            session_id=h.get("session_id") or None,
            meta=json.loads(h["meta"]) if h.get("meta") else {},
        )

    async def claim_node(self, run_id: str, request: ClaimRequest, *, worker_id: str) -> Claim:
        args = claim_args(request)
        return self._claim(run_id, await self._call("claim", run_id, [_dumps(args)],
                                                    [self.keys.lease(run_id, request.node_id)]))

    def _claim(self, run_id: str, reply: list[Any], seen: dict[str, str] | None = None) -> Claim:
        """A claim from the reply of lua/prelude.lua ``claim`` (``scripts.claim_from``); its
        run's workspace is kept, which the budgets of its completion need."""
        claim = claim_from(reply, seen)
        if claim.workspace:
            self._know_workspace(run_id, claim.workspace)
        return claim

    async def renew_leases(self, run_id: str, tokens: Mapping[str, int], *, lease_s: float) -> list[str]:
        if not tokens:
            return []
        keys = [self.keys.claims(run_id), *(self.keys.lease(run_id, node_id) for node_id in tokens)]
        args: list[Any] = [max(1, int(lease_s * 1000))]
        for node_id, token in tokens.items():
            args += [node_id, str(token)]
        superseded = list(await self._batch.script(self._scripts["renew"], keys, args))
        if superseded:
            metrics.STALE_REFUSED.labels(action="renew").inc(len(superseded))
        return superseded

    async def read_outputs(
        self, run_id: str, node_ids: list[str]
    ) -> dict[str, dict[str, DataValue]]:
        if not node_ids:
            return {}
        raw = await self.redis.hmget(self.keys.outputs(run_id), node_ids)
        return {
            nid: {port: DataValue.from_json(v) for port, v in json_value(blob).items()}
            for nid, blob in zip(node_ids, raw, strict=True)
            if blob is not None
        }

    async def append_event(self, event: NodeEvent, *, token: int | None = None) -> str:
        """Append to an existing run's log; returns the stream id ("" if the run is gone,
        or the fenced append was refused: see ``RunStore.append_event``).
        Raises StorageBudgetError when the run's events pass a storage budget."""
        return (await self.append_events([event], token=token))[0]

    async def append_events(self, events: Sequence[NodeEvent], *, token: int | None = None) -> list[str]:
        """``append_event`` for events of one run and node, in order, in one call of
        append.lua: their ids, or "" for each when nothing was appended. Their bytes are
        counted against the budgets in chunks (``EVENT_COUNT_CHUNK_BYTES``)."""
        if not events:
            return []
        texts = [_event_json(event) for event in events]
        run_id = events[0].run_id
        pending = self._event_bytes.pop(run_id, 0) + sum(utf8_len(text) for text in texts)
        if pending >= EVENT_COUNT_CHUNK_BYTES:
            await self.count_bytes(run_id, pending)
        else:
            self._event_bytes[run_id] = pending
            while len(self._event_bytes) > PLAN_CACHE_SIZE:
                self._event_bytes.popitem(last=False)
        fence = "" if token is None else str(token)
        ids = [str(i) for i in await self._call("append", run_id, [events[0].node_id, fence, *texts])]
        if not ids:
            return [""] * len(events)
        count_published(events)
        return ids

    async def complete_node(
        self, run_id: str, node_id: str, completion: NodeCompletion, *, take: Take | None = None,
        token: int | None = None,
    ) -> Ready:
        """Apply ``completion`` in one script call, which also counts its bytes against the
        storage budgets (see the module docstring): a refusal comes back instead of being
        applied, and the node's failure naming the budget is stored in a second call. With
        ``take.claim_taken`` the same call claims each node it hands over (``claim_nodes``
        in lua/prelude.lua), from its claim data (``creation.adjacency_fields``)."""
        wake = (completion.payload or {}).get("wake")
        if completion.status == NodeStatus.WAITING and isinstance(wake, dict):
            await self.timers.schedule(run_id, node_id, wake)  # first: a crash leaves no untimed wait
        max_nodes = None if take is None else take.max_nodes
        args, texts = self._completion_args(run_id, node_id, completion, max_nodes, token)
        taken = "" if take is None or take.claim_taken is None else self._taken_text(run_id, take.claim_taken)
        nbytes = stored_bytes(texts) + self._event_bytes.pop(run_id, 0)
        limits, workspace, budget_keys = "", "", list[Any]()
        if self.budget.enabled and nbytes > 0:
            workspace = self._workspaces.get(run_id) or await self._workspace(run_id)  # known after its claim
            reserved, budget_keys = await self._reservation(nbytes, workspace, run_id)
            limits, args["bytes"] = budget_limits(reserved), nbytes
        node_lease = self._lease(run_id, node_id)
        reply = await self._completions.submit((run_id, limits, tuple(budget_keys)),
                                               Completion(_dumps(args), taken, texts, node_lease))
        if reply[0] == "budget":
            try:
                self.budget.check(str(reply[1]), int(reply[2]), nbytes, workspace=workspace, run_id=run_id)
            except StorageBudgetError as exc:
                completion = over_budget(run_id, node_id, completion, exc)
            args, texts = self._completion_args(run_id, node_id, completion, max_nodes, token)
            reply = await self._completions.submit((run_id, "", ()), Completion(_dumps(args), "", texts, node_lease))
        ready = self._ready(run_id, reply)
        if not ready.stale:
            count_published(completion.events)
        return ready

    async def _send_completions(self, key: tuple[str, str, tuple[str, ...]], group: list[Completion]) -> list[Any]:
        """One complete.lua call for ``group``, completions of one run made in one loop
        iteration whose budget reservations have the same limits and day counters
        (``key``): each one's reply, in order (``_completions``, ``group_commit.py``)."""
        run_id, limits, budget_keys = key
        shared = group[0].taken if all(c.taken == group[0].taken for c in group[1:]) else ""
        named = [with_taken(c.named, "true" if shared else c.taken) for c in group]
        texts = [text for c in group for text in c.texts]
        return list(await self._call("complete", run_id, ["[" + ",".join(named) + "]", shared,
                                                          *self._shared_texts(run_id, limits), *texts],
                                     [group[0].lease, *budget_keys]))

    def _shared_texts(self, run_id: str, limits: str) -> list[str]:
        """What the completions of one complete.lua or complete_chain.lua call share
        (completion.lua's ``shared_texts`` reads them), sent once for them all: the
        run id, the lease keys without the node id, the budget limits (or '') and the
        run's completed event and node event templates."""
        run_completed, node_template = self._templates(run_id)
        return [run_id, self._lease(run_id, ""), limits, run_completed, node_template]

    def _ready(self, run_id: str, reply: list[Any]) -> Ready:
        """A ``Ready`` from complete.lua's reply (``scripts.ready_from``)."""
        return ready_from(reply, lambda granted, seen: self._claim(run_id, granted, seen))

    async def complete_chain(self, run_id: str, links: Sequence[ChainLink], *, take: Take,
                             token: int | None = None) -> Ready:
        """``RunStore.complete_chain`` in one script call (lua/complete_chain.lua): each
        link's completion as ``complete_node`` sends it, and one budget reservation for the
        bytes of them all. A refusal by a budget stores the first link alone, as
        ``complete_node`` does (it stores the node's failure naming the budget when its own
        bytes pass it); the others then run as nodes handed over."""
        if len(links) == 1 or take.claim_taken is None:
            return await super().complete_chain(run_id, links, take=take, token=token)
        named: list[dict[str, Any]] = []
        texts: list[str] = []
        appended = nbytes = self._event_bytes.pop(run_id, 0)
        for i, link in enumerate(links):
            args, own = self._completion_args(run_id, link.node_id, link.completion, take.max_nodes,
                                              token if i == 0 else None)
            nbytes += stored_bytes(own)
            named.append(args)
            texts += own
        limits, budget_keys = "", list[Any]()
        if self.budget.enabled and nbytes > 0:  # the whole chain's bytes, counted with its first link
            workspace = self._workspaces.get(run_id) or await self._workspace(run_id)
            reserved, budget_keys = await self._reservation(nbytes, workspace, run_id)
            limits, named[0]["bytes"] = budget_limits(reserved), nbytes
        taken = self._taken_text(run_id, take.claim_taken)
        items = [with_taken(_dumps(named[0]), taken), *(_dumps(args) for args in named[1:])]
        reply = await self._call("complete_chain", run_id, ["[" + ",".join(items) + "]",
                                                            *self._shared_texts(run_id, limits), *texts],
                                 [self._lease(run_id, links[0].node_id), *budget_keys])
        applied, last = int(reply[0]), reply[1]
        if applied == 0 and last[0] == "budget":  # stored as complete_node stores a refusal
            self._event_bytes[run_id] = self._event_bytes.get(run_id, 0) + appended  # counted there
            alone = await self.complete_node(run_id, links[0].node_id, links[0].completion, take=take, token=token)
            alone.applied = 0 if alone.stale else 1
            return alone
        ready = self._ready(run_id, last)
        count_published(event for link in links[:applied] for event in link.completion.events)
        ready.applied = applied
        return ready

    def _taken_text(self, run_id: str, taken: TakenClaims) -> str:
        """complete.lua's ``taken`` as JSON text: how it claims the nodes it hands over, with
        each node's claim data (``creation.adjacency_fields``): the lease (its key is
        ``lease`` and the node id: the run's hash tag, so the run's slot), and the
        ``started`` event's JSON around the node's ids. Encoded once per run, data and
        lease length: its two pieces of event JSON are escaped whole in every encoding,
        which was most of the time of encoding a completion's arguments."""
        lease_ms, data = max(1, int(taken.lease_s * 1000)), _dumps(taken.started_data)
        key = f"{run_id}\n{lease_ms}\n{data}"
        cached = self._taken.get(key)
        if cached is None:
            head, tail = _started_parts(run_id, data)
            cached = self._taken[key] = _dumps({"lease": self._lease(run_id, ""), "head": head, "tail": tail,
                                                "lease_ms": lease_ms})
            while len(self._taken) > PLAN_CACHE_SIZE:
                self._taken.popitem(last=False)
        return cached

    def _completion_args(self, run_id: str, node_id: str, completion: NodeCompletion,
                         take: int | None, token: int | None) -> tuple[dict[str, Any], list[str]]:
        """complete.lua's arguments for ``completion``: the named fields (one JSON object,
        without those at their default: absent is null or false to the script) and the JSON
        texts the script stores or appends as they are, each its own argument (in the order
        of ``COMPLETE_TEXTS``, then the completion's events): inside the object they would
        be encoded a second time here and decoded again in the script."""
        waiting = completion.status == NodeStatus.WAITING
        args: dict[str, Any] = {"node": node_id, "status": completion.status, "live": sorted(completion.outputs),
                                "events": len(completion.events)}  # how many of the texts are its events
        for name, value in (("stop_run", completion.stop_run), ("next_attempt", completion.next_attempt),
                            ("retry_delay_s", completion.retry_delay_s), ("take", take), ("token", token)):
            if value is not None and value is not False:
                args[name] = value
        outputs = _dumps({port: dv.to_json() for port, dv in completion.outputs.items()})
        texts = [
            outputs,
            _dumps(completion.payload) if completion.payload else "{}",  # payload
            _dumps(completion.error) if completion.error is not None else "",  # error
            self._run_event(run_id, EventType.RUN_FAILED, {"status": RunStatus.FAILED, "error": completion.error})
            if completion.stop_run else "",  # run_failed
            self._run_event(run_id, EventType.RUN_WAITING, {"node_id": node_id, "payload": completion.payload or {}})
            if waiting else "",  # run_waiting
            # A completed event shows the outputs it stores: their text is written in, not encoded again.
            *(_completed_json(e, completion.outputs, outputs) if e.event_type == EventType.COMPLETED
              else _event_json(e) for e in completion.events),
        ]
        return args, texts

    async def take_queued(self, run_id: str, max_nodes: int) -> list[str]:
        if max_nodes <= 0:
            return []
        return list(await self._call("take", run_id, [max_nodes]))

    async def take_claimed(self, run_id: str, max_nodes: int, claim_taken: TakenClaims) -> Ready:
        """take.lua with complete.lua's ``taken`` (``_taken_text``): one call takes and claims."""
        if max_nodes <= 0:
            return Ready()
        granted, *nodes = await self._call("take", run_id, [max_nodes, self._taken_text(run_id, claim_taken)])
        return Ready(list(nodes), claims=claims_from(granted, lambda one, seen: self._claim(run_id, one, seen)))

    async def queue_length(self, run_id: str) -> int:
        return int(await self._batch.execute("LLEN", self.keys.queue(run_id)))

    async def mark_dispatched(self, run_id: str, node_ids: list[str]) -> None:
        if node_ids:
            await self._call("dispatched", run_id, list(node_ids))

    async def seed_outputs(self, run_id: str, outputs: dict[str, dict[str, DataValue]]) -> None:
        """Store outputs of nodes this run reuses instead of running (a rerun's prefix).

        Call after ``create_run`` and before dispatching; existing entries are kept."""
        args: list[Any] = []
        for node_id, ports in outputs.items():
            args += [node_id, _dumps({port: dv.to_json() for port, dv in ports.items()})]
        if args:
            # Seeded outputs are stored like completions (a test step's come from the caller):
            # they count toward the run's and workspace's budgets (StorageBudgetError).
            await self.count_bytes(run_id, sum(len(a.encode()) for a in args[1::2]))
            await self._call("seed", run_id, args)

    async def finish_run(
        self, run_id: str, status: str, error: dict[str, Any] | None = None
    ) -> bool:
        """Force ``status`` (terminal). False if the run already ended or is unknown."""
        if status not in RunStatus.TERMINAL:
            raise OrchestratorError(
                f"finish_run needs a terminal status, not {status!r}", run_id=run_id
            )
        event = self._run_event(run_id, _FINISH_EVENTS[status], {"status": status, "error": error})
        args = [status, _dumps(error) if error is not None else "", run_id, event,
                self._templates(run_id)[1]]
        return bool(await self._call("finish", run_id, args))

    async def resume_node(self, run_id: str, node_id: str, resume_input: Any) -> bool:
        event = self._run_event(run_id, EventType.RUN_RESUMED, {"node_id": node_id})
        args = [node_id, _dumps(resume_input), event]
        return bool(await self._call("resume", run_id, args, [self.keys.lease(run_id, node_id)]))

    async def get_resume(self, run_id: str, node_id: str) -> dict[str, Any] | None:
        raw = await self.redis.hget(self.keys.resume(run_id), node_id)
        return None if raw is None else dict(json.loads(raw))

    # -- reads for the API and CLI ----------------------------------------------------

    async def read_events(
        self, run_id: str, after: str = "0-0", count: int = 1000, block_ms: int | None = None
    ) -> list[tuple[str, NodeEvent]]:
        """Events after stream id ``after``, oldest first; waits up to ``block_ms`` if none."""
        streams: dict[Any, Any] = {self.keys.events(run_id): after}
        reply: Any = await self.redis.xread(streams, count=count, block=block_ms)
        out: list[tuple[str, NodeEvent]] = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                out.append((entry_id, NodeEvent.from_json(json_value(fields["e"]))))
        return out

    async def node_states(self, run_id: str) -> dict[str, str]:
        """Every planned node's status: create.lua writes none, so a node without one is
        pending (the hash is never empty while the run exists: its ':' placeholder)."""
        states = cast(dict[str, str], await self.redis.hgetall(self.keys.nodes(run_id)))
        if not states:
            return {}
        try:
            order = (await self.load_plan(run_id)).order
        except RunNotFoundError:  # expired between the two reads: what is left
            return {n: v for n, v in states.items() if not n.startswith(":")}
        return {n: states.get(n, NodeStatus.PENDING) for n in order}


    async def stale_refusals(self, run_id: str) -> int:
        """Completions, renewals and event appends refused for a superseded token."""
        return int(await self.redis.hget(self.keys.claims(run_id), ":stale") or 0)

    async def suspended_payload(self, run_id: str, node_id: str) -> dict[str, Any] | None:
        raw = await self.redis.hget(self.keys.suspend(run_id), node_id)
        return None if raw is None else dict(json.loads(raw))


def new_run_id() -> str:
    return uuid.uuid4().hex
