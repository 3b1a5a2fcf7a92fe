"""Reading a run's events survives the loss of a cluster node the client leaned on.

redis-py asks one node for the keys of XREAD (its command parser's node, picked at start);
``orchestrator/store/redis_client.py`` reads them itself so that node's death does not
break every event read (the API's streams, the CLI's follow). A 3-primary cluster with a
replica each; the parser's node is SIGKILLed and its replica takes over. Runs are created
with ``ORCH_REDIS_WAIT_REPLICAS=1``: each start is confirmed by its replica, so none is lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from orchestrator.settings import Settings
from orchestrator.store.redis_store import RedisRunStore
from tests.support import Driver, make_plan, redis_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not redis_cluster.available(),
                       reason="redis-server / redis-cli are not installed (apt-get install redis-server redis-tools)"),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[redis_cluster.Cluster]:
    with redis_cluster.redis_cluster(primaries=3, replicas=1) as c:
        yield c


async def read_within(store: RedisRunStore, run_id: str, timeout_s: float) -> int:
    """Events of the run, read as soon as the cluster answers again (within ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return len(await store.read_events(run_id))
        except Exception as exc:  # redis-py's errors while its slot map refreshes
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id}: events unreadable for {timeout_s} s: {exc!r}") from exc
            await asyncio.sleep(0.2)


async def test_event_reads_work_again_after_the_parser_s_node_dies(cluster: redis_cluster.Cluster) -> None:
    # every start waits until the run's replica holds it (the replicas are up: it does)
    settings = Settings(redis_url=cluster.url, redis_wait_replicas=1, redis_wait_timeout_ms=2000)
    store = RedisRunStore.from_url(cluster.url, settings)
    try:
        plans = [make_plan("ab", [("a", "out", "b", "in")], run_id=f"failover-{i}") for i in range(12)]
        for plan in plans:
            await Driver(store, plan).run()  # create_run: WAIT 1 on the run's primary
        before = {plan.run_id: len(await store.read_events(plan.run_id)) for plan in plans}
        parser = store.redis.commands_parser.node  # type: ignore[attr-defined]
        assert parser.port in cluster.primaries(), "the parser's node is a primary"
        cluster.kill(parser.port)
        deadline = time.monotonic() + 30
        while parser.port in cluster.primaries() or len(cluster.primaries()) < 3:
            assert time.monotonic() < deadline, f"no failover: {cluster.primaries()}, {cluster.log_tail(600)}"
            time.sleep(0.2)
        for plan in plans:  # every run, on the dead node's replica too
            assert await read_within(store, plan.run_id, 20) == before[plan.run_id]
    finally:
        await store.close()
