"""How one process reads runs' plans from Redis: each run's plan once, whatever the burst.

A run's plan never changes, so a process keeps the last ``PLAN_CACHE_SIZE`` it read (or
created) and reads one in single flight: however many of a run's nodes start at once on a
process that has not seen the run, one ``GET`` and one parse serve them all (and one plan
object, so the step function builds its graph once). A stored graph's run keeps only its
run id and labels in its own copy; the rest is the version's shared plan data, read once
per key and process. A start's node messages carry the plan's reference
(``orchestrator/store/plan_refs.py``): a run whose reference the process knows costs no
read at all.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.kernel.errors import RunNotFoundError
from orchestrator.kernel.graph import trusted_graph
from orchestrator.kernel.scheduling import RunPlan
from orchestrator.store.keys import Keys
from orchestrator.store.plan_refs import PlanRefs, ref_of

PLAN_CACHE_SIZE = 256  # runs' plans (and shared plan data's) one process keeps, least recently used dropped first


class RunPlans:
    """The plans of the runs this process works on, read through ``execute`` (one Redis
    command, batched with the store's others)."""

    def __init__(self, keys: Keys, execute: Callable[..., Awaitable[Any]]) -> None:
        self.keys = keys
        self._execute = execute
        self._plans: OrderedDict[str, RunPlan] = OrderedDict()
        self._loading: dict[str, asyncio.Future[RunPlan]] = {}  # plans being fetched (single flight)
        self._refs = PlanRefs()  # plans by content reference: a new run of a known one reads nothing
        self._shared: OrderedDict[str, RunPlan] = OrderedDict()  # plan data key -> its plan, as read

    def remember(self, plan: RunPlan) -> None:
        """Keep ``plan`` as its run's (the run's creator knows it without a read)."""
        self._plans[plan.run_id] = plan
        self._plans.move_to_end(plan.run_id)
        while len(self._plans) > PLAN_CACHE_SIZE:
            self._plans.popitem(last=False)

    async def load(self, run_id: str, ref: str = "") -> RunPlan:
        """The run's plan (module docstring); ``ref``: its reference, when a message carries one."""
        cached = self._plans.get(run_id)
        if cached is not None:
            self._plans.move_to_end(run_id)
            return cached
        if ref:
            plan = await self._refs.for_run(run_id, ref, self._load_run)
            self.remember(plan)
            return plan
        return await self._load_run(run_id)

    def ref(self, run_id: str) -> str:
        """The reference of the run's plan when this process holds it by reference ("" if
        not): what the messages it sends for the run carry."""
        plan = self._plans.get(run_id)
        return "" if plan is None else ref_of(plan)

    async def _load_run(self, run_id: str) -> RunPlan:
        """The run's own copy of its plan, read in single flight per run."""
        cached = self._plans.get(run_id)
        if cached is not None:
            return cached
        loading = self._loading.get(run_id)
        if loading is None:
            loading = asyncio.ensure_future(self._fetch(run_id))
            self._loading[run_id] = loading
            loading.add_done_callback(lambda done: self._loaded(run_id, done))
        return await asyncio.shield(loading)

    def _loaded(self, run_id: str, done: asyncio.Future[RunPlan]) -> None:
        self._loading.pop(run_id, None)
        if not done.cancelled():
            done.exception()  # retrieved here too: every waiter may have gone

    async def _fetch(self, run_id: str) -> RunPlan:
        raw = await self._execute("GET", self.keys.plan(run_id))
        if raw is None:
            raise RunNotFoundError("no such run (unknown or expired)", run_id=run_id)
        own = json.loads(raw)
        shared = own.pop("shared", None)
        if shared is None:
            plan = RunPlan.from_json(own)
        else:  # a stored graph's run: the rest is in its plan data, read once per key and process
            plan = (await self._shared_plan(run_id, shared)).for_run(run_id)
            plan.labels = own["labels"]
        self.remember(plan)
        return plan

    async def _shared_plan(self, run_id: str, key: str) -> RunPlan:
        """The plan (no run id, no labels) in shared plan data ``key``; its graph parsed once."""
        template = self._shared.get(key)
        if template is None:
            body = await self._execute("HGET", key, ":plan")
            if body is None:  # cannot outlive the run's own keys (see create.lua); but never a KeyError
                raise RunNotFoundError("no such run (its plan data expired)", run_id=run_id)
            template = RunPlan.from_json({**json.loads(body), "run_id": "", "labels": {}})
            template.parsed = trusted_graph(template.graph)
            self._shared[key] = template
        self._shared.move_to_end(key)
        while len(self._shared) > PLAN_CACHE_SIZE:
            self._shared.popitem(last=False)
        return template
