"""What one worker process keeps between node tasks: one event loop for all of them.

Each worker process owns ONE asyncio event loop (uvloop's: libuv's loop and transports in
C, 6-11 % less worker CPU per fan-out run than the standard library's loop, bench/README.md,
issue 22), running forever in a dedicated daemon thread (``orchestrator-loop``). A Celery
pool thread (``-P threads -c N``, the default) hands its node step to that loop with
``asyncio.run_coroutine_threadsafe`` and blocks itself (never the loop) until the step is
done, so up to N node steps of one process overlap on one loop: a node awaiting a model or
the network costs a parked thread, not a process. Under ``-P prefork`` each child process
builds its own loop thread the same way (one mechanism for both pools). Acks stay per
message: the pool thread returns, and Celery acks, only after the step finished.

Beside the loop: one Redis client, one ``RedisRunStore``, the node registry, the child
runs its nodes start (``orchestrator/service/children.py``), an artifact cache per run,
and a bounded thread pool (the loop's default executor, ``Settings.offload_threads``)
where synchronous executors and CPU-heavy steps run off the loop.

Everything is created lazily on first use *in the process that uses it*: a prefork child
never inherits its parent's loop or sockets, because the state remembers the pid that
built it and is rebuilt after a fork. Building is guarded by a lock (pool threads race).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import socket
import threading
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis.asyncio as aioredis
import uvloop

from orchestrator.host.node_host import HostFactory
from orchestrator.kernel.environment import ArtifactCache, StepEnvironment, StepOptions
from orchestrator.kernel.local import run_nested
from orchestrator.kernel.registry import Registry
from orchestrator.queue.app import DEFAULT_REDIS_URL
from orchestrator.queue.dispatch import Dispatcher, send_nodes
from orchestrator.service.children import Children
from orchestrator.service.graph_store import GraphStore
from orchestrator.service.plugins import get_registry
from orchestrator.settings import Settings, get_settings
from orchestrator.store import redis_client
from orchestrator.store.ceiling import WorkspaceCeiling
from orchestrator.store.keys import Keys
from orchestrator.store.limits import RateLimiter
from orchestrator.store.redis_store import RedisRunStore
from orchestrator.telemetry.hooks import step_hooks

MAX_CACHED_RUNS = 32  # runs whose artifacts a process keeps (least recently used dropped first)
LOOP_THREAD_NAME = "orchestrator-loop"
STOP_TIMEOUT_S = 5.0
REDIS_MAX_CONNECTIONS = 256  # per process; steps hold one only for the length of a command
REDIS_POOL_TIMEOUT_S = 30.0

T = TypeVar("T")


class LoopThread:
    """An event loop running forever in its own daemon thread."""

    def __init__(self, offload_threads: int) -> None:
        self.loop = uvloop.new_event_loop()
        self.offload = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, offload_threads), thread_name_prefix="orchestrator-offload")
        self.loop.set_default_executor(self.offload)
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._main, name=LOOP_THREAD_NAME, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it in the calling thread.

        Called from the loop thread itself it would deadlock, so that is refused."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("LoopThread.run called from its own loop; await the coroutine instead")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(STOP_TIMEOUT_S)
        if not self.thread.is_alive():
            self.loop.close()
        self.offload.shutdown(wait=False, cancel_futures=True)


class Slots:
    """The node steps this process runs at once: at most ``capacity`` (the worker's
    concurrency, ``ORCH_NODE_CONCURRENCY``) start from its own free slots. A slot is
    counted from the moment it is promised (:meth:`reserve_free`, before the store is
    asked for nodes), so completions that overlap cannot promise the same free slot
    twice. ``in_flight`` is changed on the loop thread only."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_flight = 0

    def free(self) -> int:
        return max(0, self.capacity - self.in_flight)

    def enter(self) -> None:
        """A node message's step: it runs whatever the count (one per pool thread)."""
        self.in_flight += 1

    def reserve_free(self) -> int:
        """Count every free slot as taken now; how many that was."""
        return self.reserve(self.free())

    def reserve(self, at_most: int) -> int:
        """Count up to ``at_most`` free slots as taken now; how many that was."""
        taken = max(0, min(self.free(), at_most))
        self.in_flight += taken
        return taken

    def release(self, count: int = 1) -> None:
        if count <= 0:
            return
        self.in_flight -= count


class Handover:
    """What one node step promises its successors: its own slot, and the free slots it
    reserves when the store asks how many queued nodes it takes (``take``, called once at
    completion). :meth:`settle` then gives back what the taken nodes do not use.

    A completion reserves free slots for the nodes it may make ready, and for at least
    ``backlog`` older queued nodes of its run, not every free slot: completions overlap
    (they travel in one pipeline), and the first to ask would otherwise hold them all
    while its call is out; the others, a fan-out's among them, then took one node each
    and queued the rest (measured: with 8 fan-out-50 runs at once, 7 of 8 triggers handed
    over one branch, and their first branch the 49 others, unclaimed)."""

    def __init__(self, slots: Slots, backlog: int = 0) -> None:
        self.slots = slots
        self.backlog = backlog
        self.reserved = 0

    def take(self, ready_at_most: int = 0) -> int:
        """Its own slot and free ones for ``ready_at_most`` nodes (beyond its own slot's)
        or ``backlog``, whichever is more: how many nodes it takes."""
        self.reserved += self.slots.reserve(max(ready_at_most - 1, self.backlog))
        return self.reserved + 1

    def settle(self, taken: int) -> None:
        """``taken`` nodes run on the promised slots (the step's own first); free the rest.
        More than promised (a redelivered step hands on what its first delivery left
        undispatched, with no ``take``) run anyway, each counted like a node message."""
        promised, self.reserved = self.reserved + 1, 0
        if taken > promised:
            self.slots.in_flight += taken - promised
        else:
            self.slots.release(promised - taken)


