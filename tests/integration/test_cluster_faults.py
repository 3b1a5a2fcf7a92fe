"""Faults on the cluster layout: run state on a Redis Cluster, the broker on a plain Redis.

Four scenarios, each on processes of its own (a test kills or cuts them):

* **A primary killed mid-run.** Three primaries with a replica each on loopback
  (``tests/support/redis_cluster.py``, ``cluster-node-timeout`` 2000 ms), two Celery worker
  processes and a sweeper in the test's loop. Runs of a fan-out graph are in flight when
  the primary holding the most of them is SIGKILLed; its replica is promoted and the runs
  continue; more runs start once the cluster is whole again.
* **A worker partitioned from the cluster.** Network namespaces on a private bridge
  (``tests/support/netns.py``): the cluster's three primaries and the broker on host
  ``redis``, workers on ``w1`` and ``w2``, the sweeper (``orchestrator sweeper``) and this
  test's client on ``client``. ``w1`` is cut off from ``redis`` for three leases while it
  runs a node; the node's lease lapses, ``w2`` runs it again, and ``w1``'s late completion
  is refused. (Two leases, as in ``test_host_faults.py``, left the sweeper's pass over 64
  buckets on this loaded machine too little time now and then: ``w1`` renewed first.)

Both end with :func:`check`: every run terminal and succeeded with the right outputs, each
node exactly one ``completed`` event (0 duplicate completions), and that completion from
the node's latest claim.

* **Acknowledged writes lost.** Replication is asynchronous: on the namespaced cluster
  (three primaries with a replica each) a primary's replication link is held back
  (nftables) for a second while runs start and run, then the primary is SIGKILLed and its
  replica promoted. Runs on other primaries must be untouched and every run of the lost
  primary either whole and correct or gone whole. With the default
  ``ORCH_REDIS_WAIT_REPLICAS=0`` runs gone whole (their start was acknowledged, then lost:
  no record, no terminal state) make the test xfail naming them, which it does (measured:
  every run started on that primary in that second). With ``ORCH_REDIS_WAIT_REPLICAS=1``
  (the same failover on another primary) such a start is refused instead, and no
  acknowledged run is lost.

The scenarios read the outcome with the client they started the runs with: its event
reads recover after the failover (redis-py's cluster client asked a fixed node for
``XREAD``'s keys; the store parses them itself).
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
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.kernel.protocol import EventType
from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import PROJECT_ROOT, WorkerConfig, WorkerProcesses
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.service.sweeper import Sweeper, SweepLimits
from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore
from tests.fake_nodes import graph
from tests.integration.conftest import RunResult, collect, wait_for_terminal
from tests.support import netns
from tests.support import redis_cluster as rc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

HERE = Path(__file__).parent
NODE_PATHS = os.pathsep.join([str(HERE / "fault_pack"), str(HERE / "fake_pack")])
LEASE_S = 2.0
SWEEP_PERIOD_S = 0.5
GRACE_S = 1.5
SETTLE_S = 45.0
DEADLINE_S = 120.0
WIDTH = 3  # fan-out branches of each run
WORKER_SLOTS = 16


def settings_for(cluster_url: str, broker_url: str, wait_replicas: int = 0) -> Settings:
    return Settings(node_lease_s=LEASE_S, node_paths=NODE_PATHS, redis_url=cluster_url, broker_url=broker_url,
                    undispatched_grace_s=GRACE_S, redis_wait_replicas=wait_replicas)


def worker_env(broker_url: str) -> dict[str, str]:
    return {"ORCH_NODE_PATHS": NODE_PATHS, "ORCH_NODE_LEASE_S": str(LEASE_S), "ORCH_BROKER_URL": broker_url}


def fanout(delay_s: float) -> dict[str, Any]:
    """t -> b0..b{WIDTH-1} (probes that sleep ``delay_s``) -> j (a probe joining them)."""
    nodes: list[Any] = [("t", "manual_trigger", "Start"), ("j", "probe", "Join", {"value": "joined"})]
    edges: list[Any] = []
    for i in range(WIDTH):
        nodes.append((f"b{i}", "probe", f"Branch {i}", {"delay_s": delay_s, "value": i}))
        edges += [("t", "output", f"b{i}", "input"), (f"b{i}", "output", "j", "input")]
    return graph(nodes, edges)


def check(results: list[RunResult]) -> None:
    """Every run succeeded with its outputs; one completion per node, from its latest claim."""
    for result in results:
        trail = [(e.node_id, e.event_type) for _, e in result.events]
        assert result.status == "succeeded", (result.run_id, result.status, trail)
        assert set(result.states.values()) == {"succeeded"}, (result.run_id, result.states)
        completed = Counter(e.node_id for _, e in result.events if e.event_type == EventType.COMPLETED)
        assert completed == dict.fromkeys(result.states, 1), (result.run_id, "duplicate or missing completion",
                                                              completed)
        for node_id in result.states:
            started, done = result.of(node_id, "started"), result.of(node_id, "completed")
            assert (done[0].data or {})["worker_id"] == (started[-1].data or {})["worker_id"], \
                (result.run_id, node_id, "a stale completion was applied", trail)
        joined = result.output("j")["input"]
        assert sorted(item["value"] for item in joined) == list(range(WIDTH)), (result.run_id, joined)


async def settle(store: RedisRunStore, run_ids: list[str]) -> list[RunResult]:
    """Each run's terminal result. Right after a failover the client may still route a read
    to the dead primary until it learns the new map (redis-py refreshes it after errors, a
    few tries with backoff): a reader tries again, as an SSE client reconnects."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    async def one(run_id: str) -> RunResult:
        deadline = time.monotonic() + SETTLE_S
        while True:
            try:
                return await collect(store, run_id, await wait_for_terminal(store, run_id, SETTLE_S))
            except RedisConnectionError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    return list(await asyncio.gather(*(one(r) for r in run_ids)))


