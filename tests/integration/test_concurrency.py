"""One worker process runs many node steps at once, and waits hold no slot.

Each test starts its own redis-server and ONE Celery worker process (``-P threads``), so
what it measures is that process alone. Nodes come from ``concurrency_pack/`` (a CPU-bound
synchronous node, an awaiting node that reports how late it woke) and ``fake_pack/``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.kernel.registry import Registry
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.local.embedded_workers import WorkerConfig, WorkerProcesses
from orchestrator.queue.dispatch import DRAIN_MAX_HOPS
from orchestrator.service.runs import RunRequest, start_run
from orchestrator.service.sweeper import Sweeper
from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore
from tests.agents.openai_stub import StubServer
from tests.fake_nodes import graph
from tests.integration.conftest import RunResult, collect, read_until, wait_for_terminal

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
NODE_PATHS = os.pathsep.join([str(HERE / "concurrency_pack"), str(HERE / "fake_pack")])
SETTINGS = Settings(node_paths=NODE_PATHS, node_lease_s=2.0)
WIDTH = 100
ENV = {"ORCH_NODE_PATHS": NODE_PATHS, "ORCH_NODE_LEASE_S": "2"}


@dataclass
class Cluster:
    """A redis-server, one worker process, and the handles to start runs on them."""

    server: EmbeddedRedis
    workers: WorkerProcesses
    store: RedisRunStore
    celery: Any
    registry: Registry

    async def start(self, g: dict[str, Any], run_input: Any = None) -> str:
        from orchestrator.queue.dispatch import make_dispatch

        return await start_run(self.store, self.registry, g, RunRequest(run_input), dispatch=make_dispatch(self.celery))

    async def run(self, g: dict[str, Any], run_input: Any = None, timeout_s: float = 30) -> RunResult:
        run_id = await self.start(g, run_input)
        return await collect(self.store, run_id, await wait_for_terminal(self.store, run_id, timeout_s))


@pytest.fixture(scope="module")
def registry() -> Registry:
    from orchestrator.service.plugins import load_registry

    return load_registry(SETTINGS)


@pytest.fixture(scope="module")
def model_stub() -> Iterator[StubServer]:
    """A local OpenAI-compatible server streaming each answer over about a second."""
    with StubServer() as stub:
        stub.chunk_delay_s = 0.2
        yield stub


@pytest.fixture(scope="module")
def wide(model_stub: StubServer) -> Iterator[tuple[EmbeddedRedis, WorkerProcesses]]:
    """One worker process holding up to 150 node steps (its models: the local stub)."""
    # The heavy Filter's evaluation budget (2M steps by default, ~1.5 s of this machine's
    # CPU) raced its 1.5 s timeout: on a quiet machine the budget failed it first. Ten times
    # the budget leaves the timeout to stop it, as the test means (a timeout stops the
    # evaluation at its next step).
    env = {**ENV, "ORCH_OPENAI_BASE_URL": model_stub.base_url, "OPENAI_API_KEY": "sk-test-not-a-real-key",
           "ORCH_EXPRESSION_MAX_TOTAL_STEPS": "20000000"}
    with EmbeddedRedis(unix_socket=False) as server, \
            WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=150, env=env)) as procs:
        yield server, procs


async def cluster_on(server: EmbeddedRedis, procs: WorkerProcesses, registry: Registry) -> Cluster:
    from orchestrator.queue.app import make_celery

    return Cluster(server, procs, RedisRunStore.from_url(server.url, SETTINGS),
                   make_celery(server.url, SETTINGS), registry)


@asynccontextmanager
async def swept(server: EmbeddedRedis, registry: Registry, *procs: WorkerProcesses) -> AsyncIterator[Cluster]:
    """A cluster on ``procs[0]`` with a sweeper running every 0.5 s; on exit the sweeper
    ends and every one of ``procs`` is stopped."""
    from orchestrator.queue.dispatch import make_dispatch

    c = await cluster_on(server, procs[0], registry)
    sweeping = asyncio.create_task(Sweeper(c.store, make_dispatch(c.celery), SETTINGS).run_forever(0.5))
    try:
        yield c
    finally:
        sweeping.cancel()
        await asyncio.gather(sweeping, return_exceptions=True)
        for workers in procs:
            workers.stop()
        await c.store.close()
        c.celery.close()


@pytest.fixture
async def cluster(wide: tuple[EmbeddedRedis, WorkerProcesses], registry: Registry) -> AsyncIterator[Cluster]:
    c = await cluster_on(*wide, registry)
    yield c
    await c.store.close()
    c.celery.close()


def fan_out(width: int, node: tuple[str, dict[str, Any]], nodes: tuple[Any, ...] = (),
            edges: tuple[Any, ...] = ()) -> dict[str, Any]:
    """Start -> ``width`` branches n0..n<width-1>, plus ``nodes`` and ``edges``."""
    node_type, data = node
    branches = [f"n{i}" for i in range(width)]
    return graph(
        [("t", "manual_trigger", "Start"), *[(b, node_type, f"Branch {i}", data) for i, b in enumerate(branches)],
         *nodes],
        [*[("t", "output", b, "input") for b in branches], *edges],
    )


def peak_in_flight(result: RunResult, prefix: str = "n") -> int:
    points = sorted((e.timestamp, 1 if e.event_type == "started" else -1) for _, e in result.events
                    if e.node_id.startswith(prefix) and e.event_type in ("started", "completed"))
    live = peak = 0
    for _, step in points:
        live += step
        peak = max(peak, live)
    return peak


async def test_one_worker_process_overlaps_a_hundred_awaiting_nodes(cluster: Cluster) -> None:
    result = await cluster.run(fan_out(WIDTH, ("late", {"delay_s": 1.0})))
    assert result.status == "succeeded"
    assert len({result.output(f"n{i}")["pid"] for i in range(WIDTH)}) == 1  # one process ran them all
    assert peak_in_flight(result) >= WIDTH * 0.9
    starts = [e.timestamp for _, e in result.events if e.event_type == "started" and e.node_id.startswith("n")]
    ends = [e.timestamp for _, e in result.events if e.event_type == "completed" and e.node_id.startswith("n")]
    assert max(ends) - min(starts) < 5.0  # one at a time would take 100 s
    workers = {e.data["worker_id"] for _, e in result.events if e.event_type == "started" and e.data}
    assert workers == {f"{os.uname().nodename}:{cluster.workers.pids[0]}"}


async def test_a_cpu_bound_node_does_not_delay_the_awaits_of_a_hundred_io_nodes(cluster: Cluster) -> None:
    # the spin starts ~0.2 s in, while the hundred awaits (1 s each) are pending
    g = fan_out(WIDTH, ("late", {"delay_s": 1.0}),
                nodes=(("gate", "late", "Gate", {"delay_s": 0.2}), ("spin", "cpu_spin", "Spin", {"spin_s": 1.5})),
                edges=(("t", "output", "gate", "input"), ("gate", "output", "spin", "input")))
    result = await cluster.run(g)
    assert result.status == "succeeded"
    spin = [e for _, e in result.events if e.node_id == "spin" and e.event_type in ("started", "completed")]
    assert spin[1].timestamp - spin[0].timestamp >= 1.5  # it did burn CPU meanwhile
    lateness = sorted(result.output(f"n{i}")["lateness_s"] for i in range(WIDTH))
    assert lateness[-1] < 0.5, f"awaits woke up to {lateness[-1]:.2f} s late"


async def test_a_heavy_filter_and_a_backtracking_pattern_leave_a_hundred_awaits_on_time(cluster: Cluster) -> None:
    """The red team's two loop-freezers beside a hundred awaiting nodes in one worker process:
    a Filter of 50,000 items x a 150-term condition (froze a worker 29-41 s) and a Conditional
    matching ^(a|aa)+$ (exponential in Python's re). Both now run in threads, their
    timeout_s fires, and the awaits wake up on time."""
    condition = " + ".join(["$item"] * 150) + " > -1"
    heavy = (("f", "filter", "Heavy Filter", {"condition": condition}),
             ("c", "conditional", "Backtracking", {"value": "a" * 40 + "!", "operation": "matches_regex",
                                                  "compare_to": "^(a|aa)+$"}))
    g = fan_out(WIDTH, ("late", {"delay_s": 1.0}), nodes=heavy,
                edges=(("t", "output", "f", "input"), ("t", "output", "c", "input")))
    for node in g["nodes"]:
        if node["id"] in ("f", "c"):  # their failures go on as data: the run keeps the awaits
            node["settings"] = {"timeout_s": 1.5 if node["id"] == "f" else 0.3, "on_error": "continue"}
    result = await cluster.run(g, list(range(50_000)), timeout_s=60)
    for node_id in ("f", "c"):
        errors = [e.data["error"] for e in result.of(node_id, "error") if e.data]
        assert [e["code"] for e in errors] == ["node_timeout"], errors
    woke = [result.output(f"n{i}")["start"] + 1.0 for i in range(WIDTH)]
    filtering = (result.of("f", "started")[0].timestamp, result.of("f", "error")[0].timestamp)
    assert filtering[0] < min(woke) and max(woke) < filtering[1]  # every await woke while it filtered
    lateness = sorted(result.output(f"n{i}")["lateness_s"] for i in range(WIDTH))
    # a loop held by either node would wake them as late as the node ran on it, which its
    # timeout cannot cut short: the filter until its step budget (millions of steps, seconds),
    # the match for seconds; 2 s leaves room for a loaded host (0.86 s was seen in a full suite)
    assert lateness[-1] < 2.0, f"awaits woke up to {lateness[-1]:.2f} s late"


async def test_cancelling_a_run_reaches_a_node_waiting_for_its_retry(cluster: Cluster) -> None:
    g = graph([("t", "manual_trigger", "Start"), ("f", "flaky", "Flaky", {"fail_times": 5})],
              [("t", "output", "f", "input")])
    g["nodes"][1]["settings"] = {"retry": {"max_attempts": 5, "initial_interval_s": 3.0, "jitter": False}}
    run_id = await cluster.start(g)
    await read_until(cluster.store, run_id, lambda e: e.event_type == "retry")
    assert (await cluster.store.node_states(run_id))["f"] == "retrying"
    assert await cluster.store.finish_run(run_id, "cancelled")
    await asyncio.sleep(3.5)  # past the retry's delay: the delayed task finds the run closed
    result = await collect(cluster.store, run_id, await wait_for_terminal(cluster.store, run_id))
    assert result.status == "cancelled"
    assert result.states["f"] == "not_run"
    assert len(result.of("f", "started")) == 1
    assert [e.data["delay_s"] for e in result.of("f", "retry") if e.data] == [3.0]


async def test_a_retry_waits_without_holding_the_worker_slot(registry: Registry) -> None:
    """One slot: a branch queued behind a failing node runs during the retry's delay."""
    g = graph([("t", "manual_trigger", "Start"), ("f", "flaky", "Flaky", {"fail_times": 1}),
               ("p", "probe", "Other", {"delay_s": 0.1})],
              [("t", "output", "f", "input"), ("t", "output", "p", "input")])
    g["nodes"][1]["settings"] = {"retry": {"max_attempts": 2, "initial_interval_s": 1.5, "jitter": False}}
    with EmbeddedRedis(unix_socket=False) as server, \
            WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=1, env=ENV)) as procs:
        c = await cluster_on(server, procs, registry)
        try:
            result = await c.run(g)
        finally:
            await c.store.close()
            c.celery.close()
    assert result.status == "succeeded"
    retry = result.of("f", "retry")[0]
    second_attempt = result.of("f", "started")[1]
    assert second_attempt.attempt == 2 and second_attempt.timestamp - retry.timestamp >= 1.5
    assert result.of("p", "completed")[0].timestamp < second_attempt.timestamp


