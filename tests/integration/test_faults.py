"""Workers die mid-run (SIGKILL) or lose their Redis connections: every run still ends, and each completion counts once.

Each module starts its own redis-server and Celery workers (so a test may kill them)
with a 2 s node lease and a sweeper running every 0.5 s in the test's event loop. The
broker's visibility timeout is left at its default (a day): the sweeper alone sends
again what a killed worker held. Nodes come from ``fault_pack/`` (plus ``fake_pack/``), loaded
through ``ORCH_NODE_PATHS`` like any external pack.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.service.sweeper import Sweeper, SweepLimits
from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph
from tests.integration.conftest import RunResult, collect, wait_for_terminal

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
NODE_PATHS = os.pathsep.join([str(HERE / "fault_pack"), str(HERE / "fake_pack")])
LEASE_S = 2.0
SWEEP_PERIOD_S = 0.5
SETTINGS = Settings(node_lease_s=LEASE_S, node_paths=NODE_PATHS)


def worker_env(kill_dir: Path) -> dict[str, str]:
    return {
        "ORCH_NODE_PATHS": NODE_PATHS, "ORCH_NODE_LEASE_S": str(LEASE_S),
        "ORCH_FAULT_KILL_DIR": str(kill_dir),
    }


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(unix_socket=False) as s:
        yield s


@pytest.fixture(scope="module")
def kill_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kills")


@pytest.fixture(scope="module")
def pool(server: EmbeddedRedis, kill_dir: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses(server.url, WorkerConfig(count=2, concurrency=1, pool="prefork",
                                                  env=worker_env(kill_dir))) as procs:
        yield procs


@pytest.fixture(scope="module")
def registry() -> Registry:
    from orchestrator.service.plugins import load_registry

    return load_registry(SETTINGS)


@pytest.fixture(scope="module")
def celery(server: EmbeddedRedis) -> Iterator[Any]:
    from orchestrator.queue.app import make_celery

    app = make_celery(server.url, SETTINGS)
    yield app
    app.close()


@pytest.fixture
async def store(server: EmbeddedRedis) -> AsyncIterator[RedisRunStore]:
    s = RedisRunStore.from_url(server.url, SETTINGS)
    yield s
    await s.close()


@pytest.fixture
async def sweeping(store: RedisRunStore, celery: Any) -> AsyncIterator[Sweeper]:
    """A sweeper running every SWEEP_PERIOD_S for the test's duration."""
    from orchestrator.queue.dispatch import make_dispatch

    sweeper = Sweeper(store, make_dispatch(celery), SETTINGS, limits=SweepLimits(max_node_reclaims=1))
    task = asyncio.create_task(sweeper.run_forever(SWEEP_PERIOD_S))
    yield sweeper
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def start(store: RedisRunStore, registry: Registry, celery: Any, g: dict[str, Any],
                **kw: Any) -> str:
    from orchestrator.queue.dispatch import make_dispatch

    return await start_run(store, registry, g, RunRequest({"x": 1}, **kw), dispatch=make_dispatch(celery))


