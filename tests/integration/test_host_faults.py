"""Hosts fail under a running cluster: every run still ends correct, each node completes once.

The cluster is built once for the module from network namespaces on a private bridge
(``tests/support/netns.py``): redis-server on host ``redis``; Celery workers (threads
pool) on ``w1`` and ``w2``; the sweeper (``orchestrator sweeper``) and this test's own
client (its Redis and broker connections) on ``client``; a worker on ``w3`` only in the
clock tests. Faults: ``w1`` cut off from Redis and healed while ``w2``'s link is slow and
lossy (``tc netem``, or loss alone by nftables on a kernel without netem), Redis's replies
to ``w1`` dropped (a one-way partition), ``w2`` hung then killed whole (every process
stopped, then SIGKILLed), a start message lost on its way to the workers, and a worker
and the sweeper with their clocks 30 s ahead or behind (``faketime``).

Each scenario ends with :func:`check`: every run succeeded, each node has exactly one
``completed`` event, and it came from the node's latest claim (its worker is the last
``started`` event's), so no stale completion was applied; a lost message is recovered
within the sweeper's grace, not at the run's deadline. Skipped, with the reason, when not
root or ``ip``/``nft``/``tc``/``faketime`` is missing (``.ci/system-deps`` installs them).
Everything started is stopped by pid and the namespaces are deleted, whatever fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.kernel.protocol import EventType
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import redis_server_binary
from orchestrator.local.embedded_workers import PROJECT_ROOT, WorkerConfig, WorkerProcesses
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph
from tests.integration.conftest import RunResult, collect, wait_for_terminal
from tests.support import netns

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
NODE_PATHS = os.pathsep.join([str(HERE / "fault_pack"), str(HERE / "fake_pack")])
HOSTS = ["redis", "client", "w1", "w2", "w3"]
LEASE_S = 2.0
SWEEP_PERIOD_S = 0.5
GRACE_S = 1.5  # undispatched_grace_s: a sent node not claimed this long is sent again
RECOVERY_BOUND_S = GRACE_S + 2 * SWEEP_PERIOD_S + 1.5  # grace, up to two passes, a claim
SETTLE_S = 45.0  # every run of a scenario ends within this (its deadline is 120 s)
DEADLINE_S = 120.0
SKEW = "30s"
SETTINGS = Settings(node_lease_s=LEASE_S, node_paths=NODE_PATHS)
WORKER_SLOTS = 16  # node steps per worker: one host can take the whole load when another fails
WORKER_ENV = {"ORCH_NODE_PATHS": NODE_PATHS, "ORCH_NODE_LEASE_S": str(LEASE_S)}
SWEEPER_ENV = {"ORCH_UNDISPATCHED_GRACE_S": str(GRACE_S), "ORCH_MAX_NODE_RECLAIMS": "5"}


def _skip_reason() -> str | None:
    reason = netns.unavailable()
    if reason is None and shutil.which("faketime") is None:
        reason = "host-fault tests need faketime (apt-get install faketime)"
    return reason


def _faketime(skew: str | None) -> list[str]:
    """A prefix running a program with its clock ``skew`` off (e.g. "+30s"); monotonic
    clocks stay real, as a skewed host's do."""
    return [] if skew is None else ["env", "DONT_FAKE_MONOTONIC=1", "faketime", "-m", "-f", skew]


class HostWorker(WorkerProcesses):
    """One Celery worker process on ``host`` (optionally with a skewed clock)."""

    def __init__(self, hosts: netns.Hosts, host: str, redis_url: str, skew: str | None = None) -> None:
        super().__init__(redis_url, WorkerConfig(count=1, concurrency=WORKER_SLOTS, pool="threads",
                                                 env=WORKER_ENV, grace_s=2.0))
        self.prefix = [*hosts.exec_prefix(host), *_faketime(skew)]
        self.host = host

    def command(self, index: int) -> list[str]:
        command = super().command(index)
        command[command.index("-n") + 1] = f"{self.host}-{os.getpid()}@%h"
        return [*self.prefix, *command]