async def test_sigkill_of_a_worker_with_a_hundred_nodes_in_flight_loses_and_repeats_nothing(
    registry: Registry,
) -> None:

    g = fan_out(WIDTH, ("late", {"delay_s": 2.0}), nodes=(("join", "probe", "Join"),),
                edges=tuple((f"n{i}", "output", "join", "input") for i in range(WIDTH)))
    with EmbeddedRedis(unix_socket=False) as server:
        first = WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=150, env=ENV)).start()
        second = WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=150, env=ENV))
        async with swept(server, registry, first, second) as c:
            run_id = await c.start(g)
            started: set[str] = set()
            await read_until(c.store, run_id, lambda e: e.event_type == "started" and bool(
                started.add(e.node_id)) is False and len(started - {"t"}) >= WIDTH)
            os.killpg(first.pids[0], signal.SIGKILL)
            first.stop()
            second.start()
            result = await collect(c.store, run_id, await wait_for_terminal(c.store, run_id, 60))
    assert result.status == "succeeded"
    completed = Counter(e.node_id for _, e in result.events if e.event_type == "completed")
    assert {n: k for n, k in completed.items() if k != 1} == {}  # no completion applied twice
    assert len(completed) == WIDTH + 2
    assert len(result.output("join")["input"]) == WIDTH
    reclaimed = [e for _, e in result.events if e.event_type == "started" and (e.data or {}).get("reclaimed")]
    assert len(reclaimed) >= WIDTH  # the in-flight ones ran again on the second worker
    assert time.time() - result.events[0][1].timestamp < 60


