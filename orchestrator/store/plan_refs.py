"""Plan references: a run's plan named by its content, so a worker that already holds
a plan with the same content builds the run's own without reading it from Redis.

Every run stores its own copy of its plan (``{p}:run:{id}:plan``), and a worker reads
it once per run and process (``RedisRunStore.load_plan``): for a one-node run that read
is one of three round trips. Runs of one stored graph version (or of one graph's
content started ad hoc: ``runs.compiled``) share everything in their plans but the run
id, so a start computes :func:`plan_ref`, a digest of the plan's content and labels
(everything but the run id), and its node messages carry it (a third task argument,
``orchestrator/queue/messages.py``). A worker that holds a plan under that reference
derives the run's (``RunPlan.for_run``, the graph, nodes and parsed graph shared); one
that does not reads the run's copy, once per reference and process however many runs
of it arrive at once (:class:`PlanRefs`), and keeps it as the reference's plan.

Why a stale plan never runs: the reference is a digest of the content the starter
stored for that very run (a new graph version, a graph deleted and created again, other
labels: other content, another reference), and a message without one (a retry, a drain,
the sweeper's re-sends, a held run started later) reads the run's own copy as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from orchestrator.kernel.errors import RunNotFoundError
from orchestrator.kernel.graph import trusted_graph
from orchestrator.kernel.scheduling import RunPlan

PLAN_REFS_SIZE = 256  # plans by reference one process keeps (least recently used dropped first)
REF_CHARS = 32  # hex digits of sha256 in a reference (128 bits)
REF_MEMO = "plan_ref"  # a plan derived from a reference keeps it in its memo (shared with its template)


def ref_of(plan: RunPlan) -> str:
    """The reference ``plan`` was derived from ("" when it was not: read or compiled)."""
    return str(plan.memo.get(REF_MEMO, ""))


def plan_ref(plan: RunPlan) -> str:
    """The reference of ``plan``'s content: its body digested once per compiled plan (kept
    in ``plan.memo``, shared by every run :meth:`RunPlan.for_run` makes of it), then with
    the run's labels (a few bytes per start)."""
    body = plan.memo.get("content_digest")
    if body is None:
        raw = plan.to_json()
        raw.pop("run_id")
        raw.pop("labels")
        body = plan.memo["content_digest"] = hashlib.sha256(
            json.dumps(raw, separators=(",", ":"), sort_keys=True).encode()).hexdigest()
    labels = json.dumps(plan.labels, separators=(",", ":"), sort_keys=True)
    last = plan.memo.get("plan_ref_last")  # the runs of one plan mostly share their labels (traces off)
    if last is not None and last[0] == labels:
        return str(last[1])
    ref = hashlib.sha256(f"{body}{labels}".encode()).hexdigest()[:REF_CHARS]
    plan.memo["plan_ref_last"] = (labels, ref)
    return ref


class PlanRefs:
    """One process's plans by reference (see the module docstring), loaded in single
    flight: the first run of a reference reads its own plan, the runs arriving meanwhile
    wait for that read."""

    def __init__(self, size: int = PLAN_REFS_SIZE) -> None:
        self.size = size
        self._plans: OrderedDict[str, RunPlan] = OrderedDict()
        self._loading: dict[str, tuple[str, asyncio.Future[RunPlan]]] = {}

    def __contains__(self, ref: str) -> bool:
        return ref in self._plans

    async def for_run(self, run_id: str, ref: str, read: Callable[[str], Awaitable[RunPlan]]) -> RunPlan:
        """Run ``run_id``'s plan from the plan under ``ref``; ``read(run_id)`` reads a
        run's own copy (the first run of a reference, and a run whose reference's first
        run turned out to be gone)."""
        template = self._plans.get(ref)
        if template is not None:
            self._plans.move_to_end(ref)
        else:
            first, loading = self._loading.get(ref) or (run_id, None)
            if loading is None:
                loading = asyncio.ensure_future(self._load(run_id, ref, read))
                self._loading[ref] = (run_id, loading)
                loading.add_done_callback(lambda done: self._loaded(ref, done))
            try:
                template = await asyncio.shield(loading)
            except RunNotFoundError:
                if first == run_id:
                    raise
                return await read(run_id)  # the first run expired meanwhile: this one reads its own
        plan = template.for_run(run_id)
        plan.labels = dict(template.labels)
        return plan

    async def _load(self, run_id: str, ref: str, read: Callable[[str], Awaitable[RunPlan]]) -> RunPlan:
        plan = await read(run_id)
        if plan.parsed is None:  # parsed once per reference, shared by every run's plan
            plan.parsed = trusted_graph(plan.graph)
        template = plan.for_run("")
        template.labels = dict(plan.labels)
        template.memo = {**plan.memo, REF_MEMO: ref}  # its own: a starter's plan shares its memo with other labels
        self._plans[ref] = template
        self._plans.move_to_end(ref)
        while len(self._plans) > self.size:
            self._plans.popitem(last=False)
        return template

    def _loaded(self, ref: str, done: asyncio.Future[RunPlan]) -> None:
        self._loading.pop(ref, None)
        if not done.cancelled():
            done.exception()  # retrieved here too: every waiter may have gone
