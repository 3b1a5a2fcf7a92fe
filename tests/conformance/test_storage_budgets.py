"""Storage budgets on the Redis store, one Redis and a cluster: a workspace's budget holds
across its runs wherever their state lives (on a cluster, runs of one workspace are in
different buckets, each with its own day counter; the check sums them)."""

from __future__ import annotations

import pytest

from orchestrator.kernel.protocol import DataValue
from orchestrator.kernel.store import ClaimRequest, NodeCompletion, NodeStatus
from orchestrator.store import storage_budget
from orchestrator.store.redis_store import RedisRunStore
from tests.support import make_plan, record_for, started_event

KB = 1024


async def test_a_workspace_budget_holds_across_runs_in_every_bucket(
        redis_store: RedisRunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage_budget, "OTHERS_MAX_AGE_S", 0.0)  # no lag: the sum is read at each write
    settings = redis_store.settings.model_copy(update={"workspace_max_bytes": 1000 * KB, "run_max_bytes": 0})
    store = RedisRunStore(redis_store.redis, settings)
    buckets, results = set(), []
    for i in range(4):
        plan = make_plan("ab", [("a", "out", "b", "in")], run_id=f"budget-{i}")
        buckets.add(store.keys.bucket(plan.run_id))
        await store.create_run(plan, record_for(plan))
        claim = await store.claim_node(plan.run_id, ClaimRequest("a", lease_s=5,
                                                                 started=started_event(plan.run_id, "a")),
                                       worker_id="w")
        big = NodeCompletion(status=NodeStatus.SUCCEEDED, outputs={"out": DataValue("data", "x" * (300 * KB))})
        await store.complete_node(plan.run_id, "a", big, token=claim.token)
        results.append((await store.node_states(plan.run_id))["a"])
    if store.keys.tagged:
        assert len(buckets) == 4, "the runs are in four buckets (their counters apart)"
    assert results == ["succeeded", "succeeded", "succeeded", "failed"]  # 3 x 300 KB fit, a 4th does not
    record = await store.get_run("budget-3")
    assert record.error is not None and record.error["limit"] == "ORCH_WORKSPACE_MAX_BYTES"
    used = await store.budget.used("default")
    assert 900 * KB <= used < 1000 * KB


@pytest.mark.parametrize(("char", "fits"), [("x", True), ("é", False), ("😀", False)])
async def test_a_run_budget_counts_the_bytes_stored_not_the_characters(
        redis_store: RedisRunStore, char: str, fits: bool) -> None:
    """Outputs are stored as UTF-8: 150 K characters are 150 KB of 'x', 300 KB of 'é',
    600 KB of '😀', against a run budget of 250 KB."""
    settings = redis_store.settings.model_copy(update={"workspace_max_bytes": 0, "run_max_bytes": 250 * KB})
    store = RedisRunStore(redis_store.redis, settings)
    plan = make_plan("ab", [("a", "out", "b", "in")], run_id=f"utf8-{ord(char)}")
    await store.create_run(plan, record_for(plan))
    claim = await store.claim_node(plan.run_id, ClaimRequest("a", lease_s=5, started=started_event(plan.run_id, "a")),
                                   worker_id="w")
    text = char * (150 * KB)
    done = NodeCompletion(status=NodeStatus.SUCCEEDED, outputs={"out": DataValue("data", text)})
    await store.complete_node(plan.run_id, "a", done, token=claim.token)
    assert (await store.node_states(plan.run_id))["a"] == ("succeeded" if fits else "failed")
    if fits:  # stored as it came, as UTF-8 (not as escapes six times longer)
        assert (await store.read_outputs(plan.run_id, ["a"]))["a"]["out"].value == text
    else:
        record = await store.get_run(plan.run_id)
        assert record.error is not None and record.error["limit"] == "ORCH_RUN_MAX_BYTES"


async def test_a_chain_over_a_run_budget_stores_its_first_link_alone(redis_store: RedisRunStore) -> None:
    """Three 100 KB links against a 250 KB run budget: the chain's one reservation is
    refused, the first link is stored alone (it fits), and it hands the next over, claimed:
    that one runs on its own and meets the budget then."""
    from orchestrator.kernel.store import ChainLink, Take
    from tests.conformance.test_next_claim import TAKEN, compiled_chain_with_t_running

    settings = redis_store.settings.model_copy(update={"workspace_max_bytes": 0, "run_max_bytes": 250 * KB})
    store = RedisRunStore(redis_store.redis, settings)
    run_id, token = await compiled_chain_with_t_running(store)

    def link(node: str) -> ChainLink:
        return ChainLink(node, NodeCompletion(status=NodeStatus.SUCCEEDED,
                                              outputs={"out": DataValue("data", node * (100 * KB))}))

    ready = await store.complete_chain(run_id, [link("t"), link("b"), link("c")], take=Take(1, claim_taken=TAKEN),
                                       token=token)
    assert ready.applied == 1 and ready.nodes == ["b"] and ready.claims["b"].kind == "run"
    states = await store.node_states(run_id)
    assert (states["t"], states["b"], states["c"]) == ("succeeded", "running", "pending")
    assert (await store.read_outputs(run_id, ["t"]))["t"]["out"].value == "t" * (100 * KB)