@pytest.fixture(scope="module")
def registry() -> Registry:
    from orchestrator.service.plugins import load_registry

    return load_registry(Settings(node_paths=NODE_PATHS))


# -- a worker partitioned from the cluster (network namespaces) --------------------------------

HOSTS = ["redis", "client", "w1", "w2"]
CLUSTER_PORTS = (7001, 7002, 7003, 7004, 7005, 7006)  # three primaries, a replica each
SEEDS = CLUSTER_PORTS[:3]
BROKER_PORT = 6379


class HostWorker(WorkerProcesses):
    """One Celery worker process on ``host``."""

    def __init__(self, hosts: netns.Hosts, host: str, cluster_url: str, broker_url: str) -> None:
        super().__init__(cluster_url, WorkerConfig(count=1, concurrency=WORKER_SLOTS, pool="threads",
                                                   env=worker_env(broker_url), grace_s=2.0))
        self.prefix = hosts.exec_prefix(host)
        self.host = host

    def command(self, index: int) -> list[str]:
        command = super().command(index)
        command[command.index("-n") + 1] = f"{self.host}-{os.getpid()}@%h"
        return [*self.prefix, *command]


@dataclass
class Layout:
    """The cluster, the broker, two workers and a sweeper, on namespaced hosts."""

    hosts: netns.Hosts
    dir: Path
    servers: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)  # port -> redis-server
    workers: dict[str, HostWorker] = field(default_factory=dict)
    sweeper: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return self.hosts.address["redis"]

    @property
    def cluster_url(self) -> str:
        return "redis+cluster://" + ",".join(f"{self.address}:{port}" for port in SEEDS)

    @property
    def broker_url(self) -> str:
        return f"redis://{self.address}:{BROKER_PORT}/0"

    def _server(self, port: int, *extra: str) -> None:
        folder = self.dir / str(port)
        folder.mkdir()
        self.servers[port] = (subprocess.Popen(
            [*self.hosts.exec_prefix("redis"), rc.SERVER,
             "--bind", self.address, "--port", str(port), "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--dir", str(folder), "--logfile", str(folder / "server.log"), *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True))

    def cli(self, port: int, *args: str, timeout: float = 10.0) -> str:
        done = subprocess.run([*self.hosts.exec_prefix("redis"), rc.CLI, "-h", self.address, "-p", str(port),
                               *args], capture_output=True, text=True, timeout=timeout, check=False)
        return done.stdout + done.stderr

    def start_redis(self) -> None:
        self._server(BROKER_PORT)
        for port in CLUSTER_PORTS:
            self._server(port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                         "--cluster-node-timeout", "2000")
        deadline = time.monotonic() + 20
        for port in (BROKER_PORT, *CLUSTER_PORTS):
            while "PONG" not in self.cli(port, "ping", timeout=2):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server {port} on host redis did not answer")
                time.sleep(0.05)
        out = self.cli(CLUSTER_PORTS[0], "--cluster", "create",
                        *(f"{self.address}:{port}" for port in CLUSTER_PORTS), "--cluster-replicas", "1",
                        "--cluster-yes", timeout=30)
        if "[OK] All 16384 slots covered" not in out:
            raise RuntimeError(f"redis-cli --cluster create failed: {out[-2000:]}")
        while not all("cluster_state:ok" in self.cli(port, "cluster", "info") for port in CLUSTER_PORTS):
            if time.monotonic() > deadline:
                raise RuntimeError("the namespaced cluster is not ok")
            time.sleep(0.1)

    def start_workers(self, hosts: list[str]) -> None:
        started = [HostWorker(self.hosts, host, self.cluster_url, self.broker_url) for host in hosts]
        for worker in started:
            self.workers[worker.host] = worker
            worker.spawn()
        for worker in started:
            worker.wait_ready()

    def start_sweeper(self) -> None:
        env = {**os.environ, "REDIS_URL": self.cluster_url, "ORCH_BROKER_URL": self.broker_url,
               "ORCH_UNDISPATCHED_GRACE_S": str(GRACE_S), "ORCH_MAX_NODE_RECLAIMS": "5",
               "ORCH_NODE_LEASE_S": str(LEASE_S), "PYTHONPATH": str(PROJECT_ROOT)}
        env.pop("ORCH_REDIS_URL", None)
        with open(self.dir / "sweeper.log", "ab") as log:
            self.sweeper = subprocess.Popen(
                [*self.hosts.exec_prefix("client"), sys.executable, "-m", "orchestrator.cli",
                 "sweeper", "--period-s", str(SWEEP_PERIOD_S)],
                env=env, cwd=str(PROJECT_ROOT), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    def sweeper_log(self) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / "sweeper.log").read_text(errors="replace")[-4000:]
        return ""

    def teardown(self) -> None:
        self.hosts.heal()
        if self.sweeper is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.sweeper.pid, signal.SIGKILL)
            self.sweeper.wait()
        for worker in self.workers.values():
            worker.stop()
        for proc in self.servers.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
        self.hosts.teardown()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def layout() -> Iterator[Layout]:
    reason = netns.unavailable() or (None if rc.available() else "needs /usr/bin/redis-server and redis-cli")
    if reason is not None:
        pytest.skip(reason)
    hosts = netns.Hosts(HOSTS, prefix=f"cf{os.getpid()}").build()
    made = Layout(hosts, Path(tempfile.mkdtemp(prefix="orc-cluster-faults-")))
    try:
        made.start_redis()
        made.start_workers(["w1", "w2"])
        made.start_sweeper()
        yield made
    finally:
        made.teardown()