@dataclass
class ProcessState:
    pid: int
    worker_id: str
    settings: Settings
    runner: LoopThread
    redis: aioredis.Redis
    store: RedisRunStore
    registry: Registry
    env: StepEnvironment  # what every node step of this process runs with
    children: Children  # child runs: started by nodes, settled when they end
    slots: Slots = field(default_factory=lambda: Slots(_capacity))

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.runner.loop

    def run(self, work: Awaitable[T]) -> T:
        """Run ``work`` on the process's loop; blocks the calling (pool) thread only."""
        return self.runner.run(_awaited(work))


async def _awaited(work: Awaitable[T]) -> T:
    return await work


_state: ProcessState | None = None
_build_lock = threading.Lock()
_capacity = 1
# This process's pid, kept current across forks: process_state() runs several times per
# node step, and os.getpid() is a system call each time.
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def set_capacity(node_steps: int) -> None:
    """How many node steps this process may run at once (the worker's pool size)."""
    global _capacity
    _capacity = max(1, node_steps)
    if _state is not None:
        _state.slots.capacity = _capacity


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _build() -> ProcessState:
    settings = get_settings()
    url = settings.redis_url or DEFAULT_REDIS_URL
    runner = LoopThread(settings.offload_threads)
    # Built on the loop thread: the client's pool and locks belong to that loop.
    client: aioredis.Redis = runner.run(_client(url, settings))
    store = RedisRunStore(client, settings)
    registry = get_registry(settings)
    me = worker_id()
    limiter = RateLimiter(client, Keys.of(settings))  # cluster-wide rate limits
    children = Children(WorkerServices(client, settings, registry, GraphStore(client, registry, settings), store,
                                       _dispatch), store)
    env = StepEnvironment(
        store=store, registry=registry, worker_id=me,
        options=StepOptions(lease_s=settings.node_lease_s, cancel_poll_s=settings.cancel_poll_s,
                            max_output_bytes=settings.max_output_bytes,
                            max_output_depth=settings.max_output_depth,
                            expression_limits=settings.expression_limits(),
                            graph_limits=settings.graph_limits(),
                            fuse_max_nodes=settings.fuse_max_nodes, fuse_max_s=settings.fuse_max_ms / 1000,
                            **step_hooks(store, settings, service="orchestrator-worker")),
        artifacts=ArtifactCache(max_runs=MAX_CACHED_RUNS),
        host_for=HostFactory(settings, url, limiter=limiter, children=children),  # each run's NodeHost, built once
        subgraphs=run_nested,
        limiter=limiter,
        ceiling=WorkspaceCeiling.build(client, Keys.of(settings), settings),  # nodes in flight per workspace
    )
    return ProcessState(pid=os.getpid(), worker_id=me, settings=settings, runner=runner, redis=client,
                        store=store, registry=registry, env=env, children=children)


@dataclass(frozen=True)
class WorkerServices:
    """What starting a child run needs in a worker (``orchestrator.service.runs.Starter``)."""

    redis: aioredis.Redis
    settings: Settings
    registry: Registry
    graphs: GraphStore
    run_store: RedisRunStore
    dispatch: Dispatcher


async def _dispatch(run_id: str, node_ids: list[str], plan: str = "") -> None:
    """Send node tasks from the loop: the synchronous kombu publish runs in the executor."""
    from workers.app import celery_app  # loaded by now: this process is a worker

    await asyncio.get_running_loop().run_in_executor(None, functools.partial(send_nodes, celery_app, run_id,
                                                                             node_ids, plan=plan))


_dispatch.carries_plan = True  # type: ignore[attr-defined]  # a PlanDispatcher


async def _client(url: str, settings: Settings) -> aioredis.Redis:
    # The store needs str replies. A blocking pool: a burst of steps waits for a free
    # connection (up to REDIS_POOL_TIMEOUT_S) instead of failing with "Too many connections".
    return redis_client.blocking_client(
        url, decode_responses=True, max_connections=REDIS_MAX_CONNECTIONS, timeout=REDIS_POOL_TIMEOUT_S)


def process_state() -> ProcessState:
    """The state of the calling process, built on first use (and again after a fork)."""
    global _state
    state = _state
    if state is not None and state.pid == _pid:
        return state
    with _build_lock:
        if _state is None or _state.pid != _pid:
            _state = _build()
        return _state


def reset() -> None:
    """Close this process's resources (worker shutdown, tests)."""
    global _state
    with _build_lock:
        state, _state = _state, None
    if state is None or state.pid != os.getpid():
        return
    try:
        state.runner.run(state.redis.aclose())
    finally:
        state.runner.stop()