@dataclass
class Cluster:
    hosts: netns.Hosts
    redis_url: str
    dir: Path
    redis_proc: subprocess.Popen[bytes] | None = None
    workers: dict[str, HostWorker] = field(default_factory=dict)
    sweeper: subprocess.Popen[bytes] | None = None
    # Hosts a scenario cut off: restarted before the next one, whose timings must not
    # depend on how long a healed host's TCP connections take to recover.
    faulted: set[str] = field(default_factory=set)

    def start_redis(self) -> None:
        address = self.hosts.address["redis"]
        with open(self.dir / "redis.log", "wb") as log:
            self.redis_proc = subprocess.Popen(
                [*self.hosts.exec_prefix("redis"), redis_server_binary(), "--bind", address, "--port", "6379",
                 "--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", str(self.dir)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        with netns.inside(self.hosts.ns("client")):
            client = redis.Redis(host=address, port=6379, socket_timeout=1)
            try:
                for _ in range(100):
                    with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                        if client.ping():
                            return
                    time.sleep(0.05)
            finally:
                client.close()
        raise RuntimeError(f"redis-server on host redis did not answer: {(self.dir / 'redis.log').read_text()}")

    def start_workers(self, hosts: list[str], skew: str | None = None) -> None:
        started = [HostWorker(self.hosts, host, self.redis_url, skew) for host in hosts]
        for worker in started:
            self.workers[worker.host] = worker
            worker.spawn()
        for worker in started:
            worker.wait_ready()

    def stop_worker(self, host: str, grace_s: float | None = None) -> None:
        worker = self.workers.pop(host, None)
        if worker is not None:
            if grace_s is not None:
                worker.grace_s = grace_s
            worker.stop()

    def worker_alive(self, host: str) -> bool:
        worker = self.workers.get(host)
        return worker is not None and all(p.poll() is None for p in worker.procs)

    def start_sweeper(self, skew: str | None = None) -> None:
        self.stop_sweeper()
        env = {**os.environ, **SWEEPER_ENV, "REDIS_URL": self.redis_url,
               "PYTHONPATH": str(PROJECT_ROOT)}
        with open(self.dir / "sweeper.log", "ab") as log:
            self.sweeper = subprocess.Popen(
                [*self.hosts.exec_prefix("client"), *_faketime(skew), sys.executable, "-m", "orchestrator.cli",
                 "sweeper", "--period-s", str(SWEEP_PERIOD_S)],
                env=env, cwd=str(PROJECT_ROOT), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    def sweeper_log(self, max_chars: int = 4000) -> str:
        try:
            return (self.dir / "sweeper.log").read_text(errors="replace")[-max_chars:]
        except OSError:
            return ""

    def stop_sweeper(self) -> None:
        proc, self.sweeper = self.sweeper, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def teardown(self) -> None:
        self.hosts.heal()
        self.stop_sweeper()
        for host in list(self.workers):
            self.stop_worker(host)
        if self.redis_proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.redis_proc.kill()
            self.redis_proc.wait()
        self.hosts.teardown()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    hosts = netns.Hosts(HOSTS).build()
    made = Cluster(hosts, f"redis://{hosts.address['redis']}:6379/0", Path(tempfile.mkdtemp(prefix="orc-hosts-")))
    try:
        made.start_redis()
        made.start_workers(["w1", "w2"])
        made.start_sweeper()
        yield made
    finally:
        made.teardown()


@pytest.fixture(autouse=True)
def healthy(cluster: Cluster) -> Iterator[None]:
    """Each scenario starts and ends with every link healed, w1 and w2 fresh, one sweeper."""
    cluster.hosts.heal()
    down = [h for h in ("w1", "w2") if h in cluster.faulted or not cluster.worker_alive(h)]
    cluster.faulted.clear()
    for host in down:
        cluster.stop_worker(host, grace_s=0.0)
    if down:
        cluster.start_workers(down)
    if cluster.sweeper is None or cluster.sweeper.poll() is not None:
        cluster.start_sweeper()
    yield
    cluster.hosts.heal()


@pytest.fixture(scope="module")
def registry() -> Registry:
    from orchestrator.service.plugins import load_registry

    return load_registry(SETTINGS)


@dataclass
class Client:
    """This test's side of the cluster: a run store and a broker on host ``client``."""

    store: RedisRunStore
    celery: Any
    registry: Registry

    async def start(self, g: dict[str, Any], dispatch: Any = None) -> str:
        from orchestrator.queue.dispatch import make_dispatch

        return await start_run(self.store, self.registry, g, RunRequest({"n": 1}, deadline_s=DEADLINE_S),
                               dispatch=dispatch or make_dispatch(self.celery))


@contextlib.asynccontextmanager
async def client_side(cluster: Cluster, registry: Registry) -> AsyncIterator[Client]:
    """Everything this block connects to, it connects to from host ``client``."""
    from orchestrator.queue.app import make_celery

    with netns.inside(cluster.hosts.ns("client")):
        store = RedisRunStore.from_url(cluster.redis_url, SETTINGS)
        celery = make_celery(cluster.redis_url, SETTINGS)
        try:
            yield Client(store, celery, registry)
        finally:
            await store.close()
            celery.close()


def chain(delay_s: float) -> dict[str, Any]:
    return graph([("t", "manual_trigger", "Start"), ("s", "probe", "Slow", {"delay_s": delay_s}),
                  ("p", "probe", "After")],
                 [("t", "output", "s", "input"), ("s", "output", "p", "input")])


async def settle(store: RedisRunStore, run_ids: list[str]) -> list[RunResult]:
    async def one(run_id: str) -> RunResult:
        return await collect(store, run_id, await wait_for_terminal(store, run_id, SETTLE_S))

    return list(await asyncio.gather(*(one(r) for r in run_ids)))


def check(results: list[RunResult]) -> None:
    """Every run succeeded with its outputs; one completion per node, from its latest claim."""
    for result in results:
        trail = [(e.node_id, e.event_type) for _, e in result.events]
        assert result.status == "succeeded", (result.run_id, result.status, trail)
        assert set(result.states.values()) == {"succeeded"}, (result.run_id, result.states)
        completed = Counter(e.node_id for _, e in result.events if e.event_type == EventType.COMPLETED)
        assert completed == dict.fromkeys(result.states, 1), (result.run_id, completed)
        for node_id in result.states:
            started, done = result.of(node_id, "started"), result.of(node_id, "completed")
            assert (done[0].data or {})["worker_id"] == (started[-1].data or {})["worker_id"], \
                (result.run_id, node_id, "a stale completion was applied", trail)
        assert result.output("p")["input"] == [result.output("s")]


async def started_on(store: RedisRunStore, run_id: str, node_id: str, pids: list[int]) -> bool | None:
    """Whether ``node_id`` of ``run_id`` started on one of ``pids``; None while it has not started."""
    for _, event in await store.read_events(run_id):
        if event.node_id == node_id and event.event_type == EventType.STARTED:
            return int(str((event.data or {})["worker_id"]).rsplit(":", 1)[1]) in pids
    return None


async def until(condition: Callable[[], Any], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        await asyncio.sleep(0.05)


async def start_until_one_runs_on(client: Client, cluster: Cluster, host: str, g: dict[str, Any]) -> list[str]:
    """Start runs of ``g`` until the slow node of one runs on ``host`` (at most ten runs)."""
    pids = cluster.hosts.pids(host)
    runs: list[str] = []
    for _ in range(10):
        run_id = await client.start(g)
        runs.append(run_id)
        where: list[bool | None] = [None]

        async def placed(run_id: str = run_id, where: list[bool | None] = where) -> bool:
            where[0] = await started_on(client.store, run_id, "s", pids)
            return where[0] is not None

        await until(placed, 10, f"run {run_id} started its slow node")
        if where[0]:
            return runs
    raise AssertionError(f"ten runs, none on {host}")


async def stale_total(store: RedisRunStore, run_ids: list[str]) -> int:
    return sum([await store.stale_refusals(r) for r in run_ids])



async def test_a_worker_host_cut_off_from_redis_and_healed_loses_its_node_to_the_later_claim(
    cluster: Cluster, registry: Registry,
) -> None:
    """w1 is cut off for two leases while its 6 s node runs: the node's lease lapses and w2
    claims it again. After the heal w1 is still running it, and would complete it first;
    its token is stale: it stops, and the run takes w2's result."""
    async with client_side(cluster, registry) as client:
        g = chain(delay_s=6.0)
        runs = await start_until_one_runs_on(client, cluster, "w1", g)
        cluster.faulted.add("w1")
        cluster.hosts.degrade("w2", delay_ms=20, jitter_ms=10, loss_pct=2)
        cluster.hosts.partition("w1", "redis")
        runs += [await client.start(g) for _ in range(2)]
        await asyncio.sleep(2 * LEASE_S)
        cluster.hosts.heal()
        results = await settle(client.store, runs)
        check(results)
        assert any((e.data or {}).get("reclaimed") for r in results for e in r.of("s", "started"))
        assert await stale_total(client.store, runs) >= 1  # w1's renewal or completion, refused


async def test_redis_replies_dropped_to_one_worker_lose_nothing(cluster: Cluster, registry: Registry) -> None:
    async with client_side(cluster, registry) as client:
        g = chain(delay_s=1.0)
        runs = await start_until_one_runs_on(client, cluster, "w1", g)
        cluster.faulted.add("w1")
        cluster.hosts.one_way("redis", "w1")
        during = [await client.start(g) for _ in range(6)]  # w1 pops some: their replies vanish
        await asyncio.sleep(4 * LEASE_S)
        cluster.hosts.heal()
        results = await settle(client.store, runs + during)
        check(results)
        for result in results[len(runs):]:  # a start message w1 took is sent again in time
            created = result.events[0][1].timestamp
            first_start = result.of("t", "started")[0].timestamp
            assert first_start - created <= RECOVERY_BOUND_S, (result.run_id, first_start - created,
                                                               cluster.sweeper_log())


async def test_a_worker_host_that_hangs_then_dies_has_its_nodes_and_messages_run_elsewhere(
    cluster: Cluster, registry: Registry,
) -> None:
    """w2 hangs (every process stopped) while it runs a node and while start messages
    arrive (Redis hands some to its waiting BRPOP), then is killed whole."""
    async with client_side(cluster, registry) as client:
        g = chain(delay_s=2.0)
        runs = await start_until_one_runs_on(client, cluster, "w2", g)
        assert cluster.hosts.freeze("w2")
        during = [await client.start(g) for _ in range(3)]
        assert cluster.hosts.kill("w2")
        results = await settle(client.store, runs + during)
        check(results)
        assert any((e.data or {}).get("reclaimed") for r in results for e in r.of("s", "started"))
        for result in results[len(runs):]:  # a start message w2 took is sent again in time
            waited_s = result.of("t", "started")[0].timestamp - result.events[0][1].timestamp
            assert waited_s <= RECOVERY_BOUND_S, (result.run_id, waited_s, cluster.sweeper_log())


async def test_a_start_message_lost_on_its_way_is_sent_again_within_the_grace(
    cluster: Cluster, registry: Registry,
) -> None:
    """Its message vanishes after the start recorded it sent (as when a worker dies, or
    loses Redis's reply, between kombu's BRPOP and its unacked record)."""
    from orchestrator.queue.app import NODE_TASK
    from orchestrator.queue.dispatch import task_id

    async with client_side(cluster, registry) as client:
        void = redis.Redis.from_url(cluster.redis_url)

        def lost(run_id: str, node_ids: list[str]) -> None:
            queue = f"lost-{uuid.uuid4().hex}"
            for node_id in node_ids:
                client.celery.send_task(NODE_TASK, args=(run_id, node_id), task_id=task_id(run_id, node_id),
                                        queue=queue)
            void.delete(queue)  # no worker reads that queue, and now it is gone

        try:
            runs = [await client.start(chain(delay_s=0.1), dispatch=lost) for _ in range(3)]
            results = await settle(client.store, runs)
        finally:
            void.close()
        check(results)
        for result in results:
            recovered_s = result.of("t", "started")[0].timestamp - result.events[0][1].timestamp
            print(f"lost start message of {result.run_id} recovered in {recovered_s:.2f} s")
            assert GRACE_S <= recovered_s <= RECOVERY_BOUND_S


@pytest.mark.parametrize("skew", [f"+{SKEW}", f"-{SKEW}"])
async def test_a_worker_and_the_sweeper_with_skewed_clocks_time_out_nothing_early_and_retry_on_time(
    cluster: Cluster, registry: Registry, skew: str,
) -> None:
    retry_s = 2.0
    g = graph([("t", "manual_trigger", "Start"), ("f", "flaky", "Flaky", {"fail_times": 1}),
               ("p", "probe", "After")],
              [("t", "output", "f", "input"), ("f", "output", "p", "input")], settings={"deadline_s": 20})
    g["nodes"][1]["settings"] = {"retry": {"max_attempts": 2, "initial_interval_s": retry_s, "jitter": False}}
    cluster.start_workers(["w3"], skew=skew)
    cluster.start_sweeper(skew=skew)
    try:
        async with client_side(cluster, registry) as client:
            runs = []
            for _ in range(6):
                run_id = await start_run(client.store, client.registry, g, RunRequest({"n": 1}),
                                         dispatch=_dispatch(client))
                runs.append(run_id)
            results = await settle(client.store, runs)
            for result in results:  # the deadline (20 s) is shorter than the skew: no early time-out
                assert result.status == "succeeded", (result.run_id, result.status)
                retried = result.of("f", "retry")[0].timestamp
                again = [e for e in result.of("f", "started") if e.attempt == 2]
                assert len(again) == 1 and again[0].timestamp - retried >= retry_s - 0.05, \
                    (result.run_id, "the retry ran early")
                assert not [e for e in result.of("f", "started") if (e.data or {}).get("reclaimed")]
            assert {e.node_id for r in results for e in r.of("f", "completed")} == {"f"}
            assert sum(len(r.of("f", "completed")) for r in results) == len(runs)
            assert await stale_total(client.store, runs) == 0
    finally:
        cluster.stop_worker("w3")
        cluster.start_sweeper()


def _dispatch(client: Client) -> Any:
    from orchestrator.queue.dispatch import make_dispatch

    return make_dispatch(client.celery)
