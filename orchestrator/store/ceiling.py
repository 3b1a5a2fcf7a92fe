"""A ceiling of nodes in flight per workspace, enforced across the cluster through Redis
with leases (``lua/ceiling.lua``, one script call per enter or leave).

Fair share between workspaces is the lanes' job (``orchestrator/queue/lanes.py``): each
workspace's messages are taken in turn. The ceiling bounds what one workspace may run at
once, whatever the lanes: ``ORCH_WORKSPACE_MAX_IN_FLIGHT`` (0: none) for every workspace,
``ORCH_WORKSPACE_LIMITS='{"acme": {"max_in_flight": 500}}'`` per workspace (0 there: none
for that workspace). The same setting gives a workspace a ``weight`` (its number of lanes:
:func:`weights`, ``orchestrator/store/lanes.py``).

* **Enter** (before the node's own limits, after its claim): a unit is granted while the
  workspace holds fewer than its ceiling; the holder is the node execution
  (``run:node:attempt``), so a redelivered execution takes its own unit again, never a
  second one. A refused node is rescheduled holding nothing (the step's WaitRequested:
  status ``retrying``, a ``throttled`` event with ``source`` ``workspace_ceiling``); it is
  told to come back after about the time the nodes waiting before it need (the average
  hold times the waiters over the ceiling, 0.05-5 s).
* **Leases**: a unit expires ``lease_s`` after its last renewal; each process renews the
  units it holds in one call per workspace every third of that (:class:`CeilingLeases`), so
  a SIGKILLed worker's units come back to the workspace when their leases lapse, and a unit
  that lapsed (its process stalled) is not taken back by the renewal (``ZADD XX``).
* **Leave** (the execution ended, whatever the outcome): the unit is given back at once.

Keys: ``{p}:inflight:<workspace>`` (holders), ``:w`` (waiters), ``:s`` (start times, the
average hold), expiring after a day of idleness.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from orchestrator.kernel.limits import LimitDecision
from orchestrator.settings import WorkerSettings
from orchestrator.settings.worker import parse_workspace_limits
from orchestrator.store.keys import Keys
from orchestrator.store.limits import UNAVAILABLE, UNAVAILABLE_WAIT_S
from orchestrator.telemetry import flow_metrics

log = logging.getLogger("orchestrator.store.ceiling")

_SOURCE = (Path(__file__).parent / "lua" / "ceiling.lua").read_text()
TTL_S = 86400.0
MIN_WAIT_S = 0.05
MAX_WAIT_S = 5.0


def ceilings(settings: WorkerSettings) -> tuple[int, dict[str, int]]:
    """(the default ceiling, the per-workspace ones) from the settings; a malformed
    ``ORCH_WORKSPACE_LIMITS`` raises ValueError naming the setting and the entry."""
    table = parse_workspace_limits(settings.workspace_limits)
    per = {ws: entry["max_in_flight"] for ws, entry in table.items() if "max_in_flight" in entry}
    return settings.workspace_max_in_flight, per


def weights(settings: WorkerSettings) -> dict[str, int]:
    """The workspaces with a ``weight`` (lanes of their own, ``orchestrator/store/lanes.py``);
    every other workspace weighs 1."""
    return {ws: entry["weight"] for ws, entry in parse_workspace_limits(settings.workspace_limits).items()
            if "weight" in entry}


class WorkspaceCeiling:
    """The kernel's ``Ceiling`` over Redis (see the module docstring). ``build`` answers
    None when no workspace has a ceiling (the step then pays nothing)."""

    def __init__(self, redis: Redis, keys: Keys, *, default: int, per_workspace: Mapping[str, int],
                 lease_s: float) -> None:
        self.redis = redis
        self.keys = keys
        self.default = default
        self.per_workspace = dict(per_workspace)
        self.lease_s = lease_s
        self._script = redis.register_script(_SOURCE)
        self.leases = CeilingLeases(self)

    @classmethod
    def build(cls, redis: Redis, keys: Keys, settings: WorkerSettings) -> WorkspaceCeiling | None:
        default, per = ceilings(settings)
        if not default and not any(per.values()):
            return None
        return cls(redis, keys, default=default, per_workspace=per, lease_s=settings.node_lease_s)

    def ceiling_of(self, workspace: str) -> int:
        """The ceiling of ``workspace`` (0: none)."""
        return self.per_workspace.get(workspace, self.default)

    async def call(self, workspace: str, args: dict[str, Any]) -> list[int]:
        stem = self.keys.inflight(workspace)
        reply = await self._script(keys=[stem, f"{stem}:w", f"{stem}:s"], args=[json.dumps({
            **args, "lease_ms": int(self.lease_s * 1000), "ttl_s": TTL_S,
            "min_wait_ms": int(MIN_WAIT_S * 1000), "max_wait_ms": int(MAX_WAIT_S * 1000)})])
        return [int(x) for x in reply]

    async def enter(self, workspace: str, holder: str) -> LimitDecision:
        ceiling = self.ceiling_of(workspace)
        if not ceiling:
            return LimitDecision(0.0)
        key = f"workspace:{workspace}:in_flight"
        try:
            wait_ms, in_flight, waiting = await self.call(workspace, {"op": "enter", "holder": holder,
                                                                      "max": ceiling})
        except UNAVAILABLE:  # the ceiling cannot be asked: wait and ask again, never run blindly
            return LimitDecision(UNAVAILABLE_WAIT_S, key)
        flow_metrics.ceiling(workspace, in_flight, waiting, wait_ms / 1000)
        if wait_ms > 0:
            return LimitDecision(wait_ms / 1000 * random.uniform(0.75, 1.25), key)  # jitter
        self.leases.hold(workspace, holder)
        return LimitDecision(0.0, key)

    async def leave(self, workspace: str, holder: str) -> None:
        if not self.ceiling_of(workspace) or not self.leases.drop(workspace, holder):
            return
        try:
            _, in_flight, _ = await self.call(workspace, {"op": "leave", "holder": holder})
        except RedisError as exc:  # the unit's lease lapses instead
            log.warning("workspace %s: unit of %s not given back (%s); its lease lapses", workspace, holder,
                        type(exc).__name__)
            return
        flow_metrics.ceiling(workspace, in_flight, None, None)


class CeilingLeases:
    """The units this process holds, renewed in one call per workspace every third of the
    lease by one task on the loop (started with the first unit, ended with the last)."""

    def __init__(self, ceiling: WorkspaceCeiling) -> None:
        self.ceiling = ceiling
        self.held: dict[str, set[str]] = {}
        self._task: asyncio.Task[None] | None = None

    def hold(self, workspace: str, holder: str) -> None:
        self.held.setdefault(workspace, set()).add(holder)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._renew_forever())

    def drop(self, workspace: str, holder: str) -> bool:
        """Forget ``holder``'s unit; whether this process held it."""
        holders = self.held.get(workspace)
        if holders is None or holder not in holders:
            return False
        holders.discard(holder)
        if not holders:
            del self.held[workspace]
        return True

    async def _renew_forever(self) -> None:
        while self.held:
            await asyncio.sleep(self.ceiling.lease_s / 3)
            for workspace, holders in list(self.held.items()):
                try:
                    await self.ceiling.call(workspace, {"op": "renew", "holders": sorted(holders)})
                except RedisError as exc:  # tried again next tick; the lease outlives two misses
                    log.warning("workspace %s: ceiling leases not renewed (%s)", workspace, type(exc).__name__)
