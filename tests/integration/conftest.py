"""Real processes for the distributed tests: one redis-server and two Celery workers.

Started once per session and stopped by pid at the end. The workers run the repo's
nodes plus the test node pack in ``fake_pack/`` (loaded through ``ORCH_NODE_PATHS``, the
same way a user's external pack loads). ``run_graph`` starts a run the way the API and the
CLI do (``runs.start_run`` + the Celery dispatch) and follows its event stream to the
terminal event.
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.kernel.protocol import EventType, NodeEvent
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.settings import Settings

FAKE_PACK = Path(__file__).parent / "fake_pack"
RUN_TIMEOUT_S = 30.0
WORKER_COUNT = 2
WORKER_CONCURRENCY = 2

pytestmark = pytest.mark.integration


@dataclass
class RunResult:
    run_id: str
    status: str
    events: list[tuple[str, NodeEvent]]
    states: dict[str, str]  # node id -> final node status
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # node id -> port -> value

    def of(self, node_id: str, event_type: str) -> list[NodeEvent]:
        return [e for _, e in self.events if e.node_id == node_id and e.event_type == event_type]

    def output(self, node_id: str, port: str = "output") -> Any:
        return self.outputs[node_id][port]


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as server:
        yield server


@pytest.fixture(scope="session")
def workers(redis_server: EmbeddedRedis) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(redis_server.url, WorkerConfig(
        count=WORKER_COUNT, concurrency=WORKER_CONCURRENCY,
        env={"ORCH_NODE_PATHS": str(FAKE_PACK), "ORCH_OFFLINE_MODELS": "1",
             # test_agents_history's MCP server reports its parent (the worker process):
             # allowed, and unconfined so that the worker's pid is visible to it.
             "ORCH_MCP_STDIO_COMMANDS": sys.executable, "ORCH_MCP_STDIO_CONFINE": "false"},
    ))
    procs.start()
    try:
        yield procs
    finally:
        procs.stop()


@pytest.fixture(scope="session")
def registry() -> Registry:
    """What the workers load: the repo's nodes plus the fake pack."""
    from orchestrator.service.plugins import load_registry

    return load_registry(Settings(node_paths=str(FAKE_PACK)))


@pytest.fixture(scope="session")
def celery(redis_server: EmbeddedRedis) -> Iterator[Any]:
    from orchestrator.queue.app import make_celery

    app = make_celery(redis_server.url, Settings())
    yield app
    app.close()


@pytest.fixture
async def store(redis_server: EmbeddedRedis) -> AsyncIterator[Any]:
    from orchestrator.store.redis_store import RedisRunStore

    s = RedisRunStore.from_url(redis_server.url, Settings())
    yield s
    await s.close()


@pytest.fixture
def sync_redis(redis_server: EmbeddedRedis) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


async def read_until(store: Any, run_id: str, stop: Callable[[NodeEvent], bool],
                     timeout_s: float = RUN_TIMEOUT_S) -> list[tuple[str, NodeEvent]]:
    """Every event of the run, in order, up to and including the first ``stop`` accepts;
    an AssertionError listing what arrived when none does within ``timeout_s``."""
    events: list[tuple[str, NodeEvent]] = []

    async def read() -> None:
        after = "0-0"
        while True:
            batch = await store.read_events(run_id, after=after, block_ms=500)
            for event_id, event in batch:
                after = event_id
                events.append((event_id, event))
                if stop(event):
                    return

    try:
        await asyncio.wait_for(read(), timeout_s)
    except TimeoutError:
        seen = [(e.node_id, e.event_type) for _, e in events]
        raise AssertionError(f"run {run_id}: no awaited event within {timeout_s} s; events: {seen}") from None
    return events


async def wait_for_terminal(store: Any, run_id: str, timeout_s: float = RUN_TIMEOUT_S,
                            ) -> list[tuple[str, NodeEvent]]:
    """Every event of the run, in order, up to and including its terminal run event."""
    return await read_until(store, run_id, lambda e: not e.node_id and e.event_type in EventType.TERMINAL,
                            timeout_s)


async def collect(store: Any, run_id: str, events: list[tuple[str, NodeEvent]]) -> RunResult:
    record = await store.get_run(run_id)
    states = await store.node_states(run_id)
    stored = await store.read_outputs(run_id, list(states))
    outputs = {n: {port: dv.value for port, dv in ports.items()} for n, ports in stored.items()}
    return RunResult(run_id=run_id, status=record.status, events=events, states=states,
                     outputs=outputs)


@pytest.fixture
def wait_terminal(store: Any) -> Any:
    """``await wait_terminal(run_id)`` -> the run's events up to its terminal event."""

    async def wait(run_id: str) -> list[tuple[str, NodeEvent]]:
        return await wait_for_terminal(store, run_id)

    return wait


@pytest.fixture
def run_graph(workers: WorkerProcesses, store: Any, registry: Registry, celery: Any) -> Any:
    """``await run_graph(graph, run_input)`` -> :class:`RunResult` once the run ended."""
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.runs import RunRequest, start_run

    dispatch = make_dispatch(celery)

    async def run(graph: dict[str, Any], run_input: Any = None, **kw: Any) -> RunResult:
        run_id = await start_run(store, registry, graph, RunRequest(run_input, **kw), dispatch=dispatch)
        events = await wait_for_terminal(store, run_id)
        return await collect(store, run_id, events)

    return run


def completions(result: RunResult) -> Counter[str]:
    """How many times each node of the run completed (exactly once is the guarantee)."""
    return Counter(e.node_id for _, e in result.events if e.node_id and e.event_type == "completed")


async def run_through(store: Any, registry: Registry, celery: Any, graph: dict[str, Any],
                      timeout_s: float = 40.0) -> RunResult:
    """Start ``graph`` as the API does (``start_run`` + the Celery dispatch of ``celery``)
    and collect it once it ended."""
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.runs import RunRequest, start_run

    run_id = await start_run(store, registry, graph, RunRequest({"x": 1}), dispatch=make_dispatch(celery))
    return await collect(store, run_id, await wait_for_terminal(store, run_id, timeout_s))


@asynccontextmanager
async def sweeping_every(period_s: float, store: Any, celery: Any, settings: Settings) -> AsyncIterator[Any]:
    """A sweeper on ``store`` sending through ``celery``, a pass every ``period_s`` while the
    block runs."""
    from orchestrator.queue.dispatch import make_dispatch
    from orchestrator.service.sweeper import Sweeper

    sweeper = Sweeper(store, make_dispatch(celery), settings)
    task = asyncio.create_task(sweeper.run_forever(period_s))
    try:
        yield sweeper
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def trigger(node_id: str = "t", name: str = "Start") -> tuple[str, str, str]:
    return (node_id, "manual_trigger", name)
