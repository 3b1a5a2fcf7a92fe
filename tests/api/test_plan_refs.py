"""A worker runs a new run of a stored graph version it already ran without reading the
run's plan: the start's node messages carry the plan's content reference. A one-node
run on such a worker is two Redis round trips (the claim, the completion); a message
without a reference reads the run's plan as before; a burst of runs of one version on a
fresh worker reads one plan; a changed or re-created graph has another reference, so
its runs never run a plan the worker kept for the old one (against real Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from orchestrator.host.node_host import HostFactory
from orchestrator.kernel.environment import StepEnvironment
from orchestrator.kernel.local import run_nested
from orchestrator.kernel.step import StepOutcome, run_step
from orchestrator.store.plan_refs import plan_ref
from orchestrator.store.redis_client import client
from orchestrator.store.redis_store import RedisRunStore
from tests.api.conftest import Api, api_registry
from tests.fake_nodes import graph
from tests.support import make_plan
from tests.support.redis_writes import round_trips

pytestmark = pytest.mark.timeout(60)


def one_node(graph_id: str, value: str = "one") -> dict[str, Any]:
    return graph([("a", "emit", "Only", {"value": value})], [], id=graph_id)


class Worker:
    """What one worker process holds: its own Redis client and run store (nothing cached)."""

    def __init__(self, api: Api) -> None:
        self.store = RedisRunStore(client(api.settings.redis_url or "", decode_responses=True), api.settings)
        self.env = StepEnvironment(store=self.store, registry=api_registry(), worker_id="w1",
                                   host_for=HostFactory(api.settings, api.settings.redis_url), subgraphs=run_nested)

    async def run(self, run_id: str, node_id: str, plan: str = "") -> StepOutcome:
        """A node message as ``workers.tasks.run_here`` takes it."""
        if plan:
            await self.store.load_plan(run_id, plan)
        return await run_step(self.env, run_id, node_id)

    async def gets(self) -> int:
        stats = await self.store.redis.info("commandstats")
        return int(stats.get("cmdstat_get", {}).get("calls", 0))


@pytest.fixture
async def worker(api: Api) -> AsyncIterator[Worker]:
    made = Worker(api)
    yield made
    await made.store.close()


async def start(api: Api, graph_id: str) -> str:
    response = await api.client.post(f"/graphs/{graph_id}/runs", json={"input": {"x": 1}})
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


async def output_of(api: Api, run_id: str) -> Any:
    """What the run's node emitted (the run succeeded)."""
    run = (await api.client.get(f"/runs/{run_id}")).json()
    assert run["status"] == "succeeded", run
    return (await api.store.read_outputs(run_id, ["a"]))["a"]["out"].value


async def test_a_new_run_of_a_version_the_worker_ran_is_two_round_trips(api: Api, worker: Worker) -> None:
    assert (await api.client.post("/graphs", json=one_node("g1"))).status_code == 201
    first, second = await start(api, "g1"), await start(api, "g1")
    assert api.plans[first] == api.plans[second]  # one version, one reference
    assert (await worker.run(first, "a", api.plans[first])).status == "succeeded"
    calls: list[int] = []
    with round_trips(calls):
        outcome = await worker.run(second, "a", api.plans[second])
    assert outcome.status == "succeeded"
    assert len(calls) == 2  # the claim, the completion: no plan read
    plan = await worker.store.load_plan(second)
    assert plan.run_id == second and plan.labels["workspace"] == "default"
    assert (await api.client.get(f"/runs/{second}")).json()["status"] == "succeeded"


async def test_a_message_without_a_reference_reads_the_runs_plan(api: Api, worker: Worker) -> None:
    assert (await api.client.post("/graphs", json=one_node("g1"))).status_code == 201
    first, second = await start(api, "g1"), await start(api, "g1")
    await worker.run(first, "a", api.plans[first])
    calls: list[int] = []
    with round_trips(calls):
        outcome = await worker.run(second, "a")  # a re-send, a retry, a message from before references
    assert outcome.status == "succeeded"
    assert len(calls) == 3  # the plan's GET, the claim, the completion
    assert (await api.client.get(f"/runs/{second}")).json()["status"] == "succeeded"