async def test_a_chain_longer_than_the_interpreters_recursion_limit_runs_in_one_task(cluster: Cluster) -> None:
    """Each node hands its slot to the next: 1,500 of them in a row, in one process."""
    length = 1500
    links = [(f"c{i}", "late", f"Link {i}", {"delay_s": 0}) for i in range(length)]
    g = graph([("t", "manual_trigger", "Start"), *links],
              [("t", "output", "c0", "input"), *[(f"c{i}", "output", f"c{i + 1}", "input") for i in range(length - 1)]])
    result = await cluster.run(g, {"n": 1}, timeout_s=120)
    assert result.status == "succeeded", result.states
    assert len(result.of(f"c{length - 1}", "completed")) == 1


async def broker_pushes(server: EmbeddedRedis) -> int:
    """Messages published to the broker so far (kombu's Redis transport LPUSHes each)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(server.url, decode_responses=True)
    try:
        stats: dict[str, Any] = await client.info("commandstats")
    finally:
        await client.aclose()
    return int(stats.get("cmdstat_lpush", {}).get("calls", 0))


async def test_a_fan_out_wider_than_the_slots_waits_on_the_queue_not_in_the_broker(
    registry: Registry,
) -> None:
    """Ten slots, sixty branches: never more than ten run at once, and the fifty that wait
    cost a few drain messages, not fifty node messages."""
    g = fan_out(60, ("late", {"delay_s": 0.3}))
    with EmbeddedRedis(unix_socket=False) as server, \
            WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=10, env=ENV)) as procs:
        c = await cluster_on(server, procs, registry)
        try:
            before = await broker_pushes(server)
            result = await c.run(g)
            pushed = await broker_pushes(server) - before
        finally:
            await c.store.close()
            c.celery.close()
    assert result.status == "succeeded"
    assert all(result.output(f"n{i}")["lateness_s"] < 5 for i in range(60))
    assert peak_in_flight(result) <= 10
    assert peak_in_flight(result) >= 8  # and the slots were used
    # the start node and a few drains (each passed on by a worker with no free slot at most
    # DRAIN_MAX_HOPS times), not one message per waiting node
    assert pushed <= 1 + 3 * (1 + DRAIN_MAX_HOPS), f"{pushed} broker messages"


async def test_a_second_worker_takes_queued_nodes_and_a_killed_one_loses_none(registry: Registry) -> None:
    """Worker A (five slots) completes the start node of an 80-wide fan-out into a join: it
    takes five, the rest wait on the run's queue; worker B takes some through the drain
    messages. A is SIGKILLed mid-run: every branch completes exactly once on B."""

    width = 80
    g = fan_out(width, ("late", {"delay_s": 0.5}), nodes=(("join", "probe", "Join"),),
                edges=tuple((f"n{i}", "output", "join", "input") for i in range(width)))
    with EmbeddedRedis(unix_socket=False) as server:
        first = WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=5, env=ENV)).start()
        second = WorkerProcesses(server.url, WorkerConfig(count=1, pool="threads", concurrency=20, env=ENV)).start()
        async with swept(server, registry, first, second) as c:
            run_id = await c.start(g)
            done: set[str] = set()
            await read_until(c.store, run_id, lambda e: e.event_type == "completed" and bool(
                done.add(e.node_id)) is False and len(done - {"t"}) >= 15)
            os.killpg(first.pids[0], signal.SIGKILL)
            first.stop()
            result = await collect(c.store, run_id, await wait_for_terminal(c.store, run_id, 60))
    assert result.status == "succeeded"
    completed = Counter(e.node_id for _, e in result.events if e.event_type == "completed")
    assert {n: k for n, k in completed.items() if k != 1} == {}
    assert len(result.output("join")["input"]) == width
    by_worker = Counter(e.data["worker_id"] for _, e in result.events
                        if e.event_type == "started" and e.node_id.startswith("n") and e.data)
    assert len(by_worker) == 2  # both workers took branches off the queue


def chat_graph(token_delay_s: float) -> dict[str, Any]:
    script = [{"say": "turn={turn} history={history} you said {input}", "delay_s": token_delay_s}]
    return graph([("chat", "chat_start", "Chat"),
                  ("assistant", "agent", "Assistant", {"model": "dryrun:scale", "script": script,
                                                       "num_history_runs": 4,
                                                       "prompt": "{{ input.message }}"})],
                 [("chat", "output", "assistant", "input")], id="chat-at-scale")


async def test_a_hundred_concurrent_chat_turns_stream_in_order_on_one_process(cluster: Cluster) -> None:
    chats = [f"chat-{uuid.uuid4().hex[:8]}" for _ in range(WIDTH)]
    g = chat_graph(token_delay_s=0.12)  # about 1 s of streaming per turn

    async def turn(chat: str, n: int) -> RunResult:
        from orchestrator.queue.dispatch import make_dispatch

        run_id = await start_run(cluster.store, cluster.registry, g,
                                 RunRequest({"message": f"m{n} of {chat}"}, session_id=chat),
                                 dispatch=make_dispatch(cluster.celery))
        return await collect(cluster.store, run_id, await wait_for_terminal(cluster.store, run_id, 60))

    began = time.monotonic()
    first = await asyncio.gather(*(turn(chat, 1) for chat in chats))
    elapsed_s = time.monotonic() - began
    second = await asyncio.gather(*(turn(chat, 2) for chat in chats))
    for chat, results in zip(chats, zip(first, second, strict=True), strict=True):
        for n, result in enumerate(results, start=1):
            assert result.status == "succeeded", (chat, n, result.states)
            answer = result.output("assistant")["response"]
            assert answer == f"turn={n} history={n - 1} you said m{n} of {chat}"
            deltas = [e.data for e in result.of("assistant", "agent_event")
                      if e.data and e.data.get("event") == "RunContent" and e.data.get("content")]
            assert "".join(d["content"] for d in deltas) == answer  # every token, in order
    workers = {e.data["worker_id"] for r in first for e in r.of("assistant", "started") if e.data}
    assert len(workers) == 1
    # a hundred one-second turns overlapped (one at a time would take 100 s)
    assert elapsed_s < 20, f"100 concurrent turns took {elapsed_s:.1f} s"


async def test_a_hundred_concurrent_chat_turns_against_an_openai_compatible_server(
        cluster: Cluster, model_stub: StubServer) -> None:
    """The same, with Agno's real OpenAILike client streaming from the local stub server."""
    chats = [f"chat-{uuid.uuid4().hex[:8]}" for _ in range(WIDTH)]
    g = graph([("chat", "chat_start", "Chat"),
               ("assistant", "agent", "Assistant", {"model": "openai-like:stub-model", "num_history_runs": 4,
                                                    "prompt": "{{ input.message }}"})],
              [("chat", "output", "assistant", "input")], id="chat-at-scale-stub")

    async def turn(chat: str, n: int) -> RunResult:
        from orchestrator.queue.dispatch import make_dispatch

        run_id = await start_run(cluster.store, cluster.registry, g,
                                 RunRequest({"message": f"m{n} of {chat}"}, session_id=chat),
                                 dispatch=make_dispatch(cluster.celery))
        return await collect(cluster.store, run_id, await wait_for_terminal(cluster.store, run_id, 60))

    began = time.monotonic()
    first = await asyncio.gather(*(turn(chat, 1) for chat in chats))
    elapsed_s = time.monotonic() - began
    second = await asyncio.gather(*(turn(chat, 2) for chat in chats))
    for chat, results in zip(chats, zip(first, second, strict=True), strict=True):
        for n, result in enumerate(results, start=1):
            errors = [e.data for e in result.of("assistant", "error")]
            assert result.status == "succeeded", (chat, n, result.states, errors,
                                                  cluster.workers.log_tail(0, 6000))
            answer = result.output("assistant")["response"]
            assert answer.strip() == f"Stub says: m{n} of {chat}"
            deltas = [e.data for e in result.of("assistant", "agent_event")
                      if e.data and e.data.get("event") == "RunContent" and e.data.get("content")]
            assert "".join(d["content"] for d in deltas) == answer  # every token, in order
    for chat in chats:  # the second turn's request carried the first turn: history per chat id
        request = next(r["body"] for r in model_stub.requests
                       if r["body"]["messages"][-1].get("content") == f"m2 of {chat}")
        contents = [m.get("content") for m in request["messages"]]
        assert f"m1 of {chat}" in contents
        assert not any(other in str(contents) for other in chats if other != chat)
    workers = {e.data["worker_id"] for r in first for e in r.of("assistant", "started") if e.data}
    assert len(workers) == 1
    assert elapsed_s < 20, f"100 concurrent turns took {elapsed_s:.1f} s"


async def test_a_burst_of_streamed_events_is_stored_whole_and_in_order_in_few_calls(cluster: Cluster) -> None:
    """Events a node emits while its previous append is in flight go with the next call
    (kernel/streaming.py): two nodes' 3,000 back-to-back events each arrive whole, in
    order, between their started and completed events, in far fewer script calls than
    events (a call each before)."""
    count = 3000
    await cluster.store.redis.config_resetstat()
    result = await cluster.run(fan_out(2, ("chatter", {"count": count})))
    calls = int((await cluster.store.redis.info("commandstats"))["cmdstat_evalsha"]["calls"])
    assert result.status == "succeeded", result.states
    for node in ("n0", "n1"):
        kinds = [e.event_type for _, e in result.events if e.node_id == node]
        assert (kinds[0], kinds[-1], len(kinds)) == ("started", "completed", count + 2)
        assert [e.data["i"] for e in result.of(node, "progress") if e.data] == list(range(count))
    assert calls < count / 10, f"{2 * count} streamed events took {calls} script calls"