@dataclass
class Client:
    store: RedisRunStore
    celery: Any
    registry: Registry

    async def start(self, g: dict[str, Any]) -> str:
        from orchestrator.queue.dispatch import make_dispatch

        return await start_run(self.store, self.registry, g, RunRequest({"n": 1}, deadline_s=DEADLINE_S),
                               dispatch=make_dispatch(self.celery))


@contextlib.asynccontextmanager
async def client_side(layout: Layout, registry: Registry, wait_replicas: int = 0) -> AsyncIterator[Client]:
    """Everything this block connects to, it connects to from host ``client``."""
    from orchestrator.queue.app import make_celery

    settings = settings_for(layout.cluster_url, layout.broker_url, wait_replicas)
    with netns.inside(layout.hosts.ns("client")):
        store = RedisRunStore.from_url(layout.cluster_url, settings)
        celery = make_celery(layout.broker_url, settings)
        try:
            yield Client(store, celery, registry)
        finally:
            await store.close()
            celery.close()


async def branch_on(store: RedisRunStore, run_id: str, pids: list[int]) -> bool | None:
    """Whether a branch of ``run_id`` started on one of ``pids``; None while none has started."""
    seen = None
    for _, event in await store.read_events(run_id):
        if event.node_id.startswith("b") and event.event_type == EventType.STARTED:
            seen = bool(seen) or int(str((event.data or {})["worker_id"]).rsplit(":", 1)[1]) in pids
    return seen


