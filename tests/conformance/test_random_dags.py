"""Randomized: on small DAGs with random liveness every store reaches the same node
statuses, ready sequences and run status as the pure transition function."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.kernel.memory import MemoryStore
from orchestrator.kernel.scheduling import BarrierState, RunPlan, complete
from orchestrator.kernel.store import RunStore
from orchestrator.local.embedded_redis import EmbeddedRedis
from orchestrator.store.redis_store import RedisRunStore
from tests.conformance.conftest import SETTINGS
from tests.support import Driver, make_plan, new_run_id, node_states

OUT_PORTS = ("a", "b")
IN_PORTS = ("x", "y")
Steps = list[tuple[str, list[str]]]
Dag = tuple[list[str], list[tuple[str, str, str, str]], dict[str, set[str]], dict[str, set[str]]]


@st.composite
def dags(draw: Any) -> Dag:
    n = draw(st.integers(min_value=2, max_value=7))
    nodes = [f"n{i}" for i in range(n)]
    edges: list[tuple[str, str, str, str]] = []
    for j in range(1, n):
        for i in range(j):
            if draw(st.booleans()):
                edges.append((nodes[i], draw(st.sampled_from(OUT_PORTS)), nodes[j],
                              draw(st.sampled_from(IN_PORTS))))
    required = {m: set(draw(st.sets(st.sampled_from(IN_PORTS)))) for m in nodes}
    live = {m: set(draw(st.sets(st.sampled_from(OUT_PORTS)))) for m in nodes}
    return nodes, edges, required, live


def oracle(plan: RunPlan, live: dict[str, set[str]]) -> tuple[Steps, dict[str, str]]:
    """The FIFO run Driver performs, on the pure transition function."""
    state = BarrierState.initial(plan)
    queue, steps = list(plan.start), []
    while queue:
        node = queue.pop(0)
        ready = complete(plan, state, node, "succeeded", live.get(node, set())).ready
        steps.append((node, ready))
        queue.extend(ready)
    return steps, state.status


async def drive(store: RunStore, plan: RunPlan, live: dict[str, set[str]]) -> tuple[Any, ...]:
    driver = Driver(store, plan, live=live)
    await driver.run()
    return driver.ready_lists, await node_states(store, plan.run_id), (
        await store.get_run(plan.run_id)).status


@settings(max_examples=40)
@given(dags())
def test_stores_agree_with_the_transition_function(
    redis_server: EmbeddedRedis,
    dag: Dag,
) -> None:
    nodes, edges, required, live = dag
    plan = make_plan(nodes, edges, required=required, run_id=new_run_id("rand"))
    steps, statuses = oracle(plan, live)

    async def both() -> tuple[Any, Any]:
        redis_store = RedisRunStore.from_url(redis_server.url, SETTINGS)
        try:
            return await drive(MemoryStore(), plan, live), await drive(redis_store, plan, live)
        finally:
            await redis_store.close()

    memory, redis = asyncio.run(both())
    assert memory == redis
    assert redis[0] == steps
    assert redis[1] == statuses
    assert redis[2] == "succeeded"
