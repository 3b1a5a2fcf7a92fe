"""Lanes assigned to workspaces, so workspaces share the broker's lanes evenly, never by chance.

A run's lane is the first two hex digits of its id modulo ``ORCH_LANES``
(``orchestrator/queue/lanes.py``). Hashing the workspace into those digits puts two of 8
active workspaces on one lane about half the time, and a flood in one then holds its
lane-mate back. Here a workspace is **assigned** its lanes the first time it starts a run:

* **Least loaded**: the lanes with the fewest other active workspaces; ties are taken from
  the workspace's hash lane (``crc32(workspace) mod 256 mod lanes``) onward, so workspaces
  spread, and a lone workspace keeps the lane hashing gave it. With no more active
  workspaces than lanes, no two share one: the workers' turn between non-empty lanes is a
  turn between workspaces. Beyond that they share evenly (raise ``ORCH_LANES`` then).
* **Weight**: a workspace of ``weight`` w (``ORCH_WORKSPACE_LIMITS``, ``store/ceiling.py``)
  is given ``min(w, lanes)`` lanes and its runs take them in turn, so a saturated cluster
  serves it w turns per rotation. Default 1.
* **Kept while active**: each start touches the workspace; idle for ``ORCH_LANE_IDLE_S``
  (default an hour) it frees its lanes. A change of ``ORCH_LANES`` (every workspace at its
  next touch) or of its weight gives it lanes that fit, its former ones preferred.

The table lives in Redis on the control hash tag (``{p}:lanes``, ``{p}:lanes:seen``; one
``lua/lanes.lua`` call assigns or touches and frees idle entries), or in memory for a store
without Redis (:class:`MemoryLaneAssigner`). A start pays no round trip for it in the common
case: :class:`WorkspaceLanes` caches a workspace's lanes per process, asks again at most
every ``REFRESH_S`` (serving the cached lanes meanwhile, stale while revalidating), and only
the first start of a workspace in a process waits for the call. When Redis cannot be asked
the run takes its workspace's hash tag (the lanes of old): a start never fails because of
lanes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from orchestrator.settings import WorkerSettings
from orchestrator.store.ceiling import weights
from orchestrator.store.keys import Keys

log = logging.getLogger("orchestrator.store.lanes")

_SOURCE = (Path(__file__).parent / "lua" / "lanes.lua").read_text()
REFRESH_S = 30.0  # a process touches (and re-reads) a workspace's lanes at most this often
STALE_S = 600.0  # ... and serves them while it asks again up to this long (far below lane_idle_s)
FALLBACK_S = 5.0  # after a failed ask, runs take the hash tag this long before asking again
ASK_ERRORS = (RedisError, OSError, asyncio.TimeoutError)


def hash_tag(name: str) -> int:
    """The tag (0-255) hashing gives ``name``: a workspace's run tag when its lanes cannot be
    asked, and the tag of a caller-chosen run id without a hex tag (the one hash of lanes)."""
    return zlib.crc32(name.encode()) & 0xFF


def choose_lanes(others: Mapping[str, Sequence[int]], held: Sequence[int], want: int, lanes: int,
                 start: int) -> tuple[int, ...]:
    """``want`` lanes of ``lanes`` for a workspace: the least loaded (load: how many of
    ``others`` hold the lane), ties from ``start`` onward, the lanes it ``held`` preferred
    among equals. The same choice as ``lua/lanes.lua``."""
    load = dict.fromkeys(range(lanes), 0.0)
    for lane in held:
        if lane < lanes:
            load[lane] = -0.5
    for taken in others.values():
        for lane in taken:
            if lane < lanes:
                load[lane] += 1
    order = [(start + j) % lanes for j in range(lanes)]
    picked: list[int] = []
    for _ in range(min(want, lanes)):
        best = min((lane for lane in order if lane not in picked), key=lambda lane: load[lane])
        picked.append(best)
    return tuple(sorted(picked))


def fits(held: Sequence[int], want: int, lanes: int) -> bool:
    """Whether a workspace may keep ``held``: ``min(want, lanes)`` lanes, each below ``lanes``."""
    return len(held) == min(want, lanes) and all(lane < lanes for lane in held)


class LaneAssigner(Protocol):
    """Where the assignment lives: :meth:`assign` assigns or touches one workspace,
    :meth:`table` lists every active workspace's lanes."""

    async def assign(self, workspace: str, weight: int) -> tuple[int, ...]: ...

    async def table(self) -> dict[str, tuple[int, ...]]: ...


@dataclass(frozen=True)
class LaneTableShape:
    """How many lanes there are, and after how long an idle workspace frees its own."""

    lanes: int
    idle_s: float


class RedisLaneAssigner:
    """The assignment in Redis, on the control hash tag (a Redis Cluster too): one script call."""

    def __init__(self, redis: Redis, keys: Keys, shape: LaneTableShape) -> None:
        self.redis = redis
        self.keys = keys
        self.shape = shape
        self._script = redis.register_script(_SOURCE)

    async def assign(self, workspace: str, weight: int) -> tuple[int, ...]:
        reply = await self._script(keys=[self.keys.lanes(), self.keys.lanes_seen()], args=[json.dumps({
            "workspace": workspace, "lanes": self.shape.lanes, "weight": weight, "hash": hash_tag(workspace),
            "idle_ms": int(self.shape.idle_s * 1000)})])
        return tuple(int(lane) for lane in reply)

    async def table(self) -> dict[str, tuple[int, ...]]:
        return await read_table(self.redis, self.keys)