async def test_a_worker_cut_off_from_the_cluster_loses_its_nodes_to_another_worker_and_completes_nothing_twice(
    layout: Layout, registry: Registry,
) -> None:
    async with client_side(layout, registry) as client:
        g = fanout(delay_s=8.0)
        pids = layout.hosts.pids("w1")
        runs: list[str] = []
        deadline = time.monotonic() + 20
        while True:  # until a branch of some run runs on w1
            runs.append(await client.start(g))
            placed = None
            while placed is None and time.monotonic() < deadline:
                placed = await branch_on(client.store, runs[-1], pids)
                await asyncio.sleep(0.05)
            if placed or time.monotonic() > deadline or len(runs) >= 10:
                break
        assert placed, f"no branch of {len(runs)} runs started on w1"
        layout.hosts.partition("w1", "redis")
        runs += [await client.start(g) for _ in range(2)]
        await asyncio.sleep(3 * LEASE_S)
        layout.hosts.heal()
        results = await settle(client.store, runs)
        stale = sum([await client.store.stale_refusals(r) for r in runs])
    check(results)
    reclaimed = [e for r in results for n in r.states for e in r.of(n, "started") if (e.data or {}).get("reclaimed")]
    assert reclaimed, f"no node was claimed again after w1's lease lapsed; sweeper: {layout.sweeper_log()}"
    assert stale >= 1, "w1's renewal or completion after the heal was not refused"


# -- acknowledged writes lost in a failover ----------------------------------------------------

LOST_TABLE = "lostrepl"  # the nftables table that holds a primary's replication stream back


def replication_of(layout: Layout) -> tuple[int, int, int]:
    """(a primary's port, its replica's port, the replica's link's port on the replica side)."""
    alive = next(port for port in CLUSTER_PORTS if layout.servers[port].poll() is None)
    nodes = [line.split() for line in layout.cli(alive, "cluster", "nodes").splitlines() if line.strip()]
    port_of = {n[0]: int(n[1].split("@")[0].rsplit(":", 1)[1]) for n in nodes}
    live = {n[0] for n in nodes if "fail" not in n[2]}
    primary_id, replica_id = next((n[3], n[0]) for n in nodes if "slave" in n[2] and n[3] in live)
    primary = port_of[primary_id]
    links = layout.cli(primary, "client", "list", "type", "replica")
    link = next(int(f.split("=", 1)[1].rsplit(":", 1)[1]) for f in links.split() if f.startswith("addr="))
    return primary, port_of[replica_id], link


def hold_replication(layout: Layout, primary: int, link: int) -> None:
    """Drop what ``primary`` sends on its replica's link: writes are acknowledged, not copied."""
    rules = (f"table inet {LOST_TABLE} {{\nchain o {{ type filter hook output priority 0; "
             f"tcp sport {primary} tcp dport {link} drop; }}\n}}\n")
    subprocess.run([*layout.hosts.exec_prefix("redis"), "nft", "-f", "-"], input=rules, text=True,
                   check=True, timeout=10)


def release_replication(layout: Layout) -> None:
    subprocess.run([*layout.hosts.exec_prefix("redis"), "nft", "delete", "table", "inet", LOST_TABLE],
                   capture_output=True, check=False, timeout=10)


@dataclass
class Failover:
    """What became of runs started while a primary's replication was held back, after the
    primary was killed and its replica promoted."""

    runs: list[str]
    refused: int  # starts that failed (the caller was told)
    elsewhere: list[str]  # runs on the other primaries
    whole: list[str]  # runs of the lost primary that survived
    gone: list[str]  # runs of the lost primary acknowledged, then lost whole