async def first_pid(pid_dir: Path, node_id: str, timeout_s: float = 20.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = sorted(pid_dir.glob(f"{node_id}.*"))
        if found:
            return int(found[0].name.split(".")[1])
        await asyncio.sleep(0.05)
    raise AssertionError(f"node {node_id} never started")


def node_event_counts(result: RunResult) -> Counter[tuple[str, str]]:
    return Counter((e.node_id, e.event_type) for _, e in result.events if e.node_id)


def chain(pid_dir: Path, middle: tuple[str, str, str, dict[str, Any]]) -> dict[str, Any]:
    return graph(
        [("t", "manual_trigger", "Start"), middle, ("p", "probe", "After")],
        [("t", "output", middle[0], "input"), (middle[0], "output", "p", "input")],
    )


async def test_run_finishes_with_right_outputs_when_the_process_running_a_node_is_killed(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any,
    sweeping: Sweeper, tmp_path: Path,
) -> None:
    g = chain(tmp_path, ("s", "stall", "Stall", {"pid_dir": str(tmp_path), "delay_s": 2,
                                                 "value": "kept"}))
    run_id = await start(store, registry, celery, g)
    os.kill(await first_pid(tmp_path, "s"), signal.SIGKILL)
    result = await collect(store, run_id, await wait_for_terminal(store, run_id, 40))
    assert result.status == "succeeded"
    assert result.output("s") == {"value": "kept", "input": {"x": 1}}
    assert result.output("p")["input"] == [{"value": "kept", "input": {"x": 1}}]
    counts = node_event_counts(result)
    assert all(counts[(n, "completed")] == 1 for n in ("t", "s", "p"))
    started = result.of("s", "started")
    assert len(started) >= 2
    assert not (started[0].data or {}).get("reclaimed")
    assert all((e.data or {}).get("reclaimed") for e in started[1:])
    duplicates = {k: v for k, v in counts.items() if v > 1 and k != ("s", "started")}
    assert duplicates == {}


async def test_a_worker_killed_mid_chain_loses_its_links_which_run_again_after_the_first_node(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any,
    sweeping: Sweeper, tmp_path: Path,
) -> None:
    """The step of the chain's first node runs the pure links a and ps after it
    (kernel/fusion.py): nothing of the chain is stored until it ends, so a worker killed
    during ps loses it all; the first node's lease expires, it runs again on the other
    worker with its links after it, and each node completes once."""
    g = graph([("t", "manual_trigger", "Start"), ("a", "set_fields", "Set", {"fields": {"k": 1}}),
               ("ps", "pure_stall", "Link", {"pid_dir": str(tmp_path), "delay_s": 2, "value": "kept"}),
               ("p", "probe", "After")],
              [("t", "output", "a", "input"), ("a", "output", "ps", "input"), ("ps", "output", "p", "input")])
    run_id = await start(store, registry, celery, g)
    os.kill(await first_pid(tmp_path, "ps"), signal.SIGKILL)
    result = await collect(store, run_id, await wait_for_terminal(store, run_id, 40))
    assert result.status == "succeeded"
    assert result.output("ps") == {"value": "kept", "input": {"x": 1, "k": 1}}
    counts = node_event_counts(result)
    assert all(counts[(n, "completed")] == 1 for n in ("t", "a", "ps", "p"))
    assert len(list(tmp_path.glob("ps.*"))) == 2  # ps ran twice, in the lost chain and after a's rerun
    # The chain's first node (t here, whose step ran a and ps as links) ran again, reclaimed;
    # its links started once: the lost chain stored nothing of them.
    first = [n for n in ("t", "a") if len(result.of(n, "started")) == 2]
    assert len(first) == 1 and (result.of(first[0], "started")[1].data or {}).get("reclaimed")
    assert counts[("a", "started")] + counts[("t", "started")] == 3 and counts[("ps", "started")] == 1


async def test_redelivered_task_of_a_stored_node_only_dispatches_its_successors(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any,
    sweeping: Sweeper, kill_dir: Path,
) -> None:
    g = chain(kill_dir, ("d", "die_after_store", "Die", {"value": 7}))
    run_id = await start(store, registry, celery, g)
    result = await collect(store, run_id, await wait_for_terminal(store, run_id, 40))
    assert (kill_dir / f"{run_id}.d.killed").exists()  # the worker did die after storing
    assert result.status == "succeeded"
    assert result.output("p")["input"] == [{"value": 7, "input": {"x": 1}}]
    counts = node_event_counts(result)
    # d's completion also claimed p (the chain's next link) for the worker that then died:
    # p is taken again once that lease lapsed, with a second ``started`` saying so.
    assert {k: v for k, v in counts.items() if v != 1 and k != ("p", "started")} == {}
    p_started = result.of("p", "started")
    assert len(p_started) == 2 and (p_started[1].data or {}).get("reclaimed")
    assert not (result.of("d", "started")[0].data or {}).get("reclaimed")  # ran once: never reclaimed


async def test_node_that_kills_every_worker_fails_the_run_naming_the_node(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any,
    sweeping: Sweeper,
) -> None:
    g = chain(Path(), ("k", "suicide", "Poison", {}))
    run_id = await start(store, registry, celery, g)
    result = await collect(store, run_id, await wait_for_terminal(store, run_id, 40))
    assert result.status == "failed"
    record = await store.get_run(run_id)
    assert record.error and record.error["node_id"] == "k" and record.error["node_name"] == "Poison"
    assert "worker lost" in record.error["message"]
    assert result.states["p"] == "not_run"  # the run failed before it could run
    assert result.of("p", "started") == []


async def test_run_ends_by_its_deadline_when_every_worker_is_killed(
    registry: Registry, tmp_path: Path,
) -> None:
    """On a Redis of its own, so no other test's worker can pick the node up."""
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch

    deadline_s = 4.0
    g = chain(tmp_path, ("s", "stall", "Stall", {"pid_dir": str(tmp_path), "delay_s": 30}))
    with EmbeddedRedis(unix_socket=False) as server, \
            WorkerProcesses(server.url, WorkerConfig(count=1, concurrency=1, env=worker_env(tmp_path))) as lonely:
        store = RedisRunStore.from_url(server.url, SETTINGS)
        celery = make_celery(server.url, SETTINGS)
        sweeper = Sweeper(store, make_dispatch(celery), SETTINGS)
        sweeping = asyncio.create_task(sweeper.run_forever(SWEEP_PERIOD_S))
        try:
            began = time.monotonic()
            run_id = await start(store, registry, celery, g, deadline_s=deadline_s)
            await first_pid(tmp_path, "s")
            for pid in lonely.pids:
                os.killpg(pid, signal.SIGKILL)
            result = await collect(store, run_id, await wait_for_terminal(store, run_id, 20))
            elapsed = time.monotonic() - began
        finally:
            sweeping.cancel()
            await asyncio.gather(sweeping, return_exceptions=True)
            await store.close()
            celery.close()
    assert result.status in ("failed", "timed_out")
    assert elapsed <= deadline_s + SWEEP_PERIOD_S + 1.5
    assert result.of("s", "completed") == [] and result.of("p", "started") == []


async def test_a_worker_killed_mid_loop_reruns_only_the_lost_iterations_node(
    pool: WorkerProcesses, store: RedisRunStore, registry: Registry, celery: Any,
    sweeping: Sweeper, tmp_path: Path,
) -> None:
    """A Loop's iterations are child runs (``nodes/_shared/loop_children.py``): SIGKILL of
    the process running one iteration's node re-runs that node only, in that child run."""
    items = list(range(6))
    body = graph([("li", "loop_input", "Item"),
                  ("s", "stall", "Mark", {"pid_dir": str(tmp_path), "delay_s": 1.5, "value": "ok"})],
                 [("li", "output", "s", "input")], id="body")
    g = graph([("t", "manual_trigger", "Start"),
               ("each", "loop", "For each", {"mode": "for_each", "items": items, "body": body, "concurrency": 2})],
              [("t", "output", "each", "input")])
    run_id = await start(store, registry, celery, g)
    os.kill(await first_pid(tmp_path, "s"), signal.SIGKILL)
    result = await collect(store, run_id, await wait_for_terminal(store, run_id, 60))
    assert result.status == "succeeded"
    assert result.output("each")["results"] == [{"value": "ok", "input": i} for i in items]  # once each, in order
    own = [e for e in result.of("each", "completed") if "subgraph" not in (e.data or {})]
    assert len(own) == 1  # the Loop's own completion (the others are its body's, copied in)
    children = sorted(await store.redis.smembers(store.keys.run_children(run_id)))
    assert len(children) == len(items)
    reclaimed = 0
    for child in children:
        done = await collect(store, child, await wait_for_terminal(store, child, 5))
        counts = node_event_counts(done)
        assert done.status == "succeeded"
        assert counts[("li", "started")] == 1 and counts[("s", "completed")] == 1
        reclaimed += counts[("s", "started")] > 1
    assert reclaimed == 1  # only the killed iteration's node ran again


async def _terminal(store: RedisRunStore, run_id: str) -> list[Any]:
    """The run's events to its end, read as a client would: this process's own pooled
    connections were closed too, and a read on one of them fails once."""
    for attempt in range(3):
        try:
            return await wait_for_terminal(store, run_id, 60)
        except RedisConnectionError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def test_a_run_survives_redis_closing_every_connection_mid_fan_out(
    pool: WorkerProcesses, server: EmbeddedRedis, store: RedisRunStore, registry: Registry, celery: Any,
    sweeping: Sweeper, tmp_path: Path,
) -> None:
    """Redis closes every client connection while a fan-out's branches are in flight (the
    workers' stores stream their commands on one held connection: store/batching.py): the
    commands awaiting replies fail, the steps are taken again, and the run still ends
    succeeded with each node completed once."""
    width = 6
    branches = [(f"s{i}", "stall", f"Stall {i}", {"pid_dir": str(tmp_path), "delay_s": 1, "value": i})
                for i in range(width)]
    g = graph([("t", "manual_trigger", "Start"), *branches, ("p", "probe", "After")],
              [e for b in branches for e in (("t", "output", b[0], "input"), (b[0], "output", "p", "input"))])
    killer = Redis.from_url(server.url)
    try:
        run_id = await start(store, registry, celery, g)
        await first_pid(tmp_path, "s0")  # the first branch in flight on a worker
        assert await killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") >= 1
        result = await collect(store, run_id, await _terminal(store, run_id))
    finally:
        await killer.aclose()
    assert result.status == "succeeded"
    assert sorted(v["value"] for v in result.output("p")["input"]) == list(range(width))
    completed = Counter(e.node_id for _, e in result.events if e.node_id and e.event_type == "completed")
    assert completed == Counter({n: 1 for n in ["t", "p", *(b[0] for b in branches)]})