async def test_a_burst_of_runs_of_one_version_on_a_fresh_worker_reads_one_plan(api: Api, worker: Worker) -> None:
    assert (await api.client.post("/graphs", json=one_node("g1"))).status_code == 201
    runs = [await start(api, "g1") for _ in range(20)]
    before = await worker.gets()
    plans = await asyncio.gather(*(worker.store.load_plan(r, api.plans[r]) for r in runs))
    assert await worker.gets() - before == 1
    assert [p.run_id for p in plans] == runs
    assert len({id(p.parsed) for p in plans}) == 1  # the graph is built once for all of them
    outcomes = await asyncio.gather(*(worker.run(r, "a", api.plans[r]) for r in runs))
    assert {o.status for o in outcomes} == {"succeeded"}
    assert await worker.gets() - before == 1


async def test_a_new_version_has_another_reference_and_runs_its_own_plan(api: Api, worker: Worker) -> None:
    assert (await api.client.post("/graphs", json=one_node("g1", "old"))).status_code == 201
    old = await start(api, "g1")
    await worker.run(old, "a", api.plans[old])
    assert (await api.client.put("/graphs/g1", json=one_node("g1", "new"))).status_code == 200
    new = await start(api, "g1")
    assert api.plans[new] != api.plans[old]
    await worker.run(new, "a", api.plans[new])
    assert await output_of(api, new) == "new"
    assert await output_of(api, old) == "old"


async def test_a_graph_deleted_and_created_again_does_not_run_the_kept_plan(api: Api, worker: Worker) -> None:
    assert (await api.client.post("/graphs", json=one_node("g1", "before"))).status_code == 201
    old = await start(api, "g1")
    await worker.run(old, "a", api.plans[old])
    assert (await api.client.delete("/graphs/g1")).status_code == 204
    assert (await api.client.post("/graphs", json=one_node("g1", "after"))).status_code == 201  # version 1 again
    new = await start(api, "g1")
    assert api.plans[new] != api.plans[old]
    await worker.run(new, "a", api.plans[new])
    assert await output_of(api, new) == "after"


async def test_a_burst_whose_first_run_is_gone_reads_each_runs_own_plan(api: Api, worker: Worker) -> None:
    assert (await api.client.post("/graphs", json=one_node("g1"))).status_code == 201
    gone, kept = await start(api, "g1"), await start(api, "g1")
    await api.redis.delete(api.store.keys.plan(gone))  # expired before its message arrived
    results = await asyncio.gather(worker.store.load_plan(gone, api.plans[gone]),
                                   worker.store.load_plan(kept, api.plans[kept]), return_exceptions=True)
    assert type(results[0]).__name__ == "RunNotFoundError"
    assert getattr(results[1], "run_id", None) == kept


async def test_a_worker_names_the_reference_of_a_run_it_holds_by_it_in_what_it_sends(
        api: Api, worker: Worker) -> None:
    assert (await api.client.post("/graphs", json=one_node("g1"))).status_code == 201
    by_ref, read = await start(api, "g1"), await start(api, "g1")
    await worker.store.load_plan(by_ref, api.plans[by_ref])
    await worker.store.load_plan(read)
    assert worker.store.plan_ref(by_ref) == api.plans[by_ref]  # its drains and retries carry it
    assert worker.store.plan_ref(read) == ""  # read without one: its messages go without


def test_runs_of_one_compiled_plan_with_other_labels_have_other_references() -> None:
    compiled = make_plan("ab", [("a", "out", "b", "in")])
    first, second, traced = compiled.for_run("r1"), compiled.for_run("r2"), compiled.for_run("r3")
    for plan in (first, second, traced):
        plan.labels["workspace"] = "default"
    traced.labels["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert plan_ref(first) == plan_ref(second) != plan_ref(traced)
    other = make_plan("abc", [("a", "out", "b", "in"), ("b", "out", "c", "in")]).for_run("r4")
    other.labels["workspace"] = "default"
    assert plan_ref(other) != plan_ref(first)