async def fail_over_with_replication_held(layout: Layout, registry: Registry, wait_replicas: int) -> Failover:
    """Hold back a primary's replication link for a second while 12 runs start and run,
    SIGKILL the primary, wait for its replica's promotion; then sort the runs."""
    from orchestrator.errors import StoreNotReplicatedError
    from orchestrator.kernel.errors import RunNotFoundError

    primary, replica, link = replication_of(layout)
    refused = 0
    async with client_side(layout, registry, wait_replicas) as client:
        g = fanout(delay_s=0.3)
        hold_replication(layout, primary, link)
        try:
            runs = []
            for _ in range(12):
                try:
                    runs.append(await client.start(g))
                except StoreNotReplicatedError:
                    refused += 1
            owners = {r: await owner(client, r) for r in runs}
            await asyncio.sleep(1.0)
            layout.servers[primary].kill()
            layout.servers[primary].wait()
            deadline = time.monotonic() + 20
            while not layout.cli(replica, "role").startswith("master"):
                assert time.monotonic() < deadline, "the replica was not promoted"
                await asyncio.sleep(0.1)
        finally:
            release_replication(layout)
        elsewhere = [r for r in runs if owners[r] != primary]
        check(await settle(client.store, elsewhere))
        whole, gone = [], []
        for run_id in (r for r in runs if owners[r] == primary):
            try:
                await client.store.get_run(run_id)
                whole.append(run_id)
            except RunNotFoundError:
                assert await client.store.read_events(run_id) == [], (run_id, "events of a run with no record")
                gone.append(run_id)
        check(await settle(client.store, whole))
    return Failover(runs, refused, elsewhere, whole, gone)


async def test_writes_a_killed_primary_acknowledged_but_never_copied(layout: Layout, registry: Registry) -> None:
    """Without ``ORCH_REDIS_WAIT_REPLICAS`` (the default): runs on the other primaries are
    untouched; a run of the lost primary is either whole and correct or gone whole (its
    start was acknowledged, then lost: no record, no event, no terminal state); nothing is
    completed twice. Gone runs make the test xfail, naming them."""
    outcome = await fail_over_with_replication_held(layout, registry, wait_replicas=0)
    assert outcome.refused == 0
    if outcome.gone:
        pytest.xfail(f"{len(outcome.gone)} of {len(outcome.gone) + len(outcome.whole)} runs on the killed primary "
                     f"were acknowledged and lost whole (ORCH_REDIS_WAIT_REPLICAS=0): {outcome.gone}")


async def test_with_wait_replicas_a_start_the_replica_did_not_confirm_is_refused_not_lost(
    layout: Layout, registry: Registry,
) -> None:
    """``ORCH_REDIS_WAIT_REPLICAS=1``: the same failover on another primary. A start its
    replica does not confirm in time fails (503 ``store_not_replicated`` from the API), so
    the caller knows; no acknowledged run is lost."""
    outcome = await fail_over_with_replication_held(layout, registry, wait_replicas=1)
    assert outcome.gone == [], f"acknowledged runs lost although the store waited for the replica: {outcome.gone}"
    assert outcome.refused >= 1, "no start landed on the held-back primary: the test proved nothing"
    assert len(outcome.runs) + outcome.refused == 12


async def owner(client: Client, run_id: str) -> int:
    node = client.store.redis.get_node_from_key(client.store.all_run_keys(run_id)[0])  # type: ignore[attr-defined]
    return int(node.port)


# -- a primary killed and failed over ----------------------------------------------------------
# Last in the file: run before the namespaced tests in the same process, the partition test
# saw no node claimed again (twice in two runs; never when run alone or after them). Not
# understood yet.


@pytest.fixture
def failover_cluster() -> Iterator[rc.Cluster]:
    if not rc.available():
        pytest.skip("needs /usr/bin/redis-server and /usr/bin/redis-cli (apt-get install redis-server)")
    with rc.redis_cluster(primaries=3, replicas=1) as cluster:
        yield cluster


def primary_of(cluster: rc.Cluster, key: str) -> int:
    """The port of the primary that serves ``key`` now."""
    host, port, _ = cluster.nodes[0]
    client = redis.RedisCluster(host=host, port=port)
    try:
        node = client.get_node_from_key(key)
        return int(node.port)
    finally:
        client.close()