async def read_table(redis: Redis, keys: Keys) -> dict[str, tuple[int, ...]]:
    """Every active workspace's lanes, as Redis holds them now."""
    raw = await redis.hgetall(keys.lanes())  # workspace -> "<lanes>:<its lanes>" (lua/lanes.lua)
    return {_text(ws): tuple(int(x) for x in _text(value).partition(":")[2].split(",") if x)
            for ws, value in raw.items()}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class MemoryLaneAssigner:
    """The assignment in this process's memory (a store without Redis): the same choice."""

    def __init__(self, shape: LaneTableShape, clock: Callable[[], float] = time.monotonic) -> None:
        self.shape = shape
        self.clock = clock
        self._lanes: dict[str, tuple[int, ...]] = {}
        self._seen: dict[str, float] = {}

    async def assign(self, workspace: str, weight: int) -> tuple[int, ...]:
        now = self.clock()
        for ws, seen in list(self._seen.items()):
            if seen <= now - self.shape.idle_s:
                del self._seen[ws], self._lanes[ws]
        held = self._lanes.get(workspace, ())
        if not fits(held, weight, self.shape.lanes):
            others = {ws: lanes for ws, lanes in self._lanes.items() if ws != workspace}
            held = choose_lanes(others, held, weight, self.shape.lanes, hash_tag(workspace))
            self._lanes[workspace] = held
        self._seen[workspace] = now
        return held

    async def table(self) -> dict[str, tuple[int, ...]]:
        return dict(self._lanes)


@dataclass
class _Cached:
    lanes: tuple[int, ...]
    fresh_until: float  # used as is until then
    usable_until: float  # then used while it is asked again (stale while revalidating)


class WorkspaceLanes:
    """The tags new runs of each workspace take (:meth:`tag`), from its assigned lanes,
    cached per process (see the module docstring)."""

    def __init__(self, assigner: LaneAssigner, *, weights: Mapping[str, int] | None = None,
                 refresh_s: float = REFRESH_S, stale_s: float = STALE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.assigner = assigner
        self.weights = dict(weights or {})
        self.refresh_s = refresh_s
        self.stale_s = max(stale_s, refresh_s)
        self.clock = clock
        self._cache: dict[str, _Cached] = {}
        self._turn: dict[str, int] = {}
        self._asking: dict[str, asyncio.Task[tuple[int, ...]]] = {}  # asks in flight (single flight)

    @classmethod
    def build(cls, redis: Redis | None, keys: Keys, settings: WorkerSettings) -> WorkspaceLanes:
        """In Redis (``redis``), else in memory; the weights of ``ORCH_WORKSPACE_LIMITS``."""
        shape = LaneTableShape(settings.lanes, settings.lane_idle_s)
        assigner: LaneAssigner = MemoryLaneAssigner(shape) if redis is None else RedisLaneAssigner(redis, keys, shape)
        # a cached answer is never older than half the idleness that frees its lanes
        return cls(assigner, weights=weights(settings), refresh_s=min(REFRESH_S, settings.lane_idle_s / 4),
                   stale_s=min(STALE_S, settings.lane_idle_s / 2))

    def weight_of(self, workspace: str) -> int:
        return self.weights.get(workspace, 1)

    async def tag(self, workspace: str) -> int:
        """The tag (first two hex digits) of a new run of ``workspace``: one of its lanes,
        in turn; its hash tag while the assignment cannot be asked."""
        lanes = await self.lanes_of(workspace)
        turn = self._turn.get(workspace, 0)
        self._turn[workspace] = turn + 1
        return lanes[turn % len(lanes)]

    async def lanes_of(self, workspace: str) -> tuple[int, ...]:
        """``workspace``'s lanes as this process knows them: one call to the assigner on its
        first start here (shared by the starts that come meanwhile) or once the cached answer
        is too old; else none, asking again in the background when it is older than
        ``refresh_s``."""
        now = self.clock()
        cached = self._cache.get(workspace)
        if cached is not None and now < cached.fresh_until:
            return cached.lanes
        asking = self._asking.get(workspace)
        if asking is None:
            asking = self._asking[workspace] = asyncio.get_running_loop().create_task(self._ask(workspace))
        if cached is not None and now < cached.usable_until:
            return cached.lanes
        return await asyncio.shield(asking)  # a cancelled start leaves the ask to the others

    async def _ask(self, workspace: str) -> tuple[int, ...]:
        try:
            lanes = await self.assigner.assign(workspace, self.weight_of(workspace))
        except ASK_ERRORS as exc:  # a start never fails because of lanes: hash it, ask again soon
            log.warning("workspace %s: lanes not assigned (%s); its runs take its hash lane for %.0f s",
                        workspace, type(exc).__name__, FALLBACK_S)
            lanes = ()
        finally:
            self._asking.pop(workspace, None)
        now = self.clock()
        if lanes:
            self._cache[workspace] = _Cached(lanes, now + self.refresh_s, now + self.stale_s)
        else:
            lanes = (hash_tag(workspace),)
            self._cache[workspace] = _Cached(lanes, now + FALLBACK_S, now + FALLBACK_S)
        return lanes