async def failed_over(cluster: rc.Cluster, victim: int, timeout_s: float = 20.0) -> set[int]:
    """The primaries once ``victim`` is marked failed and a replica serves its slots."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        primaries = set(cluster.primaries())
        if victim not in primaries and len(primaries) == 3:
            cluster.wait_ok(timeout_s=max(1.0, deadline - time.monotonic()))
            return primaries
        await asyncio.sleep(0.1)
    return set(cluster.primaries())


async def test_runs_continue_when_a_primary_is_killed_and_its_replica_takes_over(
    failover_cluster: rc.Cluster, registry: Registry,
) -> None:
    from orchestrator.queue.app import make_celery
    from orchestrator.queue.dispatch import make_dispatch

    cluster = failover_cluster
    with EmbeddedRedis(unix_socket=False) as broker, \
            WorkerProcesses(cluster.url, WorkerConfig(count=2, concurrency=WORKER_SLOTS, pool="threads",
                                                      loglevel="INFO", env=worker_env(broker.url),
               grace_s=2.0)) as workers:
        settings = settings_for(cluster.url, broker.url)
        store = RedisRunStore.from_url(cluster.url, settings)
        celery = make_celery(broker.url, settings)
        dispatch = make_dispatch(celery)
        sweeper = Sweeper(store, dispatch, settings, limits=SweepLimits(max_node_reclaims=3))
        sweeping = asyncio.create_task(sweeper.run_forever(SWEEP_PERIOD_S))
        try:
            g = fanout(delay_s=1.0)
            before = [await start_run(store, registry, g, RunRequest({"n": 1}, deadline_s=DEADLINE_S),
                                      dispatch=dispatch) for _ in range(12)]
            await asyncio.sleep(0.3)  # the branches are running
            owners = Counter(primary_of(cluster, store.all_run_keys(r)[0]) for r in before)
            victim, held = owners.most_common(1)[0]
            primaries = set(cluster.primaries())
            assert victim in primaries and held >= 1
            cluster.kill(victim)
            promoted = await failed_over(cluster, victim)
            assert victim not in promoted and len(promoted) == 3, (promoted, cluster.log_tail())
            after = [await start_run(store, registry, g, RunRequest({"n": 1}, deadline_s=DEADLINE_S),
                                     dispatch=dispatch) for _ in range(6)]
            try:
                results = await settle(store, before + after)
            except AssertionError as exc:
                logs = "\n".join(f"-- worker {i}:\n{workers.log_tail(i, 6000)}" for i in range(workers.count))
                raise AssertionError(f"{exc}\nbefore the kill: {before}\nafter: {after}\n{logs}") from None
        finally:
            sweeping.cancel()
            await asyncio.gather(sweeping, return_exceptions=True)
            await store.close()
            celery.close()
    check(results)
    reclaimed = sum(bool((e.data or {}).get("reclaimed"))
                    for r in results for n in r.states for e in r.of(n, "started"))
    print(f"killed primary {victim} held {held} of {len(before)} runs in flight; nodes claimed again: {reclaimed}")


async def test_batched_commands_reach_the_promoted_replica_after_a_failover(failover_cluster: rc.Cluster) -> None:
    """The first command after a failover, with nothing else in the process having asked
    the cluster for its slots since, goes to the promoted replica, not to an error: the
    auto-pipeline (store/batching.py) sends pipelines that report errors per command, and
    redis-py refreshes its slot map only for pipelines that raise."""
    from orchestrator.store.batching import CommandBatcher
    from orchestrator.store.redis_client import client

    cluster = failover_cluster
    redis_client = client(cluster.url, decode_responses=True)
    batcher = CommandBatcher(redis_client)
    key = "{failover-probe}:k"
    try:
        assert await batcher.execute("SET", key, "before") is True
        victim = primary_of(cluster, key)
        cluster.kill(victim)
        promoted = await failed_over(cluster, victim)
        assert victim not in promoted and len(promoted) == 3, (promoted, cluster.log_tail())
        assert await batcher.execute("SET", key, "after") is True
        assert await batcher.execute("GET", key) == "after"
    finally:
        await redis_client.aclose()
